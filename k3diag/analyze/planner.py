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

from dataclasses import dataclass, field

from k3diag.analyze.pair_quality import (  # re-exported: callers import them from the planner
    PairQuality,
    _pair_level,
    bandwidth_tier,
    estimate_bandwidth,
    known_gpus,
    machine_quality,
    pair_quality,
    quality_from_pairs,
)
from k3diag.analyze.partition import PartitionResult, solve_partition
from k3diag.model.machine import Machine
from k3diag.model.topology import nvlink_count, path_rank

__all__ = ["PairQuality", "TpRecommendation", "bandwidth_tier", "default_sizes", "estimate_bandwidth", "known_gpus",
           "machine_quality", "pair_quality", "quality_from_pairs", "recommend_tp_groups"]

# A bigger TP size whose slowest link keeps at least this share of the smaller size's is "costs little".
MODEST_SLOWDOWN = 0.8

# =====================================================================================================
# The recommendation
# =====================================================================================================


@dataclass
class TpRecommendation:
    """The best grouping of the GPUs at each TP size, with the slowest link of each and why."""

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
    # What a ring all-reduce inside each group can reach: the best ring's slowest link (path, GB/s). On an
    # NVLink mesh (DGX-1's hybrid cube mesh) a group's worst pair can be SYS while NCCL's rings stay on NVLink.
    group_ring: dict[int, list[tuple[str | None, float | None]]] = field(default_factory=dict)
    unknown_pairs: list[tuple[int, int]] = field(default_factory=list)  # pairs no source gave a path for
    nvlink_unknown: bool = False  # some paths come only from `topo -mp`, which hides NVLink
    uniform: str | None = None  # the one path every GPU pair has (NVSwitch boxes: "NV18"), else None
    seen: "TpRecommendation | None" = None  # on a cut matrix: the plan for the GPUs whose every pair is known

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
            "group_ring": keyed({size: [{"path": path, "gbs": gbs} for path, gbs in rings]
                                 for size, rings in self.group_ring.items()}),
            "unknown_pairs": [list(pair) for pair in self.unknown_pairs],
            "nvlink_unknown": self.nvlink_unknown,
            "uniform_path": self.uniform,
            "seen": self.seen.to_json() if self.seen is not None else None,
        }


# The most GPUs the planner groups: as many as the largest NVLink domain announced holds. Every pair is weighed,
# so a damaged input of 1,000 GPUs took 12 s and 320 MB for a plan no machine needs.
MAX_PLANNED_GPUS = 576

# Boxes up to this size also get the largest power of two that does not divide the count (3 GPUs: TP2 plus
# one replica; 6 GPUs: TP4 plus a TP2 or two replicas). Bigger counts are NVLink domains or fleets.
LEFTOVER_SIZES_UP_TO = 16


def default_sizes(count: int) -> list[int]:
    """Powers of two (TP sizes must divide attention-head counts, which are powers of two in practically every
    model): those that divide the GPU count, and on boxes up to 16 GPUs the largest one that fits, whose
    groups leave GPUs over for data parallelism."""
    sizes = set()
    size = 2
    while size <= count:
        if count % size == 0 or (count <= LEFTOVER_SIZES_UP_TO and size * 2 > count):
            sizes.add(size)
        size *= 2
    return sorted(sizes)


def seen_gpus(pairs: dict[tuple[int, int], PairQuality], gpus: list[int]) -> list[int]:
    """The largest set of GPUs (found greedily) whose every pair has a known path: on a cut matrix, advice is
    given on what was seen. The GPU with the most unknown pairs among those kept goes first (the highest index
    on a tie); counts are kept and lowered as GPUs go, not recounted over every pair for every GPU (a paste of
    hundreds of GPU blocks without paths made that O(n^4): a minute at 355 GPUs)."""
    kept = list(gpus)
    members = set(kept)
    unknown = dict.fromkeys(kept, 0)
    partners: dict[int, list[int]] = {i: [] for i in kept}
    for (a, b), pq in pairs.items():
        if pq.path is None and not pq.measured and a in members and b in members:
            unknown[a] += 1
            partners[a].append(b)
            if b != a:
                unknown[b] += 1
                partners[b].append(a)
    while True:
        worst = max(kept, key=lambda i: (unknown[i], i), default=None)
        if worst is None or unknown[worst] == 0:
            return kept
        kept.remove(worst)
        members.discard(worst)
        for other in partners[worst]:
            if other in members:
                unknown[other] -= 1


