"""TP/DP grouping planner: which GPUs to put together for tensor parallelism at each TP size, and why.

The pure partition algorithm lives in `k3diag.analyze.partition` (re-exported here); this module turns
what the model knows about each GPU pair (measured bandwidth, path code, P2P status, NUMA and NIC
locality) into a pairwise quality (`pair_quality`), asks the algorithm for the best partition at each TP
size (`recommend_tp_groups`), and explains the chosen groups in words.

The objective follows go-gpuallocator's frame (score pairs, pick the best *partition* of all GPUs rather
than the greedy best first set) but ranks by the bottleneck link first, because a tensor-parallel
all-reduce runs at the pace of the slowest link in its group. docs/planner.md has the details.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from k3diag.analyze.partition import PartitionResult, solve_partition
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
# A bigger TP size whose slowest link keeps at least this share of the smaller size's is "costs little".
MODEST_SLOWDOWN = 0.8
# Width of one bandwidth tier: 2**(1/8), about 9 %. Pairs within a tier count as equally fast for
# the slowest-link criterion, so measurement noise does not override NUMA or NIC locality.
TIER_STEPS_PER_OCTAVE = 8
_UNKNOWN_TIER = -10_000
_NEAR_NIC_PATHS = {"PIX", "PXB", "PSB"}
_P2P_BAD = {"NS", "CNS", "GNS", "TNS", "DR"}
_P2P_CAPABILITIES = {"read", "write", "unknown"}


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

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "bandwidth_gbs": self.bandwidth_gbs,
            "measured": self.measured,
            "p2p_ok": self.p2p_ok,
            "same_numa": self.same_numa,
            "near_nic": self.near_nic,
            "basis": self.basis,
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
    for link in machine.links:
        key = link.key()
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
    return _Facts(gpus, links, p2p, measured, can_access, nic_paths, nic_names)


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
    path: str | None, p2p_ok: bool | None, same_numa: bool | None, gpu_a: Gpu | None, gpu_b: Gpu | None
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
        bandwidth, basis = estimate_bandwidth(path, p2p_ok, same_numa, gpu_a, gpu_b)
        is_measured = False
    return PairQuality(path, bandwidth, is_measured, p2p_ok, same_numa, _near_nic(facts, a, b), basis)


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


# =====================================================================================================
# The recommendation
# =====================================================================================================


@dataclass
class TpRecommendation:
    gpus: list[int]
    groups: dict[int, list[list[int]]]  # tp size -> partition of the GPUs into groups of that size
    worst_link: dict[int, str | None]  # tp size -> path code of the slowest link inside any group
    group_worst: dict[int, list[str | None]]  # tp size -> each group's slowest link
    scores: dict[int, float]  # tp size -> GB/s of the slowest link inside any group (0.0 unknown)
    rationale: dict[int, str]
    comparison: str | None
    cuda_visible_devices: dict[int, list[str]]
    exact: dict[int, bool]
    leftover: dict[int, list[int]] = field(default_factory=dict)
    method: dict[int, str] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)  # asked sizes that cannot be formed, and why
    pairs: dict[tuple[int, int], PairQuality] = field(default_factory=dict)
    worst_pairs: dict[int, tuple[int, int]] = field(default_factory=dict)  # tp size -> its slowest pair

    def to_json(self) -> dict:
        def keyed(mapping: dict) -> dict:
            return {str(size): mapping[size] for size in sorted(mapping)}

        return {
            "tp_groups": keyed(self.groups),
            "rationale": keyed(self.rationale),
            "comparison": self.comparison,
            "gpus": list(self.gpus),
            "worst_link": keyed(self.worst_link),
            "group_worst": keyed(self.group_worst),
            "worst_link_gbs": keyed({size: self.pairs[pair].bandwidth_gbs for size, pair in self.worst_pairs.items()}),
            "cuda_visible_devices": keyed(self.cuda_visible_devices),
            "exact": keyed(self.exact),
            "leftover": keyed(self.leftover),
            "method": keyed(self.method),
            "skipped": keyed(self.skipped),
        }


def machine_quality(machine: Machine) -> tuple[list[int], dict[tuple[int, int], PairQuality], list[list[int]]]:
    """The known GPUs, every pair's quality keyed by GPU indices, and the matrix the partitioner reads
    (row x is gpus[x])."""
    gpus = known_gpus(machine)
    facts = _collect_facts(machine)
    pairs: dict[tuple[int, int], PairQuality] = {}
    local: dict[tuple[int, int], PairQuality] = {}
    for x in range(len(gpus)):
        for y in range(x + 1, len(gpus)):
            pq = _pair_quality(machine, facts, gpus[x], gpus[y])
            pairs[(gpus[x], gpus[y])] = pq
            local[(x, y)] = pq
    return gpus, pairs, quality_from_pairs(len(gpus), local)


def default_sizes(count: int) -> list[int]:
    """Powers of two that divide the GPU count, and the count itself (TP sizes must divide head counts,
    which are powers of two in practically every model)."""
    sizes = set()
    size = 2
    while size <= count:
        if count % size == 0:
            sizes.add(size)
        size *= 2
    if count >= 2:
        sizes.add(count)
    return sorted(sizes)


def recommend_tp_groups(machine: Machine, sizes: list[int] | None = None) -> TpRecommendation | None:
    """The best grouping of all known GPUs at each TP size; None when fewer than two GPUs are known."""
    gpus = known_gpus(machine)
    count = len(gpus)
    if count < 2:
        return None
    gpus, pairs, q = machine_quality(machine)
    wanted = set(default_sizes(count))
    skipped: dict[int, str] = {}
    for size in sizes or []:
        if size < 2:
            skipped[size] = "a TP size below 2 has no groups to form"
        elif size > count:
            skipped[size] = f"only {count} GPUs are known"
        else:
            wanted.add(size)
    vendors = {(machine.gpus[i].vendor or "").upper() for i in gpus if i in machine.gpus}
    amd = "AMD" in vendors and "NVIDIA" not in vendors
    rec = TpRecommendation(
        gpus=gpus, groups={}, worst_link={}, group_worst={}, scores={}, rationale={}, comparison=None,
        cuda_visible_devices={}, exact={}, skipped=skipped, pairs=pairs,
    )
    for size in sorted(wanted):
        result = solve_partition(q, size)
        groups = [[gpus[i] for i in group] for group in result.groups]
        leftover = [gpus[i] for i in result.leftover]
        worst_local = [_worst_pair(group, q) for group in result.groups]
        overall = min(worst_local, key=lambda pair: q[pair[0]][pair[1]])
        worst_pairs = [(gpus[a], gpus[b]) for a, b in worst_local]
        worst_pair = (gpus[overall[0]], gpus[overall[1]])
        worst_pq = pairs[worst_pair]
        rec.groups[size] = groups
        rec.worst_pairs[size] = worst_pair
        rec.leftover[size] = leftover
        rec.group_worst[size] = [pairs[p].path for p in worst_pairs]
        rec.worst_link[size] = worst_pq.path
        rec.scores[size] = worst_pq.bandwidth_gbs or 0.0
        rec.exact[size] = result.exact
        rec.method[size] = result.method
        rec.cuda_visible_devices[size] = [_visible_devices(group, amd) for group in groups]
        rec.rationale[size] = _rationale(size, groups, leftover, worst_pair, worst_pq, result, pairs, machine, count)
    rec.comparison = _comparison(rec)
    return rec


def _worst_pair(group: list[int], q: list[list[int]]) -> tuple[int, int]:
    """The slowest pair of a group (matrix indices, smaller first)."""
    pairs = [(a, b) if a < b else (b, a) for x, a in enumerate(group) for b in group[x + 1 :]]
    return min(pairs, key=lambda pair: (q[pair[0]][pair[1]], pair))


def _visible_devices(group: list[int], amd: bool) -> str:
    ids = ",".join(str(i) for i in group)
    if amd:
        # ROCm also honours CUDA_VISIBLE_DEVICES, but setting both renumbers twice; give one.
        return f"HIP_VISIBLE_DEVICES={ids}"
    # CUDA numbers devices fastest-first by default; nvidia-smi (and these groups) by PCI bus.
    return f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ids}"


def _describe_link(pair: tuple[int, int], pq: PairQuality) -> str:
    path = pq.path or "an unknown path"
    text = f"{path} between GPU{pair[0]} and GPU{pair[1]} ({_speed(pq)})"
    if pq.p2p_ok is False:
        text += "; P2P is not available there, so NCCL stages copies through host memory (SHM)"
    return text


def _groups_text(groups: list[list[int]]) -> str:
    shown = ["{" + ",".join(str(i) for i in g) + "}" for g in groups[:6]]
    if len(groups) > 6:
        shown.append(f"... ({len(groups)} groups)")
    return " ".join(shown)


def _rationale(size: int, groups: list[list[int]], leftover: list[int], worst_pair: tuple[int, int],
               worst_pq: PairQuality, result: PartitionResult, pairs: dict[tuple[int, int], PairQuality],
               machine: Machine, count: int) -> str:
    replicas = f"{len(groups)} replica{'s' if len(groups) != 1 else ''} (DP={len(groups)})"
    text = f"{replicas} of {_groups_text(groups)}; the slowest link inside any group is {_describe_link(worst_pair, worst_pq)}."
    if result.exact and len(groups) > 1:
        text += " No other grouping has a faster slowest link."
    numa = [{machine.gpus[i].numa_node if i in machine.gpus else None for i in g} for g in groups]
    if all(None not in nodes for nodes in numa):
        local = sum(1 for nodes in numa if len(nodes) == 1)
        if len(groups) == 1:
            text += " The group stays on one NUMA node." if local else f" The group spans {len(numa[0])} NUMA nodes."
        elif local == len(groups):
            text += " Every group stays on one NUMA node."
        elif local:
            text += f" {local} of {len(groups)} groups stay on one NUMA node."
        else:
            text += " No group fits on one NUMA node."
    nic_groups = [g for g in groups if all(pairs[(min(a, b), max(a, b))].near_nic for x, a in enumerate(g) for b in g[x + 1 :])]
    if nic_groups and any(pq.near_nic for pq in pairs.values()):
        text += f" {len(nic_groups)} of {len(groups)} groups share a NIC that every member reaches without crossing the CPU (PIX/PXB)."
    if leftover:
        gpus_left = ", ".join(f"GPU{i}" for i in leftover)
        text += f" {count} GPUs do not divide into groups of {size}: {gpus_left} left over."
    if not result.exact:
        text += f" Found by {result.method}; near-optimal, not proven optimal."
    return text


def _comparison(rec: TpRecommendation) -> str | None:
    """The seed article's question: two TP2 groups on near pairs, or one TP4 across a slower boundary?"""
    sizes = sorted(rec.groups)
    doublings = [(s, 2 * s) for s in sizes if 2 * s in rec.groups and rec.groups[s] and rec.groups[2 * s]]
    if not doublings:
        return None
    parts: list[str] = []
    chosen = [d for d in doublings if d[0] == 2][:1]
    # Also the step where groups first cross a socket boundary (SYS, lost P2P, another NUMA node),
    # or failing that the first step that costs link quality at all.
    boundary = next((d for d in doublings if _crosses_boundary(rec, d[1], d[0])), None)
    if boundary is None:
        boundary = next((d for d in doublings if _worse(rec, d[1], d[0])), None)
    if boundary is not None and boundary not in chosen:
        chosen.append(boundary)
    if not chosen:
        chosen = doublings[:1]
    for small, big in chosen:
        parts.append(_compare_sizes(rec, small, big))
    return " ".join(parts)


