"""Roofline and link formulas against hand-computed values; link classes from topology and benchmarks."""

from __future__ import annotations

import math

import pytest

from k3diag.advise.catalog import find_gpu, find_model, gpu_catalog
from k3diag.advise.links import LinkInfo, fabric_link, group_link, nccl_measurement
from k3diag.advise.memory import Layout, ReserveSettings, stage_ledgers
from k3diag.advise.roofline import (
    alltoall_us,
    decode_roofline,
    expected_distinct_experts,
    expected_max_experts_per_rank,
    ring_allreduce_us,
)
from k3diag.model.machine import Machine
from k3diag.model.topology import Link, P2PStatus

LINK = LinkInfo("test", None, 100.0, 1.0, False, "test link")


def test_ring_allreduce_formula():
    # 2(n-1) x latency + 2(n-1)/n x bytes / bandwidth: 14 x 1 us + 1.75 x 14336 B / 100 GB/s
    assert ring_allreduce_us(8, 14336, LINK) == pytest.approx(14 + 1.75 * 14336 / 100e3)
    assert ring_allreduce_us(1, 14336, LINK) == 0.0


def test_alltoall_formula():
    # (n-1) messages of latency, (n-1)/n of the bytes leave the GPU
    assert alltoall_us(8, 114688, LINK) == pytest.approx(7 + 7 / 8 * 114688 / 100e3)


def test_expected_max_experts_hand_case():
    # 4 experts in 2 groups, top-2: 6 pairs; 2 land in one group (max 2), 4 split (max 1) -> 8/6
    assert expected_max_experts_per_rank(4, 2, 2) == pytest.approx(4 / 3)
    # 7 experts on 3 ranks (3, 2, 2): 5 of the 21 pairs share a rank -> (5 x 2 + 16 x 1) / 21
    assert expected_max_experts_per_rank(7, 2, 3) == pytest.approx(26 / 21)
    assert expected_max_experts_per_rank(896, 16, 1) == 16
    busiest = expected_max_experts_per_rank(896, 16, 8)
    assert 2 < busiest < 16  # more than the average of 2: the busiest rank sets the pace


def test_expected_distinct_experts():
    assert expected_distinct_experts(896, 16, 1) == pytest.approx(16)
    assert expected_distinct_experts(4, 2, 2) == pytest.approx(4 * (1 - 0.25))
    assert expected_distinct_experts(896, 16, 10_000) == pytest.approx(896, rel=1e-6)


def test_dense_model_floor_is_bytes_over_bandwidth():
    llama = find_model("llama-3.1-70b")
    stages = stage_ledgers(llama, Layout(1, 1, 1), 1e6, 1, ReserveSettings())
    roof = decode_roofline(llama, Layout(1, 1, 1), stages, 1, 1000.0, LINK, LINK, LINK)
    # Every weight but the embedding table, BF16, once; plus one token of KV.
    expected_bytes = (70_553_706_496 - 128256 * 8192) * 2 + 327_680
    assert roof.floor_ms == pytest.approx(expected_bytes / 1e12 * 1e3)
    assert roof.comm_ms == 0.0 and roof.dominant == "memory bandwidth"


def test_tp_comm_counts_two_allreduces_per_layer():
    llama = find_model("llama-3.1-70b")
    layout = Layout(1, 4, 1)
    stages = stage_ledgers(llama, layout, 1e6, 1, ReserveSettings())
    roof = decode_roofline(llama, layout, stages, 1, 1000.0, LINK, LINK, LINK)
    assert roof.tp_ms == pytest.approx(160 * ring_allreduce_us(4, 8192 * 2, LINK) / 1e3)


def test_k3_tp8_floor_counts_replicated_weights_on_every_gpu(k3):
    layout = Layout(1, 8, 1)
    stages = stage_ledgers(k3, layout, 288.0, 8192, ReserveSettings())
    roof = decode_roofline(k3, layout, stages, 8192, 8000.0, LINK, LINK, LINK)
    # Higher than the naive "137 GB over 8 x 8 TB/s" because latent projections, routers and MLA
    # down-projections are read by all eight GPUs.
    assert roof.aggregate_floor_ms == pytest.approx(2.14, rel=0.02)
    assert roof.weights_ms > 1.5 * roof.aggregate_floor_ms


