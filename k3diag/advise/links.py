"""What a group of GPUs talks over: link class, bandwidth and latency for the roofline.

Three sources, best first: an nccl-tests result the machine carries (measured busbw, and the
small-message time as latency), the topology's path code between the group's GPUs (NV18, XGMI,
PIX, SYS...) with P2P status, and the catalog's default fabric for the GPU model. Each LinkInfo
says which one it used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from k3diag.advise.catalog import GpuCatalog, GpuSpec

# Link classes that make TP or EP slow enough to warn about.
SLOW_CLASSES = frozenset(
    {"pcie-p2p", "pcie-host-bridge", "pcie-sys", "host-staged", "ib-400g", "roce-400g", "thunderbolt5-rdma", "ethernet-100g"}
)
NETWORK_CLASSES = frozenset({"ib-400g", "roce-400g", "thunderbolt5-rdma", "ethernet-100g"})
P2P_BROKEN = frozenset({"NS", "GNS", "CNS", "TNS", "DR"})
_NV_RE = re.compile(r"^NV(\d+)$")


@dataclass
class LinkInfo:
    klass: str
    code: str | None  # topology path code, when one was seen
    bandwidth_gbs: float  # effective bus bandwidth for the ring / all-to-all formulas
    latency_us: float  # per step of a ring
    measured: bool
    source: str  # how the figures were obtained
    label: str = ""  # what the link is, in words

    @property
    def slow(self) -> bool:
        return self.klass in SLOW_CLASSES

    @property
    def pcie_only(self) -> bool:
        return self.klass in SLOW_CLASSES and self.klass not in NETWORK_CLASSES

    def to_json(self) -> dict:
        return {
            "class": self.klass,
            "code": self.code,
            # a layout dimension of one GPU has no link: infinite bandwidth, written as null (`model.json_text`)
            "bandwidth_gbs": round(self.bandwidth_gbs, 2),
            "latency_us": round(self.latency_us, 2),
            "measured": self.measured,
            "source": self.source,
            "label": self.label,
        }


LOCAL = LinkInfo("none", None, float("inf"), 0.0, False, "one GPU: no link", "no link")


def _pcie_link(gpu: GpuSpec, catalog: GpuCatalog, klass: str, code: str | None) -> LinkInfo:
    link_class = catalog.link_classes[klass]
    gen = gpu.pcie_gen or 4
    raw = catalog.pcie_x16_gbs.get(gen, 31.5)
    eff = link_class.pcie_efficiency or 0.5
    return LinkInfo(
        klass,
        code,
        raw * eff,
        link_class.latency_us,
        False,
        f"{link_class.label}: PCIe Gen{gen} x16 {raw:g} GB/s per direction x {eff:g}",
        link_class.label,
    )


def _network_link(catalog: GpuCatalog, klass: str) -> LinkInfo:
    link_class = catalog.link_classes[klass]
    return LinkInfo(klass, "NET", float(link_class.bandwidth_gbs or 10.0), link_class.latency_us, False, link_class.label, link_class.label)


def fabric_link(gpu: GpuSpec, catalog: GpuCatalog, size: int, code: str | None = None) -> LinkInfo:
    """The link class a group of `size` GPUs of this model uses inside one node."""
    fabric = gpu.fabric
    defaults = catalog.fabric_defaults
    nvlinks = None
    if code:
        match = _NV_RE.match(code)
        if match:
            nvlinks = int(match.group(1))
    if fabric.kind == "nvlink" and (code is None or nvlinks is not None):
        links = nvlinks if nvlinks is not None else fabric.links
        eff = defaults["nvlink"]["efficiency"]
        bw = links * fabric.per_link_gbs * eff
        return LinkInfo(
            "nvlink",
            code or f"NV{links}",
            bw,
            defaults["nvlink"]["latency_us"],
            False,
            f"NVLink{fabric.generation or ''} {links} links x {fabric.per_link_gbs:g} GB/s per direction x {eff:g}",
            f"NVLink{fabric.generation or ''}",
        )
    if fabric.kind == "xgmi" and (code is None or code == "XGMI"):
        links = min(max(size - 1, 1), fabric.links)
        eff = defaults["xgmi"]["efficiency"]
        return LinkInfo(
            "xgmi",
            "XGMI",
            links * fabric.per_link_gbs * eff,
            defaults["xgmi"]["latency_us"],
            False,
            f"Infinity Fabric mesh: {links} of {fabric.links} links x {fabric.per_link_gbs:g} GB/s per direction x {eff:g}",
            "Infinity Fabric (xGMI)",
        )
    if code in ("PIX", "PSB", "PXB"):
        klass = "pcie-p2p"
    elif code == "SYS":
        klass = "pcie-sys"
    elif code in ("PHB", "NODE", "PCIE"):
        klass = "pcie-host-bridge"
    else:
        klass = "pcie-host-bridge"
    if not gpu.p2p:
        klass = "host-staged"
    return _pcie_link(gpu, catalog, klass, code)


def path_code_worst(codes: Iterable[str | None]) -> str | None:
    """The worst of several path codes, by the topology model's own ranking."""
    from k3diag.model.topology import path_rank

    known = [c for c in codes if c]
    if not known:
        return None
    return max(known, key=path_rank)


