"""Defensive readers over the model for the audit.

The model grows while other domains land (PCIe tree, NCCL runs, benchmark records), so the
audit reads it through these helpers: a missing attribute is "unknown", never an error.
Benchmarks are read through their `to_json()` shapes, which the report contract fixes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable

from k3diag.audit.answer import PASS, UNKNOWN
from k3diag.model.source import SourceRef, quoted_aside
from k3diag.model.topology import gpu_index, path_rank
from k3diag.model.words import counted

# Theoretical one-direction bandwidth of a x16 link per generation, GB/s (field notes).
X16_GBPS = {1: 4.0, 2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
SPEED_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
GOOD_PCIE_PATHS = ("PIX", "PSB", "PXB")


def sentence(text: str) -> str:
    """First letter up, one full stop at the end (str.capitalize would lower-case "ACS")."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def attr(obj: Any, name: str, default: Any = None) -> Any:
    try:
        return getattr(obj, name, default)
    except Exception:  # a property of a half-written record must not take the audit down
        return default


def gen_from_speed(speed_gts: float | None) -> int | None:
    if speed_gts is None:
        return None
    for speed, gen in SPEED_TO_GEN.items():
        if abs(speed - float(speed_gts)) < 0.3:
            return gen
    return None


def link_gbps(gen: int | None, width: int | None) -> float | None:
    if gen is None or width is None or gen not in X16_GBPS:
        return None
    return X16_GBPS[gen] * width / 16


