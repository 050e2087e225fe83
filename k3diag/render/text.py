"""Small wording helpers the terminal report and its details share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from k3diag.model.topology import gpu_index, nvlink_count

if TYPE_CHECKING:
    from k3diag.model.machine import Machine

SEVERITY_STYLE = {"fail": "bold red", "warn": "yellow", "info": "cyan"}
SEVERITY_LABEL = {"fail": "FAIL", "warn": "WARN", "info": "INFO"}
STATUS_STYLE = {"ok": "bold green", "warn": "bold yellow", "fail": "bold red", "unknown": "bold cyan"}
STATUS_LABEL = {"ok": "OK", "warn": "WARN", "fail": "FAIL", "unknown": "UNKNOWN"}
# Shown in a table cell where the evidence holds no value; the tables say so under them.
NOT_SEEN = "-"


def path_style(path: str | None) -> str | None:
    if path is None:
        return "dim"
    if nvlink_count(path) is not None and (nvlink_count(path) or 0) > 0 or path in ("XGMI", "PIX", "PSB", "PXB"):
        return "green"
    if path in ("PHB", "NODE", "PCIE"):
        return "yellow"
    if path in ("SYS", "SOC"):
        return "red"
    return None


def fmt(value: Any, unit: str = "") -> str:
    """A value for a table cell: `-` when the evidence holds none, never `None` or `?`."""
    if value is None or value == "":
        return NOT_SEEN
    if isinstance(value, float):
        return f"{value:g}{unit}"
    return f"{value}{unit}"


def gpu_span(indices: list[int]) -> str:
    """GPU0-3,6 for [0, 1, 2, 3, 6]."""
    ordered = sorted(set(indices))
    runs: list[str] = []
    start = prev = None
    for i in ordered + [None]:  # type: ignore[list-item]
        if start is not None and (i is None or i != prev + 1):
            runs.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = None
        if i is not None and start is None:
            start = i
        prev = i
    return "GPU" + ",".join(runs) if runs else ""


def group_text(group: list[int]) -> str:
    return "{" + ",".join(str(i) for i in group) + "}"


def numa_of(machine: "Machine", group: list[int]) -> int | None:
    """The NUMA node every GPU of the group is on, when the evidence says so for all of them."""
    nodes = {machine.gpus[i].numa_node if i in machine.gpus else None for i in group}
    if len(nodes) == 1 and None not in nodes:
        return next(iter(nodes))
    return None


def is_amd(machine: "Machine") -> bool:
    vendors = {(gpu.vendor or "").upper() for gpu in machine.gpus.values()}
    return "AMD" in vendors and "NVIDIA" not in vendors


def launch_line(machine: "Machine", group: list[int]) -> str:
    """A ready-to-paste prefix: the GPUs by PCI bus order, and the NUMA binding when the node is known."""
    ids = ",".join(str(i) for i in group)
    env = f"HIP_VISIBLE_DEVICES={ids}" if is_amd(machine) else f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ids}"
    node = numa_of(machine, group)
    return env + (f" numactl --cpunodebind={node} --membind={node}" if node is not None else "")


def gpu_pair_counts(machine: "Machine") -> dict[str, int]:
    """How many GPU pairs have each best path, for a one-line summary of the matrix."""
    counts: dict[str, int] = {}
    names = sorted({n for link in machine.links for n in (link.a, link.b) if gpu_index(n) is not None},
                   key=lambda n: gpu_index(n) or 0)
    for x, a in enumerate(names):
        for b in names[x + 1:]:
            link = machine.link(a, b)
            if link is not None and link.path:
                counts[link.path] = counts.get(link.path, 0) + 1
    return counts


def first_sentence(text: str | None, limit: int = 240) -> str:
    if not text:
        return ""
    for end in (". ", "; "):
        cut = text.find(end)
        # a cut inside "(...)" or a `quoted command` would leave it open on the one line shown
        while 0 < cut < limit and not _closed(text[:cut]):
            cut = text.find(end, cut + 1)
        if 0 < cut < limit:
            return text[: cut + 1].rstrip(";") if end == ". " else text[:cut] + "."
    if len(text) <= limit:
        return text
    comma = text.rfind(", ", 0, limit)
    while comma > 0 and not _closed(text[:comma]):
        comma = text.rfind(", ", 0, comma)
    return (text[:comma] if comma > 0 else text[:limit].rsplit(" ", 1)[0]) + " ..."


def _closed(head: str) -> bool:
    return head.count("(") <= head.count(")") and head.count("`") % 2 == 0