def _worse(rec: TpRecommendation, big: int, small: int) -> bool:
    """Whether the bigger TP size's slowest link is in a worse class or bandwidth tier."""
    return _slower(rec.pairs[rec.worst_pairs[big]], rec.pairs[rec.worst_pairs[small]])


def _crosses_boundary(rec: TpRecommendation, big: int, small: int) -> bool:
    def crossing(pq: PairQuality) -> bool:
        return pq.path == "SYS" or pq.p2p_ok is False or pq.same_numa is False

    big_pq, small_pq = rec.pairs[rec.worst_pairs[big]], rec.pairs[rec.worst_pairs[small]]
    return crossing(big_pq) and not crossing(small_pq) and _slower(big_pq, small_pq)


def _slower(pq: PairQuality, than: PairQuality) -> bool:
    return bandwidth_tier(pq.bandwidth_gbs) < bandwidth_tier(than.bandwidth_gbs) or path_rank(pq.path) > path_rank(than.path)


def _compare_sizes(rec: TpRecommendation, small: int, big: int) -> str:
    big_pair = rec.worst_pairs[big]
    big_pq = rec.pairs[big_pair]
    big_group = next(g for g in rec.groups[big] if big_pair[0] in g and big_pair[1] in g)
    pieces = [g for g in rec.groups[small] if set(g) <= set(big_group)]
    if len(pieces) < 2:
        pieces = rec.groups[small][:2]
    _, small_pq = _worst_of(rec, pieces)
    small_text = " and ".join("{" + ",".join(str(i) for i in g) + "}" for g in pieces)
    big_text = "{" + ",".join(str(i) for i in big_group) + "}"
    count = "Two" if len(pieces) == 2 else str(len(pieces))
    if not _slower(big_pq, small_pq):
        return (
            f"TP{big} costs no link quality here: one TP{big} group {big_text} has the same slowest link "
            f"({big_pq.path or 'unknown'}, {_speed(big_pq)}) as the TP{small} groups {small_text}, "
            f"so choose between them by memory and throughput."
        )
    if big_pq.bandwidth_gbs and small_pq.bandwidth_gbs and big_pq.p2p_ok is not False:
        ratio = big_pq.bandwidth_gbs / small_pq.bandwidth_gbs
        if ratio >= MODEST_SLOWDOWN:
            return (
                f"TP{big} costs little link quality here: one TP{big} group {big_text} has {big_pq.path or 'an unknown path'} "
                f"between GPU{big_pair[0]} and GPU{big_pair[1]} ({_speed(big_pq)}) as its slowest link, against "
                f"{small_pq.path or 'unknown'} ({_speed(small_pq)}) for the TP{small} groups {small_text}, about "
                f"{round((1 - ratio) * 100)}% slower, so choose between them by memory and throughput."
            )
    reason = (
        f"{count} TP{small} groups {small_text} keep every all-reduce on {small_pq.path or 'unknown'} links "
        f"({_speed(small_pq)}), while one TP{big} group {big_text} must cross {big_pq.path or 'an unknown path'} "
        f"between GPU{big_pair[0]} and GPU{big_pair[1]} ({_speed(big_pq)})"
    )
    if big_pq.p2p_ok is False:
        reason += ", where P2P is not available and copies go through host memory"
    reason += (
        f". A tensor-parallel all-reduce after every layer runs at the pace of its slowest link, so prefer "
        f"TP{small} with {len(rec.groups[small])} data-parallel replicas when the model fits in {small} GPUs' "
        f"memory, and use TP{big} only when it must."
    )
    return reason


def _worst_of(rec: TpRecommendation, groups: list[list[int]]) -> tuple[tuple[int, int], PairQuality]:
    pairs = [_worst_pair_in(rec, g) for g in groups]
    key = min(pairs, key=lambda p: (bandwidth_tier(rec.pairs[p].bandwidth_gbs), rec.pairs[p].bandwidth_gbs or 0))
    return key, rec.pairs[key]


def _worst_pair_in(rec: TpRecommendation, group: list[int]) -> tuple[int, int]:
    candidates = [(min(a, b), max(a, b)) for x, a in enumerate(group) for b in group[x + 1 :]]
    return min(candidates, key=lambda p: (_pair_level(rec.pairs[p]), rec.pairs[p].bandwidth_gbs or 0, p))


def _speed(pq: PairQuality) -> str:
    if pq.bandwidth_gbs is None:
        return "speed unknown"
    return f"{pq.bandwidth_gbs:g} GB/s measured" if pq.measured else f"~{pq.bandwidth_gbs:.3g} GB/s estimated"
