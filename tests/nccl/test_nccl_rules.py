"""NCCL and benchmark findings on real outputs, with causes linked to topology findings."""

from __future__ import annotations

from pathlib import Path

from nccl_fixtures import fixture_path, fixture_section

from k3diag.analyze.engine import run_rules
from k3diag.analyze.rules import benchmarks as bench_rules
from k3diag.analyze.rules import nccl as nccl_rules
from k3diag.evidence import Evidence
from k3diag.model.bench_records import NcclTestsBenchmark, NcclTestsDevice, NcclTestsMeasure, NcclTestsRow
from k3diag.join.build import build_machine
from k3diag.model.machine import Machine
from k3diag.join.merge_bench import merge_benchmark
from k3diag.join.merge_nccl import merge_nccl_log
from k3diag.model.topology import Link, P2PStatus
from k3diag.parse import nccl_log, nccl_tests, p2p_bandwidth
from k3diag.parse.text import Section


def machine_with_log(name: str, machine: Machine | None = None) -> Machine:
    machine = machine or Machine()
    merge_nccl_log(nccl_log.parse_path(fixture_path("nccl", name), name), machine)
    return machine


def findings(machine: Machine, rule_id: str):
    return [f for f in run_rules(machine) if f.id == rule_id]


def two_socket_box_of_the_shm_log() -> Machine:
    """The 8 GPUs of nccl-2.7-busid-direct-shared-memory.log (busIds 04,05,08,09,84,85,88,89) on a two-socket
    box: pairs under one switch PIX, one socket PHB, across sockets SYS with P2P refused (CNS)."""
    machine = Machine()
    buses = ["04", "05", "08", "09", "84", "85", "88", "89"]
    for index, bus in enumerate(buses):
        gpu = machine.gpu(index)
        gpu.bus_id = f"0000:{bus}:00.0"
        gpu.numa_node = 0 if index < 4 else 1
    for a in range(8):
        for b in range(a + 1, 8):
            path = "PIX" if a // 2 == b // 2 else ("PHB" if a // 4 == b // 4 else "SYS")
            machine.add_link(Link(a=f"GPU{a}", b=f"GPU{b}", path=path))
            if path == "SYS":
                machine.p2p.append(P2PStatus(src=f"GPU{a}", dst=f"GPU{b}", capability="read", status="CNS"))
    return machine


def test_same_host_pair_on_shm_names_pair_host_transport_and_topology_causes():
    # the 8 GPUs of the log (busIds 04,05,08,09,84,85,88,89) on a two-socket box: 0-3 on socket 0
    machine = two_socket_box_of_the_shm_log()
    machine_with_log("nccl-2.7-busid-direct-shared-memory.log", machine)
    found = {tuple(f.data["ranks"]): f for f in findings(machine, "nccl-same-host-pair-not-p2p")}
    assert set(found) == {(1, 2), (3, 4), (5, 6), (0, 7)}
    cross = found[(3, 4)]
    assert cross.subjects == ["unicom-169:rank3", "unicom-169:rank4"]
    assert "SHM" in cross.title and "unicom-169" in cross.title and "channel 0" in cross.title
    assert "4 other pairs on this host use P2P" in cross.title
    assert cross.data["gpus"] == [3, 4] and cross.data["gpu_basis"] == "busId"
    # the chain: SHM because P2P is refused (CNS) because the pair crosses sockets (SYS)
    assert cross.causes == ["p2p-not-supported"]  # CNS across sockets: refused by design, one finding
    refusal = next(f for f in findings(machine, "p2p-not-supported") if "p2p-not-supported@GPU3,GPU4" in f.aliases)
    assert refusal.causes == ["gpu-pair-sys"]  # one design finding stands for every SYS pair
    assert "crosses CPU sockets" in cross.explanation
    assert any("3[9000] -> 4[84000]" in e.text for e in cross.evidence)
    same_socket = found[(1, 2)]
    assert same_socket.causes == ["gpu-pair-phb"]