def machine_group_code(machine: Any, group: list[int]) -> tuple[str | None, bool]:
    """(worst path code among the group's pairs, True when some pair's P2P is reported broken).

    None when any pair's path is unknown: a partial answer would look better than it is.
    """
    codes: list[str | None] = []
    broken = False
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            link = machine.link(f"GPU{a}", f"GPU{b}") if hasattr(machine, "link") else None
            codes.append(link.path if link is not None else None)
            for status in list(machine.p2p_status(f"GPU{a}", f"GPU{b}")) + list(machine.p2p_status(f"GPU{b}", f"GPU{a}")):
                if status.capability in ("read", "write", "unknown", "pcie") and status.status in P2P_BROKEN:
                    broken = True
    if not codes or any(c is None for c in codes):
        return None, broken
    return path_code_worst(codes), broken


def nccl_measurement(machine: Any, ops: tuple[str, ...], size: int) -> tuple[float, float | None, str] | None:
    """(busbw GB/s, per-step latency us or None, description) from the machine's nccl-tests runs."""
    if machine is None:
        return None
    best: tuple[int, float, float | None, str] | None = None
    for bench in getattr(machine, "benchmarks", []) or []:
        if getattr(bench, "tool", None) != "nccl-tests":
            continue
        try:
            data = bench.to_json()
        except Exception:  # a benchmark record that cannot describe itself is skipped, not fatal
            continue
        op = str(data.get("op") or "").lower().replace("_", "").replace("perf", "")
        if not any(o.replace("_", "") in op for o in ops):
            continue
        busbw = data.get("max_busbw")
        nranks = data.get("nranks")
        if not isinstance(busbw, (int, float)) or busbw <= 0:
            continue
        n = nranks if isinstance(nranks, int) and nranks > 1 else size
        latency = None
        rows = [r for r in data.get("rows") or [] if isinstance(r, dict)]
        timed = [
            (r.get("size_bytes"), (r.get("out_of_place") or {}).get("time_us"))
            for r in rows
            if isinstance(r.get("size_bytes"), (int, float)) and isinstance((r.get("out_of_place") or {}).get("time_us"), (int, float))
        ]
        if timed and n > 1:
            smallest = min(timed, key=lambda t: t[0])
            steps = 2 * (n - 1) if "allreduce" in op else (n - 1)
            latency = float(smallest[1]) / max(steps, 1)
        distance = abs(n - size)
        desc = f"nccl-tests {data.get('op')} on {n} ranks: max busbw {busbw:g} GB/s"
        if latency is not None:
            desc += f", {latency:.1f} us per step from the smallest message"
        if best is None or distance < best[0] or (distance == best[0] and busbw > best[1]):
            best = (distance, float(busbw), latency, desc)
    if best is None:
        return None
    return best[1], best[2], best[3]


def group_link(
    gpu: GpuSpec,
    catalog: GpuCatalog,
    group: list[int],
    node_of: dict[int, int],
    machine: Any = None,
    planner_code: str | None = None,
    collective: str = "all_reduce",
) -> tuple[LinkInfo, list[str]]:
    """The link a collective over `group` runs on, and notes on how that was decided."""
    notes: list[str] = []
    if len(group) <= 1:
        return LOCAL, notes
    nodes = {node_of.get(g, 0) for g in group}
    if len(nodes) > 1:
        return _network_link(catalog, gpu.scale_out), notes
    code: str | None = None
    broken = False
    if machine is not None:
        code, broken = machine_group_code(machine, group)
        if code is None and planner_code:
            code = planner_code
    if gpu.fabric.kind == "unified":
        return _network_link(catalog, gpu.scale_out), notes
    info = fabric_link(gpu, catalog, len(group), code)
    if broken and info.klass not in ("nvlink", "xgmi"):
        info = _pcie_link(gpu, catalog, "host-staged", code)
        notes.append(f"P2P is reported unavailable between GPUs {group}: copies are staged through host memory.")
    ops = ("allreduce",) if collective == "all_reduce" else ("alltoall", "allreduce")
    measured = nccl_measurement(machine, ops, len(group))
    if measured is not None:
        busbw, latency, desc = measured
        info = LinkInfo(info.klass, info.code, busbw, latency if latency is not None else info.latency_us, True, desc, info.label)
    return info, notes
