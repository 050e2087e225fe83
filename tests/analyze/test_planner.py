"""The TP/DP grouping planner: the groups an expert would pick, and the partitioner's guarantees.

Machines are built directly from the model (no parsers), so these tests pin the planner alone.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.analyze.partition import (
    PartitionScore,
    _dendrogram,
    best_partition,
    fast_partition,
    quality_matrix,
    score_partition,
    solve_partition,
)
from k3diag.analyze.planner import default_sizes, estimate_bandwidth, pair_quality, recommend_tp_groups
from k3diag.model.machine import Machine
from k3diag.model.topology import Link, P2PStatus

P2P_WRITES = "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"


@dataclass
class FakeBench:
    """A benchmark record as the planner sees one: `tool` and `to_json()` only."""

    tool: str
    payload: dict

    def to_json(self) -> dict:
        return {"tool": self.tool, **self.payload}


def make_machine(n: int, path, numa=None, vendor: str = "NVIDIA", name: str | None = None) -> Machine:
    """n GPUs; `path(i, j)` gives each pair's topo code, `numa(i)` each GPU's NUMA node."""
    machine = Machine()
    for i in range(n):
        gpu = machine.gpu(i)
        gpu.vendor, gpu.name = vendor, name
        gpu.numa_node = numa(i) if numa else None
    for i in range(n):
        for j in range(i + 1, n):
            machine.add_link(Link(f"GPU{i}", f"GPU{j}", path(i, j)))
    return machine


def add_p2p(machine: Machine, a: int, b: int, status: str, capability: str = "read") -> None:
    for src, dst in ((a, b), (b, a)):
        machine.p2p.append(P2PStatus(f"GPU{src}", f"GPU{dst}", capability, status))


# -- the seed article's box --------------------------------------------------------------------------------


def seed_box() -> Machine:
    """4 GPUs: 0-1 and 2-3 share a PCIe switch (PIX); the two pairs hang off different sockets (SYS)."""
    return make_machine(4, lambda i, j: "PIX" if i // 2 == j // 2 else "SYS", numa=lambda i: i // 2)


def test_seed_box_pairs_near_gpus_and_explains_tp4_crossing_sys() -> None:
    rec = recommend_tp_groups(seed_box())
    assert rec is not None
    assert rec.groups == {2: [[0, 1], [2, 3]], 4: [[0, 1, 2, 3]]}
    assert rec.worst_link == {2: "PIX", 4: "SYS"}
    assert rec.group_worst[2] == ["PIX", "PIX"]
    assert rec.exact == {2: True, 4: True}
    assert rec.scores[2] > rec.scores[4] > 0
    assert rec.comparison is not None
    assert "TP4" in rec.comparison and "SYS" in rec.comparison and "TP2" in rec.comparison
    assert "{0,1} and {2,3}" in rec.comparison
    assert "slowest link" in rec.comparison
    assert "PIX" in rec.rationale[2] and "one NUMA node" in rec.rationale[2]
    assert rec.cuda_visible_devices[2] == [
        "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1",
        "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=2,3",
    ]
    report = rec.to_json()
    assert report["tp_groups"] == {"2": [[0, 1], [2, 3]], "4": [[0, 1, 2, 3]]}
    assert report["worst_link"] == {"2": "PIX", "4": "SYS"}
    assert set(report["rationale"]) == {"2", "4"}
    assert report["comparison"] == rec.comparison


def test_seed_box_with_interleaved_numbering_is_not_grouped_by_index() -> None:
    # Same box, GPUs numbered across the sockets: 0 and 2 share a switch, 1 and 3 the other.
    machine = make_machine(4, lambda i, j: "PIX" if i % 2 == j % 2 else "SYS", numa=lambda i: i % 2)
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.groups[2] == [[0, 2], [1, 3]]
    assert rec.worst_link[2] == "PIX"


# -- dual-socket 8-GPU box ---------------------------------------------------------------------------------


def dual_socket_path(i: int, j: int) -> str:
    """GPUs on socket i % 2 (odd/even numbering), pairs {0,2},{4,6},{1,3},{5,7} under one switch each."""
    if i % 2 != j % 2:
        return "SYS"
    if i // 4 == j // 4:
        return "PIX"
    return "NODE"


def test_dual_socket_8_gpus_keeps_groups_on_one_socket_until_tp8() -> None:
    machine = make_machine(8, dual_socket_path, numa=lambda i: i % 2, name="NVIDIA L40S")
    for i in range(8):
        for j in range(i + 1, 8):
            add_p2p(machine, i, j, "OK" if i % 2 == j % 2 else "CNS")
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert sorted(rec.groups) == [2, 4, 8]
    assert rec.groups[2] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert rec.groups[4] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert rec.worst_link == {2: "PIX", 4: "NODE", 8: "SYS"}
    assert "P2P is not available" in rec.rationale[8]
    assert rec.comparison is not None
    # TP2 -> TP4 loses PIX for NODE; TP4 -> TP8 is where the SYS boundary is crossed.
    assert "TP8" in rec.comparison and "SYS" in rec.comparison
    assert "host memory" in rec.comparison
    sys_pair = pair_quality(machine, 0, 1)
    assert sys_pair.path == "SYS" and sys_pair.p2p_ok is False and sys_pair.same_numa is False
    assert sys_pair.measured is False
    near = pair_quality(machine, 0, 2)
    assert near.p2p_ok is True and near.same_numa is True
    assert near.bandwidth_gbs is not None and sys_pair.bandwidth_gbs is not None
    assert near.bandwidth_gbs > sys_pair.bandwidth_gbs


# -- NVSwitch box with a degraded link --------------------------------------------------------------------


@pytest.mark.parametrize("bad_path", ["NV17", "NV12", "SYS"])
def test_nvswitch_box_avoids_the_degraded_pair(bad_path: str) -> None:
    machine = make_machine(8, lambda i, j: bad_path if (i, j) == (2, 5) else "NV18", numa=lambda i: i // 4,
                           name="NVIDIA H100 80GB HBM3")
    rec = recommend_tp_groups(machine)
    assert rec is not None
    for size in (2, 4):
        assert not any({2, 5} <= set(group) for group in rec.groups[size]), rec.groups[size]
        assert rec.worst_link[size] == "NV18"
    # TP4 also keeps each group on one NUMA node: {0,1,2,3} and {4,5,6,7} already avoid the pair.
    assert rec.groups[4] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert rec.worst_link[8] == bad_path  # one group of all eight cannot avoid it
    assert pair_quality(machine, 0, 1).bandwidth_gbs == 450.0
    assert "costs no link quality" in (rec.comparison or "")


def test_gpu_with_every_link_degraded_still_lands_in_a_group() -> None:
    machine = make_machine(8, lambda i, j: "NV17" if 3 in (i, j) else "NV18")
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.worst_link[2] == "NV17"
    assert sorted(x for g in rec.groups[2] for x in g) == list(range(8))


# -- measured bandwidth -------------------------------------------------------------------------------------


def test_p2p_matrix_overrides_the_topology_class() -> None:
    # topo -m calls every pair PHB; the measurement says 0-3 and 1-2 are the fast pairs.
    machine = make_machine(4, lambda i, j: "PHB")
    fast = {(0, 3), (1, 2)}
    matrix = [[None if i == j else (48.0 if (min(i, j), max(i, j)) in fast else 20.0) for j in range(4)]
              for i in range(4)]
    matrix[3][0] = 45.5  # directions differ: the slower one counts
    disabled = [[1.0] * 4 for _ in range(4)]
    machine.benchmarks.append(FakeBench("p2pBandwidthLatencyTest", {"matrices": {
        "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)": disabled,
        P2P_WRITES: matrix,
    }}))
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.groups[2] == [[0, 3], [1, 2]]
    quality = pair_quality(machine, 0, 3)
    assert quality.measured is True
    assert quality.bandwidth_gbs == 45.5
    assert quality.path == "PHB"
    assert "P2P=Enabled" in quality.basis
    assert "45.5 GB/s measured" in rec.rationale[2]


def test_measured_slow_pix_pair_loses_to_measured_fast_sys_pairs() -> None:
    # A PIX pair whose P2P is broken (enabled slower than disabled, as in field reports) is avoided.
    machine = seed_box()
    values = {(0, 1): 5.0, (2, 3): 5.0, (0, 2): 20.0, (1, 3): 20.0, (0, 3): 10.0, (1, 2): 10.0}
    matrix = [["N/A" if i == j else values[(min(i, j), max(i, j))] for j in range(4)] for i in range(4)]
    machine.benchmarks.append(FakeBench("nvbandwidth", {"testcases": {
        "host_to_device_memcpy_ce": {"matrix": [[50.0, 50.0, 50.0, 50.0]]},
        "device_to_device_memcpy_write_ce": {"matrix": matrix},
    }}))
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.groups[2] == [[0, 2], [1, 3]]
    assert rec.worst_link[2] == "SYS"
    assert rec.scores[2] == 20.0


def test_bidirectional_matrix_is_halved_and_unidirectional_preferred() -> None:
    machine = make_machine(2, lambda i, j: "NV4")
    machine.benchmarks.append(FakeBench("p2pBandwidthLatencyTest", {"matrices": {
        "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)": [[0, 180.0], [180.0, 0]],
    }}))
    assert pair_quality(machine, 0, 1).bandwidth_gbs == 90.0
    machine.benchmarks.append(FakeBench("p2pBandwidthLatencyTest", {"matrices": {
        P2P_WRITES: [[0, 96.0], [97.0, 0]],
    }}))
    assert pair_quality(machine, 0, 1).bandwidth_gbs == 96.0


def test_matrix_rows_are_joined_to_gpus_by_pci_bus_when_the_record_names_them() -> None:
    machine = make_machine(3, lambda i, j: "PHB")
    for index, bus in ((0, "0000:1b:00.0"), (1, "0000:3d:00.0"), (2, "0000:89:00.0")):
        machine.gpus[index].bus_id = bus
    # CUDA enumerated them as 2, 0, 1 (fastest first): device 0 is bus 0x89.
    devices = [{"pci_bus_id": 0x89}, {"pci_bus_id": 0x1B}, {"pci_bus_id": 0x3D}]
    matrix = [[None, 40.0, 10.0], [40.0, None, 10.0], [10.0, 10.0, None]]
    machine.benchmarks.append(FakeBench("p2pBandwidthLatencyTest", {"gpus": devices, "matrices": {P2P_WRITES: matrix}}))
    assert pair_quality(machine, 0, 2).bandwidth_gbs == 40.0  # matrix 0-1 is GPU2-GPU0
    assert pair_quality(machine, 0, 1).bandwidth_gbs == 10.0


# -- P2P status, NUMA and NIC locality ---------------------------------------------------------------------


def test_pair_without_p2p_is_avoided_and_rated_below_sys() -> None:
    machine = make_machine(4, lambda i, j: "PHB")
    add_p2p(machine, 0, 1, "CNS")
    add_p2p(machine, 0, 2, "OK")
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert [0, 1] not in rec.groups[2]
    no_p2p = pair_quality(machine, 0, 1)
    assert no_p2p.p2p_ok is False
    sys_estimate, _ = estimate_bandwidth("SYS", True, False, machine.gpus[0], machine.gpus[1])
    assert no_p2p.bandwidth_gbs is not None and sys_estimate is not None
    assert no_p2p.bandwidth_gbs < sys_estimate
    assert pair_quality(machine, 0, 2).p2p_ok is True
    assert pair_quality(machine, 2, 3).p2p_ok is None


def test_numa_locality_breaks_ties_between_equal_links() -> None:
    machine = make_machine(8, lambda i, j: "NV18", numa=lambda i: i % 2)
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.groups[4] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert "Every group stays on one NUMA node" in rec.rationale[4]


def test_nic_locality_breaks_ties_when_nics_are_known() -> None:
    machine = make_machine(4, lambda i, j: "NV12", numa=lambda i: 0)
    for nic, gpus in (("NIC0", (0, 3)), ("NIC1", (1, 2))):
        machine.nic(nic).device = "mlx5_0" if nic == "NIC0" else "mlx5_1"
        for i in range(4):
            machine.add_link(Link(f"GPU{i}", nic, "PIX" if i in gpus else "NODE"))
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.groups[2] == [[0, 3], [1, 2]]
    assert pair_quality(machine, 0, 3).near_nic == "mlx5_0"
    assert pair_quality(machine, 0, 1).near_nic is None
    assert "share a NIC" in rec.rationale[2]


# -- sizes, vendors, edge cases ---------------------------------------------------------------------------


def test_sizes_that_do_not_divide_leave_gpus_over_and_impossible_sizes_are_skipped() -> None:
    machine = make_machine(8, dual_socket_path, numa=lambda i: i % 2)
    rec = recommend_tp_groups(machine, sizes=[3, 1, 16])
    assert rec is not None
    assert sorted(rec.groups) == [2, 3, 4, 8]
    assert len(rec.groups[3]) == 2 and all(len(g) == 3 for g in rec.groups[3])
    assert len(rec.leftover[3]) == 2
    assert sorted([x for g in rec.groups[3] for x in g] + rec.leftover[3]) == list(range(8))
    assert "left over" in rec.rationale[3]
    # Each group of three stays on one socket (every socket has four GPUs).
    assert all(len({i % 2 for i in g}) == 1 for g in rec.groups[3])
    assert set(rec.skipped) == {1, 16}
    assert rec.to_json()["leftover"]["3"] == rec.leftover[3]


def test_default_sizes_are_powers_of_two_dividing_the_count_or_leaving_replicas() -> None:
    assert default_sizes(8) == [2, 4, 8]
    assert default_sizes(6) == [2, 4]  # TP4 plus two GPUs for DP; TP6 divides no power-of-two head count
    assert default_sizes(72) == [2, 4, 8]  # an NVL72 domain is not one TP group
    assert default_sizes(3) == [2]  # 3x H100 NVL: TP2 on the NVLink pair, the third GPU a replica


def test_amd_gpus_get_hip_visible_devices() -> None:
    machine = make_machine(4, lambda i, j: "XGMI", vendor="AMD", name="AMD Instinct MI300X")
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.cuda_visible_devices[2][0].startswith("HIP_VISIBLE_DEVICES=")
    assert pair_quality(machine, 0, 1).bandwidth_gbs == 64.0


def test_fewer_than_two_gpus_gives_no_recommendation() -> None:
    machine = Machine()
    assert recommend_tp_groups(machine) is None
    machine.gpu(0)
    assert recommend_tp_groups(machine) is None


def test_gpus_known_only_from_links_and_unknown_paths() -> None:
    machine = Machine()
    machine.add_link(Link("GPU0", "GPU1", "PIX"))
    machine.add_link(Link("GPU2", "GPU3", "PIX"))  # the cross pairs are unknown
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.groups[2] == [[0, 1], [2, 3]]
    assert rec.worst_link[4] is None
    assert "unknown path" in rec.rationale[4]


def test_estimates_follow_link_class_and_generation() -> None:
    machine = make_machine(2, lambda i, j: "NV18", name="NVIDIA B200")
    assert pair_quality(machine, 0, 1).bandwidth_gbs == 900.0
    pcie = make_machine(2, lambda i, j: "PIX")
    pcie.gpus[0].pcie.gen_max, pcie.gpus[0].pcie.width_current = 3, 16
    quality = pair_quality(pcie, 0, 1)
    assert quality.bandwidth_gbs == round(0.985 * 16 * 0.8, 2)
    assert "PCIe Gen3 x16" in quality.basis
    order = ["PIX", "PXB", "PHB", "NODE", "SYS"]
    figures = [estimate_bandwidth(path, None, None, None, None)[0] for path in order]
    assert figures == sorted(figures, reverse=True) and len(set(figures)) == len(figures)


# -- the partitioner -------------------------------------------------------------------------------------------


def all_partitions(items: list[int], size: int, left: int):
    """Every partition into groups of `size` with `left` GPUs in no group (brute force reference)."""
    if len(items) == left:
        yield [], list(items)
        return
    head, rest = items[0], items[1:]
    for combo in itertools.combinations(rest, size - 1):
        remaining = [x for x in rest if x not in combo]
        for groups, leftover in all_partitions(remaining, size, left):
            yield [[head, *combo], *groups], leftover
    if left > 0:
        for groups, leftover in all_partitions(rest, size, left - 1):
            yield groups, [head, *leftover]


def brute_force_best(q: list[list[int]], size: int) -> PartitionScore:
    n = len(q)
    return max(score_partition(groups, q) for groups, _ in all_partitions(list(range(n)), size, n % size))


@st.composite
def quality_instances(draw, max_n: int = 8, sizes=(2, 4)):
    n = draw(st.integers(min_value=2, max_value=max_n))
    size = draw(st.sampled_from([s for s in sizes if s <= n] or [n]))
    top = draw(st.integers(min_value=1, max_value=6))  # small ranges make ties, the hard case
    cells = draw(st.lists(st.integers(min_value=0, max_value=top), min_size=n * n, max_size=n * n))
    q = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            q[i][j] = q[j][i] = cells[i * n + j]
    return q, size


@st.composite
def ultrametric_instances(draw, max_n: int = 9):
    """Cophenetic qualities of a random dendrogram: leaves in a random order, heights between neighbours."""
    n = draw(st.integers(min_value=2, max_value=max_n))
    heights = draw(st.lists(st.integers(min_value=0, max_value=4), min_size=n - 1, max_size=n - 1))
    order = draw(st.permutations(list(range(n))))
    size = draw(st.sampled_from([s for s in (2, 3, 4) if s <= n]))
    q = [[0] * n for _ in range(n)]
    for x in range(n):
        for y in range(x + 1, n):
            value = min(heights[x:y])
            q[order[x]][order[y]] = q[order[y]][order[x]] = value
    return q, size


def assert_covers(groups: list[list[int]], leftover: list[int], n: int, size: int) -> None:
    assert sorted([x for g in groups for x in g] + leftover) == list(range(n))
    assert all(len(g) == size for g in groups)
    assert len(groups) == n // size and len(leftover) == n % size


@settings(max_examples=80, deadline=None)
@given(quality_instances())
def test_chosen_partition_is_never_worse_than_any_other(instance) -> None:
    q, size = instance
    result = solve_partition(q, size)
    assert result.exact
    assert result.score == brute_force_best(q, size)
    assert result.score == score_partition(result.groups, q)
    assert_covers(result.groups, result.leftover, len(q), size)


@settings(max_examples=40, deadline=None)
@given(quality_instances(max_n=7, sizes=(3,)))
def test_leftover_choice_is_optimal_too(instance) -> None:
    q, size = instance
    result = solve_partition(q, size)
    assert result.score == brute_force_best(q, size)
    assert_covers(result.groups, result.leftover, len(q), size)


@settings(max_examples=80, deadline=None)
@given(ultrametric_instances())
def test_fast_algorithm_agrees_with_exhaustive_search_on_trees(instance) -> None:
    q, size = instance
    _, ultrametric = _dendrogram(q)
    assert ultrametric
    fast = fast_partition(q, size)
    best = brute_force_best(q, size)
    # Exact on the slowest link and on the sum of the groups' slowest links, always.
    assert (fast.score.worst, fast.score.sum_worst) == (best.worst, best.sum_worst)
    if fast.exact:  # packed without splitting a block: the total is optimal as well
        assert fast.score == best
    assert_covers(fast.groups, fast.leftover, len(q), size)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=17, max_value=40), st.sampled_from([2, 3, 4, 8]), st.integers(0, 10_000), st.booleans())
def test_large_instances_always_cover_every_gpu_once(n: int, size: int, seed: int, floats: bool) -> None:
    import random

    rng = random.Random(seed)
    q = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            # float qualities exercise rounding in the incremental pricing (it must not cycle)
            q[i][j] = q[j][i] = rng.random() * 3.7 if floats else rng.randint(0, 5)
    result = solve_partition(q, size)
    assert not result.exact or result.method == "tree"
    assert_covers(result.groups, result.leftover, n, size)


def test_best_partition_reads_cost_lower_is_better_and_worse_direction() -> None:
    cost = [[0, 1, 9, 9], [1, 0, 9, 9], [9, 9, 0, 1], [9, 9, 1, 0]]
    assert best_partition(4, 2, cost) == [[0, 1], [2, 3]]
    assert [0, 1] not in best_partition(4, 2, lambda i, j: -cost[i][j])
    bandwidth = [[0, 50, 10, 10], [50, 0, 10, 10], [10, 10, 0, 50], [10, 10, 50, 0]]
    assert best_partition(4, 2, bandwidth, higher_is_better=True) == [[0, 1], [2, 3]]
    q = quality_matrix(2, [[0, 30.0], [10.0, 0]], higher_is_better=True)
    assert q[0][1] == q[1][0] == 10.0


def test_tree_topology_72_gpus_is_solved_exactly() -> None:
    # An NVL72-like domain: NV18 everywhere, two GPUs per NUMA node.
    machine = make_machine(72, lambda i, j: "NV18", numa=lambda i: i // 2)
    rec = recommend_tp_groups(machine)
    assert rec is not None
    assert rec.exact[2] and rec.method[2] == "tree"
    assert rec.groups[2] == [[2 * k, 2 * k + 1] for k in range(36)]
    assert rec.worst_link == {2: "NV18", 4: "NV18", 8: "NV18"}
    assert rec.uniform == "NV18" and "GPU0" not in rec.rationale[8]  # a uniform box gets no pair talk


def test_worst_score_is_infinite_only_without_groups() -> None:
    q = [[0, 1], [1, 0]]
    assert solve_partition(q, 3).groups == [] and solve_partition(q, 3).score.worst == math.inf
    assert solve_partition(q, 1).groups == [[0], [1]]