def test_same_host_pair_on_net_is_explained_by_env():
    machine = build_machine([Evidence(name="707.log", path=fixture_path(
        "nccl", "nccl-2.7.6-same-host-net-ib-p2p-level-loc-shm-disabled.log"))])
    all_findings = run_rules(machine)
    env = {f.subjects[0] for f in all_findings if f.id == "nccl-env-disables-transport"}
    assert env == {"NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE"}
    pair = next(f for f in all_findings if f.id == "nccl-same-host-pair-not-p2p" and f.data["ranks"] == [0, 2])
    assert pair.data["transport"] == "NET" and pair.data["via"].startswith("NET/IB/")
    assert pair.causes == ["nccl-env-disables-transport@NCCL_P2P_LEVEL", "nccl-env-disables-transport@NCCL_SHM_DISABLE"]
    assert any("NCCL_SHM_DISABLE set by environment" in e.text for e in pair.evidence)


def test_two_machines_with_one_hostname_are_not_a_same_host_net_pair():
    machine = machine_with_log("nccl-2.1x-two-nodes-same-hostname-socket-shm.log")
    pairs = [f for f in findings(machine, "nccl-same-host-pair-not-p2p") if f.data["transport"] == "NET"]
    assert pairs == []


def test_env_finding_confirms_effect():
    machine = machine_with_log("nccl-2.18-p2p-level-loc-ib-disable-wrapped.log")
    found = {f.subjects[0]: f for f in findings(machine, "nccl-env-disables-transport")}
    assert found["NCCL_P2P_LEVEL"].severity == "warn"
    assert found["NCCL_IB_DISABLE"].severity == "info"  # single node: no effect
    assert found["NCCL_P2P_LEVEL"].evidence[0].line == 9


def test_p2p_disabled_between_connected():
    machine = machine_with_log("nccl-trtllm-4090-p2p-disabled-between-connected.log")
    (finding,) = findings(machine, "nccl-p2p-disabled-between-connected")
    assert finding.severity == "warn" and finding.subjects == ["bcc-qianfan-gpu4090-offline-1"]
    assert finding.data["pairs"] == [[4, 5], [4, 6], [4, 7], [5, 6], [5, 7], [6, 7]]
    # the NVLink variant, in the wording of NCCL's src/graph/paths.cc, is fatal
    line = ("node1:100:200 [0] graph/paths.cc:318 NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and 0. "
            "This should not be the case given their connectivity, and is probably due to a hardware issue.")
    machine = Machine()
    merge_nccl_log(nccl_log.parse_stream([line], "nvl.log"), machine)
    (finding,) = findings(machine, "nccl-p2p-disabled-between-connected")
    assert finding.severity == "fail" and finding.data["nvlink"] is True


def test_multinode_socket_with_reason():
    machine = machine_with_log("rccl-mi250x-socket-comm-suffix.log")
    (finding,) = findings(machine, "nccl-multinode-socket")
    assert "NET/Socket" in finding.title
    assert any("via NET/Socket/" in e.text for e in finding.evidence)
    machine = machine_with_log("nccl-2.1x-redacted-host-socket-2nodes.log")
    assert findings(machine, "nccl-multinode-socket")  # one redacted hostname, but NET between ranks


def test_gdrdma_not_used():
    machine = machine_with_log("nccl-2.1x-ib-no-gdrdma-no-module-2containers.log")
    (finding,) = findings(machine, "nccl-gdrdma-not-used")
    assert "not loaded" in finding.explanation
    machine = machine_with_log("nccl-2.2x-2nodes-direct-pointer-read-ib-no-gdr.log")
    assert findings(machine, "nccl-gdrdma-not-used") == []  # nothing says a NIC is near
    machine.add_link(Link(a="GPU4", b="NIC0", path="PIX"))
    assert findings(machine, "nccl-gdrdma-not-used")
    machine = machine_with_log("nccl-2.12-2nodes-ipc-read-ib-gdrdma.log")
    assert findings(machine, "nccl-gdrdma-not-used") == []


def test_warnings_finding_lists_file_and_line():
    machine = machine_with_log("nccl-2.1x-socket-proxy-warn-redacted.log")
    (finding,) = findings(machine, "nccl-warnings")
    assert "proxy.cc:1485" in finding.explanation
    assert "error trace" in finding.title
    assert finding.evidence[0].line == 8