def refs_of(obj: Any, depth: int = 1) -> list[SourceRef]:
    """Every SourceRef a record keeps (fields `source`, `sources`, or any field holding refs)."""
    found: list[SourceRef] = []
    if obj is None:
        return found
    if isinstance(obj, SourceRef):
        return [obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for item in dataclasses.fields(obj):
            value = attr(obj, item.name)
            if isinstance(value, SourceRef):
                found.append(value)
            elif isinstance(value, dict) and depth > 0:  # e.g. {matrix name: line}
                found.extend(v for v in list(value.values())[:200] if isinstance(v, SourceRef))
            elif isinstance(value, (list, tuple)) and depth > 0:
                for element in value[:2000]:
                    if isinstance(element, SourceRef):
                        found.append(element)
                    elif dataclasses.is_dataclass(element) and depth > 1:
                        found.extend(refs_of(element, depth - 1))
    else:
        for name in ("source", "sources"):
            value = attr(obj, name)
            if isinstance(value, SourceRef):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                found.extend(v for v in value if isinstance(v, SourceRef))
    return found


def dedupe_refs(refs: Iterable[SourceRef | None], limit: int = 12) -> list[SourceRef]:
    seen: set[tuple] = set()
    out: list[SourceRef] = []
    for ref in refs:
        if ref is None:
            continue
        key = (ref.input, ref.line, ref.text)
        if key in seen:
            continue
        seen.add(key)
        out.append(ref)
        if len(out) >= limit:
            break
    return out


# --------------------------------------------------------------------------- GPUs and links


def gpus(machine: Any) -> list[Any]:
    try:
        return list(machine.sorted_gpus())
    except Exception:
        return []


def settled_by_gpu_count(answer: Any, machine: Any, why_one_gpu_is_enough: str) -> bool:
    """Settle a question about the machine's GPU pairs from the GPU count alone, and say so (True).

    When the evidence shows only some of the GPUs the machine says it has (`Attached GPUs : 8` above a filtered
    `nvidia-smi -q -i 0` or `-i 0,1`), the answer is UNKNOWN and asks for the unfiltered outputs: a PASS judged
    on the GPUs shown would be a verdict on a machine nobody has. With one GPU in all, the question does not
    apply (PASS). Otherwise the question is for its own rule (False)."""
    unseen = machine.unseen_attached_gpus()
    if unseen:
        source = machine.attached_count_source()
        answer.verdict = UNKNOWN
        answer.summary = (f"The evidence holds {len(gpus(machine))} of the {machine.attached_gpu_count()} attached "
                          f"GPUs{quoted_aside(source)}: the output was filtered (`-i`), so the other GPUs and the "
                          "paths between them are not in it.")
        answer.request = "nvidia-smi -q; nvidia-smi topo -m"
        if source is not None:
            answer.evidence.append(source)
        return True
    if len(gpus(machine)) == 1:
        answer.verdict = PASS
        answer.summary = f"Only one GPU: {why_one_gpu_is_enough}."
        return True
    return False


def gpu_links(machine: Any) -> dict[tuple[str, str], Any]:
    """The best-ranked reading of every GPU-GPU pair."""
    best: dict[tuple[str, str], Any] = {}
    for link in attr(machine, "links", []) or []:
        a, b = attr(link, "a"), attr(link, "b")
        if gpu_index(str(a)) is None or gpu_index(str(b)) is None or a == b:
            continue
        key = link.key()
        if key not in best or path_rank(link.path) < path_rank(best[key].path):
            best[key] = link
    return best


def nic_links(machine: Any) -> dict[tuple[str, str], Any]:
    """Best reading of each GPU-NIC pair, keyed (GPU, NIC)."""
    best: dict[tuple[str, str], Any] = {}
    nic_names = set((attr(machine, "nics", {}) or {}).keys())
    for link in attr(machine, "links", []) or []:
        a, b = str(attr(link, "a")), str(attr(link, "b"))
        if gpu_index(a) is not None and (b in nic_names or (gpu_index(b) is None and b.startswith(("NIC", "mlx")))):
            key = (a, b)
        elif gpu_index(b) is not None and (a in nic_names or (gpu_index(a) is None and a.startswith(("NIC", "mlx")))):
            key = (b, a)
        else:
            continue
        if key not in best or path_rank(link.path) < path_rank(best[key].path):
            best[key] = link
    return best


def gpu_numa(machine: Any, gpu: Any) -> int | None:
    node = attr(gpu, "numa_node")
    if node is not None:
        return node
    device = pci_device(machine, attr(gpu, "bus_id"))
    return attr(device, "numa_node") if device is not None else None


def package_of_numa(machine: Any, node: int | None) -> int | None:
    if node is None:
        return None
    host = attr(machine, "host")
    for numa in attr(host, "numa_nodes", []) or []:
        if attr(numa, "id") == node and attr(numa, "package") is not None:
            return attr(numa, "package")
    for package in attr(host, "packages", []) or []:
        if node in (attr(package, "numa_nodes", []) or []):
            return attr(package, "id")
    return None


# --------------------------------------------------------------------------- PCIe


def pci_device(machine: Any, bdf: str | None) -> Any:
    try:
        return machine.pci_device(bdf)
    except Exception:
        return None


def pcie_tree(machine: Any) -> Any:
    """The PCIe tree (k3diag.model.pcie_tree) when that module is there and works, else None.

    It infers parents from bridges' bus ranges (`lspci -vv` alone) and port roles from the
    tree's shape; without it only explicit `parent` fields are followed."""
    cache = attr(machine, "extras")
    if isinstance(cache, dict) and "_audit_pcie_tree" in cache:
        return cache["_audit_pcie_tree"]
    tree = None
    try:
        from k3diag.model.pcie_tree import build_tree

        tree = build_tree(machine)
    except Exception:  # another domain's module, possibly mid-change: fall back to `parent`
        tree = None
    if isinstance(cache, dict):
        cache["_audit_pcie_tree"] = tree
    return tree


def pci_chain(machine: Any, bdf: str | None) -> list[Any]:
    """The device and its bridges up to the root port, nearest first (cycle-safe)."""
    device = pci_device(machine, bdf)
    if device is None:
        return []
    tree = pcie_tree(machine)
    if tree is not None:
        try:
            names = tree.ancestors(attr(device, "bdf"))
            chain = [device] + [d for d in (tree.device(name) for name in names) if d is not None]
            return chain
        except Exception:
            pass
    chain = []
    seen: set[str] = set()
    while device is not None and attr(device, "bdf") not in seen and len(chain) < 32:
        chain.append(device)
        seen.add(attr(device, "bdf"))
        parent = attr(device, "parent")
        device = pci_device(machine, parent) if parent else None
    return chain


def port_role(machine: Any, device: Any) -> str | None:
    tree = pcie_tree(machine)
    if tree is not None and attr(device, "bdf"):
        try:
            role = tree.role(attr(device, "bdf"))
            if role:
                return role
        except Exception:
            pass
    value = attr(device, "port_type") or attr(device, "pcie_port_type")
    return value if isinstance(value, str) else None


_SWITCH_WORDS = re.compile(r"PLX|PEX ?\d|Switchtec|PCIe switch|Broadcom.*PCI|Microsemi|Microchip.*PCI|"
                           r"Upstream Port|Downstream Port|PCI bridge:.*(?:Broadcom|PLX|Microsemi|Microchip)",
                           re.I)


def is_switch_port(device: Any, machine: Any = None) -> bool:
    role = port_role(machine, device) if machine is not None else attr(device, "port_type")
    if isinstance(role, str) and ("upstream" in role.lower() or "downstream" in role.lower()):
        return True
    description = " ".join(str(attr(device, name) or "") for name in ("description", "class_name"))
    return bool(_SWITCH_WORDS.search(description))


def acs_redirect_bridges(machine: Any) -> list[Any]:
    out = []
    for device in attr(machine, "pci", []) or []:
        acs = attr(device, "acs")
        if acs is not None and attr(acs, "redirects_p2p") is True:
            out.append(device)
    return out


def acs_known_bridges(machine: Any) -> list[Any]:
    out = []
    for device in attr(machine, "pci", []) or []:
        acs = attr(device, "acs")
        if acs is not None and attr(acs, "ctl"):
            out.append(device)
    return out


def iommu_mode(machine: Any) -> str | None:
    return attr(attr(machine, "host"), "iommu_mode")


def iommu_refs(machine: Any) -> list[SourceRef]:
    """Lines that told the IOMMU mode: the PCIe layer keeps them in extras["platform"].iommu."""
    extras = attr(machine, "extras", {}) or {}
    state = extras.get("platform") if isinstance(extras, dict) else None
    refs = [ref for ref in (attr(attr(state, "iommu"), "sources", []) or []) if isinstance(ref, SourceRef)]
    refs += [ref for ref in (attr(attr(machine, "host"), "sources", []) or [])
             if isinstance(ref, SourceRef) and "iommu" in ref.text.lower()]
    return refs


# --------------------------------------------------------------------------- NCCL and benchmarks


def nccl_runs(machine: Any) -> list[Any]:
    return list(attr(machine, "nccl", []) or [])


def benchmarks(machine: Any, tool_words: tuple[str, ...]) -> list[tuple[Any, dict]]:
    """(record, its JSON shape) for each benchmark whose tool name contains one of the words."""
    out: list[tuple[Any, dict]] = []
    for record in attr(machine, "benchmarks", []) or []:
        try:
            shape = record.to_json()
        except Exception:
            continue
        if not isinstance(shape, dict):
            continue
        tool = str(shape.get("tool") or attr(record, "tool") or "").lower()
        if any(word in tool for word in tool_words):
            out.append((record, shape))
    return out


def nccl_tests_runs(machine: Any) -> list[tuple[Any, dict]]:
    return benchmarks(machine, ("nccl-tests", "nccl_tests", "rccl-tests"))


def p2p_tests(machine: Any) -> list[tuple[Any, dict]]:
    return benchmarks(machine, ("p2pbandwidth", "p2p-bandwidth", "p2p_bandwidth"))


def as_list(value: Any) -> list:
    """A JSON list, or empty: a benchmark shape from a half-written parser may hold anything."""
    return value if isinstance(value, list) else []


def as_float(value: Any) -> float | None:
    """A finite number, or None (NaN, inf, text and booleans are not measurements)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value) if isinstance(value, (int, float)) else float(str(value))
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def best_busbw(shape: dict) -> float | None:
    """Peak bus bandwidth over message sizes (the figure nccl-tests tables are judged by)."""
    for key in ("max_busbw", "plateau_busbw"):
        value = as_float(shape.get(key))
        if value is not None:
            return value
    best = None
    for row in as_list(shape.get("rows")):
        if not isinstance(row, dict):
            continue
        for side in ("out_of_place", "in_place"):
            cell = row.get(side)
            if isinstance(cell, dict):
                busbw = as_float(cell.get("busbw"))
                if busbw is not None and (best is None or busbw > best):
                    best = busbw
    return best


def average_busbw(shape: dict) -> float | None:
    """`# Avg bus bandwidth`: over every size, small ones included, so always below the peak."""
    return as_float(shape.get("avg_busbw"))


def wrong_count(shape: dict) -> int:
    total = 0
    for row in as_list(shape.get("rows")):
        if not isinstance(row, dict):
            continue
        for side in ("out_of_place", "in_place"):
            cell = row.get(side)
            if isinstance(cell, dict):
                wrong = as_float(cell.get("wrong"))
                if wrong is not None and 0 < wrong < 1e12:
                    total += int(wrong)
    out_of_bounds = as_float(shape.get("out_of_bounds"))
    if out_of_bounds and out_of_bounds == out_of_bounds and out_of_bounds < 1e12:  # not NaN, not absurd
        total += int(out_of_bounds)
    return total


def nranks_of(record: Any, shape: dict) -> int | None:
    for value in (shape.get("nranks"), attr(record, "nranks"), shape.get("ngpus"), attr(record, "ngpus")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    devices = shape.get("devices") or attr(record, "devices")
    if isinstance(devices, list) and devices:
        return len(devices)
    # a table pasted without its header: the command line still says how many GPUs ran
    command = str(shape.get("command") or attr(record, "command") or "")
    match = re.search(r"(?:^|\s)-g\s+(\d+)", command)
    if match:
        ranks = re.search(r"(?:-np|-n)\s+(\d+)", command)
        return int(match.group(1)) * (int(ranks.group(1)) if ranks else 1)
    return None


def summary_refs(record: Any) -> list[SourceRef]:
    """The lines worth quoting for a benchmark: its average/peak lines first, then whatever it kept."""
    refs = refs_of(record, depth=2)
    preferred = [ref for ref in refs if re.search(r"Avg bus bandwidth|Out of bounds|CANNOT Access|P2P=Enabled",
                                                 ref.text, re.I)]
    return dedupe_refs(preferred + refs, limit=4)


def transport_pairs(run: Any) -> dict[str, set[tuple[int, int]]]:
    """Rank pairs per transport family (P2P, SHM, NET) in one NCCL run."""
    pairs: dict[str, set[tuple[int, int]]] = {}
    for conn in attr(run, "connections", []) or []:
        transport = str(attr(conn, "transport") or "").upper()
        src, dst = attr(conn, "src_rank"), attr(conn, "dst_rank")
        if not isinstance(src, int) or not isinstance(dst, int):
            continue
        pairs.setdefault(transport, set()).add((min(src, dst), max(src, dst)))
    return pairs


def connection_refs(run: Any, transport: str | None = None, via_word: str | None = None,
                    limit: int = 3) -> list[SourceRef]:
    refs: list[SourceRef] = []
    for conn in attr(run, "connections", []) or []:
        if transport and str(attr(conn, "transport") or "").upper() != transport:
            continue
        if via_word and via_word.lower() not in str(attr(conn, "via") or "").lower():
            continue
        ref = attr(conn, "source")
        if isinstance(ref, SourceRef):
            refs.append(ref)
        if len(refs) >= limit:
            break
    return refs


def raw_text_search(evidence: Iterable[Any], pattern: re.Pattern[str], limit_bytes: int = 8 * 1024 * 1024
                    ) -> list[SourceRef]:
    """Lines of raw evidence matching a pattern, for facts no parser models (e.g. `lsmod`)."""
    refs: list[SourceRef] = []
    for item in evidence:
        try:
            data, _ = item.read_bytes(limit_bytes)
        except Exception:
            continue
        if not data:
            continue
        from k3diag.parse.text import detect_encoding, normalize

        encoding = detect_encoding(data)
        if encoding == "utf-8" and b"\x00" in data[:4096]:
            continue  # binary; UTF-16 text (saved by PowerShell) has NULs too and is decoded
        text = normalize(data.decode(encoding, errors="replace"))
        for number, line in enumerate(text.splitlines(), start=1):
            if pattern.search(line):
                refs.append(SourceRef(input=item.name, line=number, text=line.strip()[:300]))
                if len(refs) >= 6:
                    return refs
    return refs


_NCCL_IB_DEVICES_RE = re.compile(r"NET/IB\s*:\s*Using\s+(?P<devs>.*?)\s*;\s*OOB")
_NCCL_IB_DEVICE_RE = re.compile(r"\[\d+\](?P<dev>[A-Za-z][\w.-]*?)(?::\d+)?/(?:IB|RoCE)")
_NIC_PCI_CLASS_RE = re.compile(r"Infiniband controller|Ethernet controller|Network controller", re.I)


@dataclasses.dataclass
class NicCount:
    """How many network NICs the evidence shows, counted one way for every place that says it."""

    count: int
    names: list[str]
    how: str  # where the count comes from, in words
    refs: list[SourceRef]
    # NCCL names only the devices its channels used: the machine may have more, so the count is a floor.
    lower_bound: bool = False

    def text(self) -> str:
        shown = ", ".join(self.names[:8]) + (f" and {len(self.names) - 8} more" if len(self.names) > 8 else "")
        floor = "at least " if self.lower_bound else ""
        return f"{floor}{self.count} ({self.how}: {shown})" if self.names else f"{floor}{self.count} ({self.how})"


def network_nics(machine: Any, evidence: Iterable[Any] = ()) -> NicCount | None:
    """The NICs for network traffic: those `nvidia-smi topo -m` or sysfs list (NVSwitch management ports, VPD
    SW_MNG, not counted), else the NIC functions lspci shows, else the RDMA devices NCCL said it used."""
    nics = attr(machine, "nics", {}) or {}
    names = sorted((name for name, nic in nics.items() if not attr(nic, "management_port")),
                   key=lambda n: (len(n), n))
    if names:
        refs = dedupe_refs([ref for name in names for ref in refs_of(nics[name])[:1]], 3)
        managed = len(nics) - len(names)
        how = "as nvidia-smi topo -m lists them" + (f", {counted(managed, 'NVSwitch management port')} not counted"
                                                    if managed else "")
        return NicCount(len(names), names, how, refs)
    devices = [d for d in attr(machine, "pci", []) or []
               if _NIC_PCI_CLASS_RE.search(f"{attr(d, 'class_name') or ''} {attr(d, 'description') or ''}")]
    if devices:
        return NicCount(len(devices), [str(attr(d, "bdf")) for d in devices], "NIC PCI functions in lspci",
                        dedupe_refs([attr(d, "source") for d in devices], 3))
    used: list[str] = []
    refs: list[SourceRef] = []
    for ref in raw_text_search(evidence, _NCCL_IB_DEVICES_RE):
        match = _NCCL_IB_DEVICES_RE.search(ref.text or "")
        for device in _NCCL_IB_DEVICE_RE.finditer(match.group("devs") if match else ""):
            if device.group("dev") not in used:
                used.append(device.group("dev"))
                refs.append(ref)
    if used:
        return NicCount(len(used), used, "RDMA devices NCCL used (NET/IB)", dedupe_refs(refs, 3), lower_bound=True)
    # Last, the NET devices NCCL's channels went through (`via NET/IB/3/GDRDMA`: device 3 of the host).
    indices: dict[str, SourceRef | None] = {}
    for run in nccl_runs(machine):
        for conn in attr(run, "connections", []) or []:
            found = _NCCL_NET_VIA_RE.match(str(attr(conn, "via") or ""))
            if str(attr(conn, "transport") or "").upper() == "NET" and found and found.group(0) not in indices:
                indices[found.group(0)] = attr(conn, "source")
    if indices:
        names = sorted(indices, key=lambda n: (len(n), n))
        return NicCount(len(names), names, "NET devices NCCL's channels used",
                        dedupe_refs([indices[n] for n in names], 3), lower_bound=True)
    return None


_NCCL_NET_VIA_RE = re.compile(r"NET/(?:IB|Socket)/\d+")
