"""What each GPU pair is worth for tensor parallelism: measured bandwidth when a benchmark covers the pair,
else an estimate from the path class (`nvidia-smi topo -m` legend order), P2P status, NUMA and NIC locality.

`k3diag.analyze.planner` partitions GPUs with these qualities; docs/planner.md has the tables.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from k3diag.model.machine import Machine
from k3diag.model.topology import Gpu, Link, gpu_index, nvlink_count, pair_key, path_rank

# =====================================================================================================
# From the machine model to pair qualities
# =====================================================================================================

# PCIe bandwidth per lane and direction, GB/s, after line encoding (Gen1/2 8b/10b, Gen3+ 128b/130b).
PCIE_LANE_GBS: dict[int, float] = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# Share of the theoretical figure a peer copy reaches (field notes: Gen4 x16 31.5 GB/s, ~25 achieved).
PCIE_ACHIEVED = 0.8
DEFAULT_PCIE_GEN = 4
DEFAULT_PCIE_WIDTH = 16
# Fraction of the PCIe link a peer copy keeps, by how far apart the GPUs are (legend of `topo -m`).
PCIE_PATH_FACTOR: dict[str, float] = {
    "PIX": 1.0,
    "PSB": 1.0,
    "PXB": 0.9,
    "PHB": 0.8,
    "NODE": 0.7,
    "SYS": 0.5,
}
# No P2P: copies bounce through host memory (NCCL's SHM transport), worse than a P2P SYS path.
NO_P2P_FACTOR = 0.4
# NVLink per link and direction, GB/s: NVLink 1 20; NVLink 2/3/4 25; NVLink 5 (Blackwell) 50.
NVLINK_GBS_DEFAULT = 25.0
NVLINK_GBS_BY_NAME: tuple[tuple[str, float], ...] = (("GB300", 50.0), ("GB200", 50.0), ("B300", 50.0),
                                                       ("B200", 50.0), ("B100", 50.0), ("P100", 20.0))
# AMD Infinity Fabric (xGMI) per link and direction: MI300-class 64 GB/s, MI200-class 50 GB/s.
XGMI_GBS_DEFAULT = 50.0
XGMI_GBS_BY_NAME: tuple[tuple[str, float], ...] = (("MI3", 64.0),)
# Width of one bandwidth tier: 2**(1/8), about 9 %. Pairs within a tier count as equally fast for
# the slowest-link criterion, so measurement noise does not override NUMA or NIC locality.
TIER_STEPS_PER_OCTAVE = 8
_UNKNOWN_TIER = -10_000
_NEAR_NIC_PATHS = {"PIX", "PXB", "PSB"}
_P2P_BAD = {"NS", "CNS", "GNS", "TNS", "DR"}
_P2P_CAPABILITIES = {"read", "write", "unknown"}
# Link origins whose path says nothing about NVLink (`nvidia-smi topo -mp` prints PCIe paths only).
NVLINK_BLIND_ORIGINS = {"nvidia-smi-topo-mp"}


@dataclass
class PairQuality:
    """How good the link between two GPUs is, for grouping."""

    path: str | None  # best path code known ("NV18", "PIX", "SYS", "XGMI", "PCIE"), None when unknown
    bandwidth_gbs: float | None  # per direction; measured when present, else estimated from the path
    measured: bool
    p2p_ok: bool | None  # from P2P status (read/write capability OK), None when unknown
    same_numa: bool | None
    near_nic: str | None = None  # a NIC both GPUs reach through PIX/PXB, when NICs are known
    basis: str = ""  # where the bandwidth figure comes from, in words
    # The path came only from a source blind to NVLink (`topo -mp`): an NVLink may join the pair.
    nvlink_unknown: bool = False

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "bandwidth_gbs": self.bandwidth_gbs,
            "measured": self.measured,
            "p2p_ok": self.p2p_ok,
            "same_numa": self.same_numa,
            "near_nic": self.near_nic,
            "basis": self.basis,
            "nvlink_unknown": self.nvlink_unknown,
        }


@dataclass
class _Facts:
    """Everything about the machine the planner reads, indexed once (Machine.link scans every link)."""

    gpus: list[int]
    links: dict[tuple[str, str], Link]
    p2p: dict[tuple[str, str], list[str]]
    measured: dict[tuple[int, int], tuple[float, str]]
    can_access: dict[tuple[int, int], bool]
    nic_paths: dict[int, dict[str, str]]  # GPU index -> NIC name -> path code
    nic_names: dict[str, str]  # endpoint name -> name to show (NIC0 -> mlx5_0)
    nvlink_seen: set[tuple[str, str]]  # pairs some NVLink-aware source covered


def known_gpus(machine: Machine) -> list[int]:
    """Every GPU index any source mentions: the GPU table, links, P2P statuses."""
    indices = set(machine.gpus)
    for link in machine.links:
        for name in (link.a, link.b):
            index = gpu_index(name)
            if index is not None:
                indices.add(index)
    for status in machine.p2p:
        for name in (status.src, status.dst):
            index = gpu_index(name)
            if index is not None:
                indices.add(index)
    return sorted(indices)


def _collect_facts(machine: Machine) -> _Facts:
    gpus = known_gpus(machine)
    links: dict[tuple[str, str], Link] = {}
    nvlink_seen: set[tuple[str, str]] = set()
    for link in machine.links:
        key = link.key()
        if link.origin not in NVLINK_BLIND_ORIGINS and link.path is not None:
            nvlink_seen.add(key)
        held = links.get(key)
        if held is None or path_rank(link.path) < path_rank(held.path):
            links[key] = link
    p2p: dict[tuple[str, str], list[str]] = {}
    for status in machine.p2p:
        if status.capability in _P2P_CAPABILITIES and status.status:
            p2p.setdefault(pair_key(status.src, status.dst), []).append(status.status.strip().upper())
    measured, can_access = _measured_bandwidths(machine)
    nic_names: dict[str, str] = {}
    for nic in machine.nics.values():
        nic_names[nic.name] = nic.device or nic.name
    nic_paths: dict[int, dict[str, str]] = {}
    for (a, b), link in links.items():
        ia, ib = gpu_index(a), gpu_index(b)
        if (ia is None) == (ib is None) or link.path is None:
            continue
        gpu, other = (ia, b) if ia is not None else (ib, a)
        nic_paths.setdefault(gpu, {})[other] = link.path  # type: ignore[index]
        nic_names.setdefault(other, other)
    return _Facts(gpus, links, p2p, measured, can_access, nic_paths, nic_names, nvlink_seen)


# -- measured bandwidth ----------------------------------------------------------------------------------


def _matrix_value(cell: Any) -> float | None:
    if isinstance(cell, bool):
        return None
    if isinstance(cell, (int, float)):
        return float(cell) if cell > 0 and math.isfinite(cell) else None
    if isinstance(cell, str):
        try:
            value = float(cell)
        except ValueError:
            return None
        return value if value > 0 and math.isfinite(value) else None
    return None


def _p2p_matrix_rank(name: str) -> tuple[int, float] | None:
    """Which p2pBandwidthLatencyTest matrix to trust, and the factor to per-direction GB/s."""
    lowered = name.lower()
    if "bandwidth" not in lowered or "p2p=enabled" not in lowered.replace(" ", ""):
        return None
    if lowered.startswith("bidirectional") or "bidirectional" in lowered:
        return (2, 0.5)  # both directions at once: the figure is the sum of the two
    if "read" in lowered:
        return (1, 1.0)
    return (0, 1.0)  # unidirectional writes (the default copy) first


def _nvbandwidth_rank(name: str) -> tuple[int, float] | None:
    lowered = name.lower()
    if not lowered.startswith("device_to_device"):
        return None
    if "bidirectional" in lowered:
        return (3, 0.5) if lowered.endswith("_total") else (2, 1.0)
    return (0 if "_ce" in lowered else 1, 1.0)


def _device_map(record: dict, machine: Machine, size: int) -> dict[int, int]:
    """Matrix index -> GPU index. By PCI bus when the record names each device's bus, else identity.

    CUDA numbers devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so the bus is the only
    safe join; identity is the fallback (docs/planner.md says so).
    """
    devices = record.get("gpus") or record.get("devices")
    if isinstance(devices, list) and len(devices) == size and machine.gpus:
        by_bus: dict[int, int] = {}
        for gpu in machine.gpus.values():
            bus = _bus_number(gpu.bus_id)
            if bus is not None:
                by_bus.setdefault(bus, gpu.index)
        mapping: dict[int, int] = {}
        for position, device in enumerate(devices):
            if not isinstance(device, dict):
                break
            raw = next((device[key] for key in ("bus_id", "pci_bus_id", "pciBusID", "bus") if key in device), None)
            bus = raw if isinstance(raw, int) and not isinstance(raw, bool) else _bus_number(raw)
            if bus is None or bus not in by_bus:
                break
            mapping[position] = by_bus[bus]
        if len(mapping) == size and len(set(mapping.values())) == size:
            return mapping
    return {i: i for i in range(size)}


def _bus_number(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    match = re.search(r"(?:^|:)([0-9a-fA-F]{1,2}):[0-9a-fA-F]{1,2}\.[0-7]$", value.strip())
    if match:
        return int(match.group(1), 16)
    return None


def _measured_bandwidths(
    machine: Machine,
) -> tuple[dict[tuple[int, int], tuple[float, str]], dict[tuple[int, int], bool]]:
    """Per GPU pair (a < b): the slower direction of the most trusted measured matrix."""
    candidates: list[tuple[tuple[int, int, int], dict[int, int], list, float, str]] = []
    can_access: dict[tuple[int, int], bool] = {}
    pair_runs: list[tuple[tuple[int, int], float, str]] = []
    for order, bench in enumerate(machine.benchmarks):
        try:
            record = bench.to_json()
        except Exception:  # a record that cannot serialize simply contributes nothing
            continue
        if not isinstance(record, dict):
            continue
        tool = str(getattr(bench, "tool", record.get("tool", "")))
        tables: list[tuple[str, Any, tuple[int, float] | None, int]] = []
        if "p2p" in tool.lower() and isinstance(record.get("matrices"), dict):
            for name, matrix in record["matrices"].items():
                tables.append((str(name), matrix, _p2p_matrix_rank(str(name)), 0))
            access = record.get("can_access")
            if isinstance(access, list):
                mapping = _device_map(record, machine, len(access))
                for i, row in enumerate(access):
                    for j, cell in enumerate(row if isinstance(row, list) else []):
                        if i != j and isinstance(cell, (bool, int)) and i in mapping and j in mapping:
                            key = tuple(sorted((mapping[i], mapping[j])))
                            can_access[key] = can_access.get(key, True) and bool(cell)  # type: ignore[index]
        elif "nvbandwidth" in tool.lower() and isinstance(record.get("testcases"), dict):
            for name, case in record["testcases"].items():
                matrix = case.get("matrix") if isinstance(case, dict) else None
                tables.append((str(name), matrix, _nvbandwidth_rank(str(name)), 1))
        elif "nccl" in tool.lower():
            pair = _nccl_pair(record, machine)
            value = _matrix_value(record.get("max_busbw"))
            if pair is not None and value is not None:
                pair_runs.append((pair, value, f"nccl-tests {record.get('op') or ''} busbw, 2 ranks".replace("  ", " ")))
        for name, matrix, rank, tool_rank in tables:
            if rank is None or not isinstance(matrix, list) or not matrix:
                continue
            mapping = _device_map(record, machine, len(matrix))
            # nvbandwidth copy-engine figures first, then p2pBandwidthLatencyTest, unidirectional first
            candidates.append(((rank[0], tool_rank, order), mapping, matrix, rank[1], f"{tool}: {name}"))
    measured: dict[tuple[int, int], tuple[float, str]] = {}
    for _, mapping, matrix, factor, label in sorted(candidates, key=lambda c: c[0]):
        values: dict[tuple[int, int], float] = {}
        for i, row in enumerate(matrix):
            if not isinstance(row, list):
                continue
            for j, cell in enumerate(row):
                value = _matrix_value(cell)
                if i == j or value is None or i not in mapping or j not in mapping:
                    continue
                key = tuple(sorted((mapping[i], mapping[j])))
                scaled = value * factor
                values[key] = min(values.get(key, scaled), scaled)  # type: ignore[index]
        for key, value in values.items():
            measured.setdefault(key, (value, label))  # the most trusted matrix that covers a pair wins
    for key, value, label in pair_runs:
        measured.setdefault(key, (value, label))
    return measured, can_access


def _nccl_pair(record: dict, machine: Machine) -> tuple[int, int] | None:
    """A two-rank nccl-tests run on one host tells one pair's speed, when its devices are named."""
    if record.get("nranks") != 2:
        return None
    devices = record.get("devices") or record.get("ranks") or record.get("gpus")
    if not isinstance(devices, list) or len(devices) != 2:
        return None
    found: list[int] = []
    for device in devices:
        if not isinstance(device, dict):
            return None
        gpu = None
        for key in ("bus_id", "busid", "pci_bus_id"):
            if isinstance(device.get(key), str):
                bus = _bus_number(device[key])
                gpu = next((g.index for g in machine.gpus.values() if _bus_number(g.bus_id) == bus), None)
                if gpu is not None:
                    break
        if gpu is None:
            return None
        found.append(gpu)
    if found[0] == found[1]:
        return None
    return (min(found), max(found))