def bench_machine(*names: str) -> Machine:
    machine = Machine()
    for name in names:
        merge_benchmark(nccl_tests.parse(fixture_section("bench", name), name), machine)
    return machine


def test_data_errors_fail():
    text = fixture_section("bench", "nccl-tests-2nodes-200g-tail.txt").text
    text = text.replace("49.96   95.75      0", "49.96   95.75   1024").replace("values : 0 OK", "values : 2 FAILED")
    machine = Machine()
    merge_benchmark(nccl_tests.parse(Section(text, 1), "bad.txt"), machine)
    (finding,) = findings(machine, "nccl-tests-data-errors")
    assert finding.severity == "fail" and finding.data["wrong_total"] == 1024
    assert any("1024" in e.text for e in finding.evidence)
    assert findings(bench_machine("nccl-tests-2nodes-200g-tail.txt"), "nccl-tests-data-errors") == []


def test_single_rank():
    machine = bench_machine("nccl-tests-1gpu-a6000-head.txt")
    (finding,) = findings(machine, "nccl-tests-single-rank")
    assert finding.severity == "info"


def _bench(op: str, nranks: int, busbw: float, names: list[str] | None = None, buses: list[str] | None = None,
           host: str = "h") -> NcclTestsBenchmark:
    bench = NcclTestsBenchmark(op=op, nranks=nranks, input=f"{op}-{nranks}.txt")
    for rank in range(nranks):
        bench.devices.append(NcclTestsDevice(rank, host, 1, rank, buses[rank] if buses else None,
                                             names[rank] if names else None))
    for size in (268435456, 536870912, 1073741824):
        bench.rows.append(NcclTestsRow(size, size // 4, "float", "sum", -1,
                                       NcclTestsMeasure(100.0, busbw / 2, busbw, 0), NcclTestsMeasure(100.0, busbw / 2, busbw, 0)))
    return bench


def test_busbw_low_against_pcie_link_class():
    machine = Machine()
    for index in range(4):
        gpu = machine.gpu(index)
        gpu.bus_id = f"0000:{0x1b + index:02x}:00.0"
        gpu.pcie.gen_max, gpu.pcie.width_current = 4, 16
    machine.gpus[2].pcie.width_current = 8
    for a in range(4):
        for b in range(a + 1, 4):
            machine.add_link(Link(a=f"GPU{a}", b=f"GPU{b}", path="PXB"))
    machine.benchmarks.append(_bench("all_reduce", 4, 6.0, buses=[g.bus_id for g in machine.sorted_gpus()]))
    (finding,) = findings(machine, "nccl-tests-busbw-low")
    assert finding.data["expected"] == 12.6  # GPU2 at Gen4 x8 is the slowest link
    assert "GPU2's PCIe Gen4 x8" in finding.data["basis"]
    machine.benchmarks[0] = _bench("all_reduce", 4, 11.0, buses=[g.bus_id for g in machine.sorted_gpus()])
    assert findings(machine, "nccl-tests-busbw-low") == []


def test_busbw_low_against_nvlink_typical_results():
    machine = Machine()
    for index in range(8):
        gpu = machine.gpu(index)
        gpu.bus_id = f"0000:{0x18 + index:02x}:00.0"
        gpu.name = "NVIDIA H100 80GB HBM3"
    for a in range(8):
        for b in range(a + 1, 8):
            machine.add_link(Link(a=f"GPU{a}", b=f"GPU{b}", path="NV18"))
    machine.benchmarks.append(_bench("all_reduce", 8, 150.0, buses=[g.bus_id for g in machine.sorted_gpus()]))
    (finding,) = findings(machine, "nccl-tests-busbw-low")
    assert finding.data["expected"] == 370.0 and "NVLink" in finding.data["basis"]
    # without topology: the GPU model named in the header of an 8-GPU run
    machine = Machine()
    machine.benchmarks.append(_bench("all_reduce", 8, 100.0, names=["NVIDIA H200"] * 8))
    (finding,) = findings(machine, "nccl-tests-busbw-low")
    assert finding.data["expected"] == 475.0
    machine = Machine()
    machine.benchmarks.append(_bench("all_reduce", 8, 300.0, names=["NVIDIA H200"] * 8))
    assert findings(machine, "nccl-tests-busbw-low") == []


