"""Inputs routed by content through the core build: logs, nccl-tests (with NCCL lines), benchmark
files holding several tests, NCCL topology XML merged into the machine; reports serialize."""

from __future__ import annotations

import json

from nccl_fixtures import fixture_path

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine


def build(*names: tuple[str, str]):
    return build_machine([Evidence(name=name, path=fixture_path(domain, name)) for domain, name in names])


def test_log_is_streamed_as_nccl_log():
    machine = build(("nccl", "nccl-2.12-2nodes-ipc-read-ib-gdrdma.log"))
    assert [i.format for i in machine.inputs] == ["nccl-log"]
    assert machine.nccl[0].input == "nccl-2.12-2nodes-ipc-read-ib-gdrdma.log"
    data = json.loads(json.dumps(machine.nccl[0].to_json()))
    assert data["transport_counts"] == {"P2P": 1, "SHM": 0, "NET": 8}
    first = data["connections"][0]
    assert {k: first[k] for k in ("channel", "src_rank", "dst_rank", "via", "transport", "direction")} == {
        "channel": 1, "src_rank": 5, "dst_rank": 4, "via": "P2P/IPC/read", "transport": "P2P", "direction": None}
    assert (first["channels"], first["channel_count"], first["first"]["line"]) == ([1], 1, 4)


def test_log_with_only_a_tests_rank_line_is_a_log():
    machine = build(("nccl", "nccl-2.18.5-2nodes-roce-ib-hca.log"))
    assert [i.format for i in machine.inputs] == ["nccl-log"]
    assert machine.nccl[0].env == {"NCCL_IB_HCA": "mlx5_4"}


def test_nccl_tests_output_gives_benchmark_and_nccl_run():
    machine = build(("nccl", "nccl-2.7.6-same-host-net-ib-p2p-level-loc-shm-disabled.log"))
    assert [i.format for i in machine.inputs] == ["nccl-tests"]
    assert machine.benchmarks[0].nranks == 4
    assert machine.nccl[0].transport_counts()["NET"] == 12


def test_collective_starting_line_joins_its_test():
    machine = build(("bench", "rccl-tests-mi300x-header-collective-starting.txt"))
    tests = [b for b in machine.benchmarks if b.tool == "nccl-tests"]
    assert len(tests) == 1
    assert (tests[0].op, tests[0].variant, len(tests[0].devices)) == ("all_reduce", "rccl-tests", 7)


def test_two_tests_in_one_file():
    machine = build(("bench", "nccl-tests-2.6-allgather-error-col-then-broadcast.txt"))
    assert [b.op for b in machine.benchmarks] == [None, "broadcast"]
    assert machine.benchmarks[0].avg_busbw == 6.6972


def test_footer_then_next_header_stay_with_nccl_tests():
    machine = build(("bench", "nccl-tests-l20-footer-then-second-header.txt"))
    assert {i.format for i in machine.inputs} == {"nccl-tests"}
    assert machine.benchmarks[0].avg_busbw == 6.13096
    assert machine.benchmarks[-1].nranks == 4


def test_benchmarks_serialize_in_contract_shape():
    machine = build(("bench", "p2pbw-2x4090-patched-driver.txt"), ("bench", "nvbandwidth-v0.8-a6000-d2d-read-trimmed.txt"),
                    ("bench", "nccl-tests-2nodes-200g-tail.txt"))
    shapes = {b.tool: json.loads(json.dumps(b.to_json())) for b in machine.benchmarks}
    assert set(shapes) == {"p2pBandwidthLatencyTest", "nvbandwidth", "nccl-tests"}
    assert shapes["p2pBandwidthLatencyTest"]["can_access"] == [[None, True], [True, None]]
    assert shapes["nvbandwidth"]["testcases"]["device_to_device_memcpy_read_ce"]["sum"] == 715.53
    nt = shapes["nccl-tests"]
    assert set(nt) >= {"tool", "op", "nranks", "rows", "max_busbw", "avg_busbw", "out_of_bounds"}
    assert set(nt["rows"][0]) >= {"size_bytes", "count", "type", "out_of_place", "in_place"}
    assert nt["rows"][0]["out_of_place"] == {"time_us": 2560.7, "algbw": 49.96, "busbw": 95.75, "wrong": 0}


def test_topology_xml_merges_gpus_and_nvlink_pairs():
    machine = build(("nccl", "nccl-topo-azure-ncv4-4xa100-nvlink-pairs.xml"))
    assert [i.format for i in machine.inputs] == ["nccl-topo-xml"]
    assert {g.index: g.bus_id for g in machine.sorted_gpus()} == {
        0: "0001:00:00.0", 1: "0002:00:00.0", 2: "0003:00:00.0", 3: "0004:00:00.0"}
    assert machine.gpus[3].numa_node == 3
    pairs = {(link.a, link.b, link.path) for link in machine.links if link.path.startswith("NV")}
    assert pairs == {("GPU0", "GPU1", "NV12"), ("GPU2", "GPU3", "NV12")}
    # the other pairs sit under different CPUs of the XML: SYS, read from NCCL's placement
    assert {link.path for link in machine.links if not link.path.startswith("NV")} == {"SYS"}
    assert machine.nics["eth0"].numa_node == 0