def test_ep_roofline_uses_the_busiest_rank(k3):
    tp = stage_ledgers(k3, Layout(1, 8, 1, 1), 288.0, 1, ReserveSettings())
    ep = stage_ledgers(k3, Layout(1, 8, 1, 8), 288.0, 1, ReserveSettings())
    r_tp = decode_roofline(k3, Layout(1, 8, 1, 1), tp, 1, 8000.0, LINK, LINK, LINK)
    r_ep = decode_roofline(k3, Layout(1, 8, 1, 8), ep, 1, 8000.0, LINK, LINK, LINK)
    assert r_ep.weights_ms > r_tp.weights_ms  # ~4.2 whole experts on the busiest rank vs 16 eighths
    assert r_ep.ep_ms > 0 and r_tp.ep_ms == 0


def test_nvlink_and_xgmi_link_classes():
    catalog = gpu_catalog()
    h100 = fabric_link(find_gpu("h100"), catalog, 8)
    assert h100.klass == "nvlink" and h100.bandwidth_gbs == pytest.approx(18 * 25 * 0.8)
    mi355 = find_gpu("mi355x")
    assert fabric_link(mi355, catalog, 8).bandwidth_gbs == pytest.approx(7 * 76.8 * 0.7)
    assert fabric_link(mi355, catalog, 2).bandwidth_gbs == pytest.approx(1 * 76.8 * 0.7)  # one link to one peer
    rtx = fabric_link(find_gpu("rtx4090"), catalog, 4)
    assert rtx.klass == "host-staged" and rtx.slow and rtx.pcie_only
    nv8 = fabric_link(find_gpu("a100"), catalog, 2, code="NV8")
    assert nv8.bandwidth_gbs == pytest.approx(8 * 25 * 0.8)


def _machine(codes: dict[tuple[int, int], str], n: int = 4, p2p: str | None = None) -> Machine:
    machine = Machine()
    for i in range(n):
        machine.gpu(i).name = "NVIDIA L40S"
    for a in range(n):
        for b in range(a + 1, n):
            machine.add_link(Link(f"GPU{a}", f"GPU{b}", codes.get((a, b), "SYS")))
            if p2p:
                machine.p2p.append(P2PStatus(f"GPU{a}", f"GPU{b}", "read", p2p))
    return machine


def test_group_link_reads_the_worst_path_in_the_group():
    gpu, catalog = find_gpu("l40s"), gpu_catalog()
    machine = _machine({(0, 1): "PIX", (2, 3): "PIX"})
    node = {i: 0 for i in range(4)}
    pair, _ = group_link(gpu, catalog, [0, 1], node, machine)
    assert pair.klass == "pcie-p2p" and pair.code == "PIX"
    four, _ = group_link(gpu, catalog, [0, 1, 2, 3], node, machine)
    assert four.klass == "pcie-sys" and four.code == "SYS"
    assert four.bandwidth_gbs < pair.bandwidth_gbs


def test_group_link_falls_back_to_host_staging_when_p2p_is_reported_broken():
    gpu, catalog = find_gpu("l40s"), gpu_catalog()
    machine = _machine({(0, 1): "PIX"}, n=2, p2p="GNS")
    info, notes = group_link(gpu, catalog, [0, 1], {0: 0, 1: 0}, machine)
    assert info.klass == "host-staged" and "staged through host memory" in notes[0]


def test_groups_across_nodes_use_the_scale_out_link():
    info, _ = group_link(find_gpu("h200"), gpu_catalog(), list(range(16)), {i: i // 8 for i in range(16)})
    assert info.klass == "ib-400g" and info.slow


class _FakeNcclTests:
    tool = "nccl-tests"

    def __init__(self, op: str, nranks: int, busbw: float, small_us: float):
        self._data = {
            "tool": "nccl-tests",
            "op": op,
            "nranks": nranks,
            "max_busbw": busbw,
            "rows": [
                {"size_bytes": 8, "out_of_place": {"time_us": small_us}},
                {"size_bytes": 1 << 30, "out_of_place": {"time_us": 5000.0}},
            ],
        }

    def to_json(self) -> dict:
        return self._data


def test_measured_busbw_replaces_link_class_figures():
    machine = _machine({(0, 1): "PIX", (2, 3): "PIX"})
    machine.benchmarks.append(_FakeNcclTests("all_reduce", 4, 24.5, 42.0))
    busbw, latency, desc = nccl_measurement(machine, ("allreduce",), 4)
    assert busbw == 24.5 and latency == pytest.approx(42.0 / 6) and "24.5" in desc
    info, _ = group_link(find_gpu("l40s"), gpu_catalog(), [0, 1, 2, 3], {i: 0 for i in range(4)}, machine)
    assert info.measured and info.bandwidth_gbs == 24.5 and info.latency_us == pytest.approx(7.0)
    assert nccl_measurement(Machine(), ("allreduce",), 4) is None
    assert not math.isnan(info.latency_us)