def test_scaling_drops():
    machine = Machine()
    machine.benchmarks.extend([_bench("all_reduce", 2, 20.0), _bench("all_reduce", 4, 9.0), _bench("all_reduce", 8, 8.5)])
    (finding,) = findings(machine, "nccl-tests-scaling-drops")
    assert finding.subjects == ["all_reduce:2->4"] and finding.data["before"] == 20.0 and finding.data["after"] == 9.0


def p2p_machine(name: str) -> Machine:
    machine = Machine()
    merge_benchmark(p2p_bandwidth.parse(fixture_section("bench", name), name), machine)
    return machine


def test_p2p_enabled_slower_than_disabled():
    (finding,) = findings(p2p_machine("p2pbw-6gpu-p2p-slower-than-disabled.txt"), "p2p-enabled-not-faster")
    assert "slower than" in finding.title and len(finding.data["pairs"]) == 30
    assert finding.subjects == [f"GPU{i}" for i in range(6)]
    (finding,) = findings(p2p_machine("p2pbw-2x4090-patched-driver.txt"), "p2p-enabled-not-faster")
    assert "no faster than" in finding.title
    assert finding.data["pairs"] == [[0, 1, 6.6, 6.34], [1, 0, 6.6, 6.34]]
    assert findings(p2p_machine("p2pbw-8xh100-nvlink-diag-over-1000.txt"), "p2p-enabled-not-faster") == []


def test_p2p_cannot_access_peer():
    (finding,) = findings(p2p_machine("p2pbw-8x2080ti-cannot-access-head.txt"), "p2p-cannot-access-peer")
    assert finding.data["consumer_gpus"] is True
    assert finding.data["pairs"][:2] == [[0, 1], [0, 2]]
    assert "Device=0 CANNOT Access Peer Device=1" in finding.evidence[0].text
    (finding,) = findings(p2p_machine("p2pbw-6x50xx-mixed-cannot-access-head.txt"), "p2p-cannot-access-peer")
    assert [2, 3] not in finding.data["pairs"] and [0, 1] in finding.data["pairs"]


def test_rank_gpu_mapping_rules():
    machine = machine_with_log("nccl-2.2x-h800-shm-nvmldev-differs.log")
    run = machine.nccl[0]
    assert nccl_rules.rank_gpu(machine, run, 2) == (6, "nvmlDev")
    machine.host.hostname = "another-host"
    assert nccl_rules.rank_gpu(machine, run, 2) == (None, None)


def test_rules_modules_expose_their_ids():
    ids = {rule.id for rule in nccl_rules.RULES + bench_rules.RULES}
    docs = Path(__file__).resolve().parents[2] / "docs" / "findings"
    for rule_id in ids:
        assert (docs / f"{rule_id}.md").is_file(), rule_id


def test_shm_where_p2p_is_refused_by_design_is_advice_and_where_p2p_should_work_a_warning():
    """docs/findings/README.md: the design finding is the cause and the SHM pair is advice (info); a pair
    that meets at the host bridge, where P2P can work, still warns."""
    machine = two_socket_box_of_the_shm_log()
    machine_with_log("nccl-2.7-busid-direct-shared-memory.log", machine)
    found = {tuple(f.data["ranks"]): f for f in findings(machine, "nccl-same-host-pair-not-p2p")}
    cross = found[(3, 4)]
    assert cross.severity == "info" and cross.kind == "info"
    assert cross.causes[0] == "p2p-not-supported"  # the by-design advisory, found by its pair alias
    assert "This is expected on this machine: P2P is refused by design between these GPUs" in cross.explanation
    assert cross.remedy.startswith("Nothing to repair on the node")
    same_socket = found[(1, 2)]
    assert same_socket.severity == "warn" and same_socket.kind in ("", "fault")
    assert "expected on this machine" not in same_socket.explanation
    assert same_socket.remedy.startswith("Remove NCCL_P2P_DISABLE")