# -- estimated bandwidth ---------------------------------------------------------------------------------


def _pcie_gbs(gpu: Gpu | None) -> tuple[float, str]:
    gen = width = None
    if gpu is not None:
        state = gpu.pcie
        caps = [g for g in (state.gen_device_max, state.gen_host_max) if g]
        gen = min(caps) if caps else state.gen_max
        # a narrower current width is a real fault (idle GPUs drop speed, never width)
        width = state.width_current or state.width_max
    gen = gen if gen in PCIE_LANE_GBS else DEFAULT_PCIE_GEN
    width = width if width and width > 0 else DEFAULT_PCIE_WIDTH
    return PCIE_LANE_GBS[gen] * width * PCIE_ACHIEVED, f"PCIe Gen{gen} x{width}"


def _per_link(name: str | None, table: tuple[tuple[str, float], ...], default: float) -> float:
    upper = (name or "").upper()
    for marker, value in table:
        if marker in upper:
            return value
    return default


def estimate_bandwidth(
    path: str | None, p2p_ok: bool | None, same_numa: bool | None, gpu_a: Gpu | None, gpu_b: Gpu | None,
    xgmi_hops: int | None = None,
) -> tuple[float | None, str]:
    """Per-direction GB/s a peer copy between two GPUs can expect from the link class alone."""
    pcie_a, basis_a = _pcie_gbs(gpu_a)
    pcie_b, basis_b = _pcie_gbs(gpu_b)
    pcie, pcie_basis = (pcie_a, basis_a) if pcie_a <= pcie_b else (pcie_b, basis_b)
    name = (gpu_a.name if gpu_a else None) or (gpu_b.name if gpu_b else None)
    links = nvlink_count(path)
    estimate: float | None
    if path is None:
        estimate, basis = None, "no path known"
    elif links is not None and links > 0:
        per_link = _per_link(name, NVLINK_GBS_BY_NAME, NVLINK_GBS_DEFAULT)
        estimate, basis = links * per_link, f"{links} NVLink x {per_link:g} GB/s"
    elif path == "XGMI":
        per_link = _per_link(name, XGMI_GBS_BY_NAME, XGMI_GBS_DEFAULT)
        estimate, basis = per_link, f"xGMI link {per_link:g} GB/s"
        if xgmi_hops and xgmi_hops > 1:
            # AMD weight 15 per xGMI hop: a pair two links apart shares an intermediate GPU's links.
            estimate, basis = per_link / xgmi_hops, f"xGMI {per_link:g} GB/s over {xgmi_hops} hops (weight)"
    elif path in PCIE_PATH_FACTOR:
        factor = PCIE_PATH_FACTOR[path]
        estimate, basis = pcie * factor, f"{pcie_basis} x {factor:g} for {path}"
    elif path == "PCIE" or (links == 0):
        factor = PCIE_PATH_FACTOR["SYS"] if same_numa is False else PCIE_PATH_FACTOR["PHB"]
        estimate, basis = pcie * factor, f"{pcie_basis} x {factor:g} for PCIe{' across NUMA nodes' if same_numa is False else ''}"
    else:
        estimate, basis = None, f"unknown path {path}"
    if p2p_ok is False:
        floor = pcie * NO_P2P_FACTOR
        if estimate is None or estimate > floor:
            estimate, basis = floor, f"{pcie_basis} x {NO_P2P_FACTOR:g}: no P2P, copies go through host memory"
    if estimate is not None:
        estimate = round(estimate, 2)
    return estimate, f"estimated: {basis}"