def recommend_tp_groups(machine: Machine, sizes: list[int] | None = None,
                        only: list[int] | None = None) -> TpRecommendation | None:
    """The best grouping of all known GPUs (or those of `only`) at each TP size; None when fewer than two
    GPUs are known. When some pairs' paths are unknown, `seen` holds the plan for the GPUs whose every pair
    is known."""
    gpus = [i for i in known_gpus(machine) if only is None or i in only]
    count = len(gpus)
    if count < 2:
        return None
    if count > MAX_PLANNED_GPUS:
        # 4,200 headerless fabric blocks (each read as a GPU) took minutes and gigabytes
        machine.note("planner", f"{count:,} GPUs on one machine is more than any machine or NVLink domain holds "
                                f"(at most {MAX_PLANNED_GPUS:,} are planned for): no TP grouping is proposed; were "
                                "several machines' outputs read as one, or GPU blocks repeated?")
        return None
    gpus, pairs, q = machine_quality(machine, only)
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
    paths = {pq.path for pq in pairs.values()}
    uniform = next(iter(paths)) if len(paths) == 1 and None not in paths and count > 2 else None
    rec.uniform = uniform if uniform and nvlink_count(uniform) else None
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
        rec.group_ring[size] = [_best_ring(group, pairs) for group in groups]
        rec.rationale[size] = _rationale(size, groups, leftover, worst_pair, worst_pq, result, pairs, machine, count,
                                         rec.uniform)
    rec.unknown_pairs = sorted(pair for pair, pq in pairs.items() if pq.path is None and not pq.measured)
    rec.nvlink_unknown = any(pq.nvlink_unknown for pq in pairs.values())
    if rec.unknown_pairs and only is None:
        seen = seen_gpus(pairs, gpus)
        if 2 <= len(seen) < len(gpus):
            rec.seen = recommend_tp_groups(machine, sizes, only=seen)
    rec.comparison = None if rec.uniform else _comparison(rec)
    return rec


# Rings are enumerated exactly up to this group size (7!/2 = 2,520 rings at 8); beyond, the worst pair stands in.
RING_EXACT_UP_TO = 8


def _best_ring(group: list[int], pairs: dict[tuple[int, int], PairQuality]) -> tuple[str | None, float | None]:
    """The ring through every GPU of the group whose slowest link is fastest (what a ring all-reduce reaches),
    as (path of that link, GB/s). Unknown links count as 0 GB/s."""
    def link(a: int, b: int) -> PairQuality:
        return pairs[(min(a, b), max(a, b))]

    if len(group) < 2:
        return (None, None)
    if len(group) == 2:
        pq = link(group[0], group[1])
        return (pq.path, pq.bandwidth_gbs)
    if len(group) > RING_EXACT_UP_TO:
        worst = min((link(a, b) for x, a in enumerate(group) for b in group[x + 1:]),
                    key=lambda pq: pq.bandwidth_gbs or 0.0)
        return (worst.path, worst.bandwidth_gbs)
    return _widest_ring(group, link)


def _widest_ring(group: list[int], link) -> tuple[str | None, float | None]:
    """The exhaustive search of `_best_ring`, depth first with pruning: the rings are visited in the order
    `itertools.permutations` gives (GPU group[0] fixed, each ring once), and a partial ring whose slowest
    link is no faster than the best ring found so far is abandoned, since a ring replaces the best only when
    strictly faster. The first best ring is therefore the one full enumeration finds, at a fraction of the
    cost (2,520 rings of 8 links at 8 GPUs took ~20 ms, a tenth of `analyze`'s start-up)."""
    size = len(group)
    quality = [[link(a, b) if a != b else None for b in group] for a in group]
    speed = [[(pq.bandwidth_gbs or 0.0) if pq is not None else 0.0 for pq in row] for row in quality]
    fastest = max(speed[a][b] for a in range(size) for b in range(size) if a != b)
    best_value = -1.0
    best_ring: list[int] = []
    order = [0]
    used = [False] * size
    used[0] = True

    def extend(slowest: float) -> bool:  # True: a ring as fast as the fastest link was found, stop
        nonlocal best_value, best_ring
        last = order[-1]
        if len(order) == size:
            # each ring once, not once per direction (permutations' `order[0] > order[-1]` skip)
            if group[order[1]] > group[last]:
                return False
            value = min(slowest, speed[last][0])
            if value > best_value:
                best_value, best_ring = value, list(order)
            return best_value >= fastest
        for nxt in range(1, size):
            if used[nxt]:
                continue
            value = min(slowest, speed[last][nxt])
            if value <= best_value:
                continue
            used[nxt] = True
            order.append(nxt)
            done = extend(value)
            order.pop()
            used[nxt] = False
            if done:
                return True
        return False

    extend(float("inf"))
    ring = best_ring + [0]
    # the slowest link of that ring, the first in ring order among equals (what `min` over the ring gave)
    slowest_pq = min((quality[a][b] for a, b in zip(ring, ring[1:])), key=lambda pq: pq.bandwidth_gbs or 0.0)
    return (slowest_pq.path, slowest_pq.bandwidth_gbs)


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
               machine: Machine, count: int, uniform: str | None = None) -> str:
    replicas = f"{len(groups)} replica{'s' if len(groups) != 1 else ''} (DP={len(groups)})"
    if uniform:  # no pair talk: the links do not tell groupings apart, locality does
        text = (f"{replicas} of {_groups_text(groups)}; every GPU pair is joined by {uniform} (NVSwitch or a full "
                "mesh), so any grouping is as fast.")
    else:
        text = f"{replicas} of {_groups_text(groups)}; the slowest link inside any group is {_describe_link(worst_pair, worst_pq)}."
    if result.exact and len(groups) > 1 and not uniform:
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
        text += (f" {count} GPUs do not divide into groups of {size}: {gpus_left} left over for data parallelism "
                 "(replicas of a model that fits them).")
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