def _p2p_ok(facts: _Facts, a: int, b: int) -> bool | None:
    codes = facts.p2p.get(pair_key(f"GPU{a}", f"GPU{b}"), [])
    if "OK" in codes:
        return True
    if any(code in _P2P_BAD for code in codes):
        return False
    return facts.can_access.get((min(a, b), max(a, b)))


def _near_nic(facts: _Facts, a: int, b: int) -> str | None:
    near_a = {nic for nic, path in facts.nic_paths.get(a, {}).items() if path in _NEAR_NIC_PATHS}
    near_b = {nic for nic, path in facts.nic_paths.get(b, {}).items() if path in _NEAR_NIC_PATHS}
    shared = sorted(near_a & near_b)
    return facts.nic_names.get(shared[0], shared[0]) if shared else None


def _pair_quality(machine: Machine, facts: _Facts, a: int, b: int) -> PairQuality:
    link = facts.links.get(pair_key(f"GPU{a}", f"GPU{b}"))
    path = link.path if link is not None else None
    gpu_a, gpu_b = machine.gpus.get(a), machine.gpus.get(b)
    numa_a = gpu_a.numa_node if gpu_a else None
    numa_b = gpu_b.numa_node if gpu_b else None
    same_numa = None if numa_a is None or numa_b is None else numa_a == numa_b
    p2p_ok = _p2p_ok(facts, a, b)
    measured = facts.measured.get((min(a, b), max(a, b)))
    if measured is not None:
        bandwidth, basis, is_measured = round(measured[0], 2), f"measured: {measured[1]}", True
    else:
        xgmi_hops = None
        if link is not None and link.weight:  # a weight is AMD's (rocm-smi); the module is imported for it alone
            from k3diag.model.amd_records import xgmi_hops_from_weight

            xgmi_hops = xgmi_hops_from_weight(link.weight)
        bandwidth, basis = estimate_bandwidth(path, p2p_ok, same_numa, gpu_a, gpu_b, xgmi_hops=xgmi_hops)
        is_measured = False
    key = pair_key(f"GPU{a}", f"GPU{b}")
    blind = (path is not None and nvlink_count(path) is None and key not in facts.nvlink_seen
             and not is_measured and path not in ("XGMI", "PCIE"))
    return PairQuality(path, bandwidth, is_measured, p2p_ok, same_numa, _near_nic(facts, a, b), basis, blind)


def pair_quality(machine: Machine, a: int, b: int) -> PairQuality:
    """How good the link between GPU a and GPU b is, for grouping."""
    return _pair_quality(machine, _collect_facts(machine), a, b)


def bandwidth_tier(bandwidth: float | None) -> int:
    """Bandwidth on a log scale in ~9 % steps; unknown sorts below everything."""
    if bandwidth is None or bandwidth <= 0:
        return _UNKNOWN_TIER
    return round(TIER_STEPS_PER_OCTAVE * math.log2(bandwidth))


def _pair_level(pq: PairQuality) -> tuple[int, int, int]:
    numa = 1 if pq.same_numa is None else (2 if pq.same_numa else 0)
    return (bandwidth_tier(pq.bandwidth_gbs), numa, 1 if pq.near_nic else 0)


def quality_from_pairs(n: int, pairs: dict[tuple[int, int], PairQuality]) -> list[list[int]]:
    """Integer pair qualities ordering pairs by (bandwidth tier, NUMA, NIC, bandwidth).

    Integers keep sums exact. The level (tier, NUMA, NIC) is scaled above any possible sum of the
    bandwidth parts, so a sum over a partition's pairs still compares levels first.
    """
    levels = sorted({_pair_level(pq) for pq in pairs.values()})
    rank = {level: r for r, level in enumerate(levels)}
    centi = {key: int(round((pq.bandwidth_gbs or 0) * 100)) for key, pq in pairs.items()}
    scale = (n * n + 1) * (max(centi.values(), default=0) + 1)
    q = [[0] * n for _ in range(n)]
    for (i, j), pq in pairs.items():
        q[i][j] = q[j][i] = rank[_pair_level(pq)] * scale + centi[(i, j)]
    return q  # type: ignore[return-value]


def machine_quality(machine: Machine, only: list[int] | None = None,
                    ) -> tuple[list[int], dict[tuple[int, int], PairQuality], list[list[int]]]:
    """The known GPUs (or those of `only`), every pair's quality keyed by GPU indices, and the matrix the
    partitioner reads (row x is gpus[x])."""
    gpus = [i for i in known_gpus(machine) if only is None or i in only]
    facts = _collect_facts(machine)
    pairs: dict[tuple[int, int], PairQuality] = {}
    local: dict[tuple[int, int], PairQuality] = {}
    for x in range(len(gpus)):
        for y in range(x + 1, len(gpus)):
            pq = _pair_quality(machine, facts, gpus[x], gpus[y])
            pairs[(gpus[x], gpus[y])] = pq
            local[(x, y)] = pq
    return gpus, pairs, quality_from_pairs(len(gpus), local)
