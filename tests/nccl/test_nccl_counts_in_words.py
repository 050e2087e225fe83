"""NCCL and NIC findings count in words, with the verb agreeing: 'once', '2 times', '1 NET/IB connection ...
lacks', '2 ... lack', '1 distinct warning', never 'time(s)'."""

from __future__ import annotations

from pathlib import Path

from nccl_fixtures import fixture_path

from k3diag.analyze.engine import run_rules
from k3diag.analyze.rules import benchmarks as benchmark_rules
from k3diag.analyze.rules import nccl as nccl_rules
from k3diag.join.merge_nccl import merge_nccl_log
from k3diag.model.bench_records import NcclTestsBenchmark
from k3diag.model.machine import Machine
from k3diag.model.nccl import NcclConnection, NcclRun
from k3diag.model.source import SourceRef
from k3diag.model.topology import Link
from k3diag.parse import nccl_log
from tests.fabric.conftest import machine_from


def _machine_of_text(tmp_path: Path, text: str) -> Machine:
    path = tmp_path / "nccl.log"
    path.write_text(text)
    machine = Machine()
    merge_nccl_log(nccl_log.parse_path(path, "nccl.log"), machine)
    return machine


def _finding(machine: Machine, finding_id: str):
    [found] = [f for f in run_rules(machine) if f.id == finding_id]
    return found


def test_dev_shm_full_once_and_twice(tmp_path: Path) -> None:
    first = fixture_path("nccl", "nccl-2.9-shm-posix-fallocate-kubeflow.log").read_text().splitlines()[0]
    once = _finding(_machine_of_text(tmp_path, first + "\n"), "nccl-shm-no-space")
    assert once.explanation.startswith("NCCL failed to create or extend its /dev/shm segments once: the file system "
                                       "is full."), once.explanation
    machine = Machine()
    name = "nccl-2.9-shm-posix-fallocate-kubeflow.log"
    merge_nccl_log(nccl_log.parse_path(fixture_path("nccl", name), name), machine)
    assert _finding(machine, "nccl-shm-no-space").explanation.startswith(
        "NCCL failed to create or extend its /dev/shm segments 2 times: the file system is full.")


def test_shm_attach_failed_once_and_twice(tmp_path: Path) -> None:
    line = ("g148:14937:69361 [0] misc/shmutils.cc:129 NCCL WARN Error while attaching to shared memory segment "
            "/dev/shm/nccl-{0} (size 14156128), error: No such file or directory (2)\n")
    once = _finding(_machine_of_text(tmp_path, line.format("glnlGK")), "nccl-shm-attach-failed")
    assert once.explanation.startswith("Once a rank could not open a /dev/shm segment another rank of the same node "
                                       "had created. "), once.explanation
    twice = _finding(_machine_of_text(tmp_path, line.format("glnlGK") + line.format("glnlGK")),
                     "nccl-shm-attach-failed")
    assert twice.explanation.startswith("2 times a rank could not open a /dev/shm segment"), twice.explanation


def test_distinct_warnings_and_error_traces_one_and_several() -> None:
    def title(name: str) -> str:
        machine = Machine()
        merge_nccl_log(nccl_log.parse_path(fixture_path("nccl", name), name), machine)
        return _finding(machine, "nccl-warnings").title

    assert title("nccl-2.9-shm-posix-fallocate-kubeflow.log") == "NCCL printed 1 error trace"
    assert title("nccl-2.2x-shm-no-space-ci-pod-timestamps.log") == "NCCL printed 1 distinct warning and 4 error traces"


def _run(connections: list[tuple[str, str]], env: dict[str, str] | None = None) -> NcclRun:
    run = NcclRun(library="NCCL", version="2.21.5", nranks=16, nodes=2, env=dict(env or {}), input="nccl.log")
    for n, (via, transport) in enumerate(connections):
        run.connections.append(NcclConnection(n, 0, 8 + n, via, transport, source=SourceRef(
            "nccl.log", 100 + n, f"host:1:1 [0] NCCL INFO Channel {n:02d}/0 : 0[0] -> {8 + n}[0] via {via}")))
    return run


def test_shm_lines_under_a_p2p_switch_off_one_and_several() -> None:
    for lines, said in ((1, "1 connection line uses SHM and none P2P."), (2, "2 connection lines use SHM and none P2P.")):
        machine = Machine()
        machine.nccl.append(_run([("SHM/direct/direct", "SHM")] * lines, env={"NCCL_P2P_DISABLE": "1"}))
        [finding] = [f for f in nccl_rules.check_env_disables_transport(machine, [])
                     if "NCCL_P2P_DISABLE" in f.title or "NCCL_P2P_DISABLE" in f.explanation]
        assert f"The log confirms it: {said}" in finding.explanation, finding.explanation


def test_ib_connections_without_gdrdma_one_and_several() -> None:
    for lines, said in ((1, "1 NET/IB connection of "), (2, "2 NET/IB connections of ")):
        machine = Machine()
        machine.add_link(Link("GPU0", "NIC0", "PIX"))
        machine.nccl.append(_run([(f"NET/IB/{n}", "NET") for n in range(lines)]))
        finding = _finding(machine, "nccl-gdrdma-not-used")
        verb = "lacks" if lines == 1 else "lack"
        assert finding.explanation.startswith(said) and f" {verb} `/GDRDMA`: every transfer" in finding.explanation, (
            finding.explanation)


def test_nccl_tests_wrong_values_one_and_several() -> None:
    for wrong, said in ((1, "(1 wrong value)"), (4, "(4 wrong values)")):
        machine = Machine()
        machine.benchmarks.append(NcclTestsBenchmark(op="all_reduce", nranks=2, out_of_bounds=wrong, input="t.txt"))
        [finding] = [f for f in benchmark_rules.check_data_errors(machine, [])
                     if f.id == "nccl-tests-data-errors"]
        assert finding.title == f"nccl-tests all_reduce returned wrong data {said}", finding.title


def test_network_nics_left_and_other_ports_active_one_and_several() -> None:
    machine = machine_from("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt")
    for name in ("NIC1", "NIC2", "NIC3"):
        machine.nics[name].management_port = True
        machine.nics[name].management_source = SourceRef("sysfs.json", None, "vpd: SW_MNG")
    [mgmt] = [f for f in run_rules(machine) if f.id == "nic-management-port"]
    assert "(1 network NIC remains)" in mgmt.explanation, mgmt.explanation
    machine.nics["NIC1"].management_port = False
    [mgmt] = [f for f in run_rules(machine) if f.id == "nic-management-port"]
    assert "(2 network NICs remain)" in mgmt.explanation, mgmt.explanation


def test_aborted_after_one_message_size() -> None:
    from k3diag.model.bench_records import NcclTestsRow

    machine = Machine()
    machine.benchmarks.append(NcclTestsBenchmark(
        op="all_reduce", nranks=2, input="t.txt", rows=[NcclTestsRow(size_bytes=8, count=2, type="float")],
        failure="NCCL error at common.cu:1204: 'unhandled cuda error'",
        failure_source=SourceRef("t.txt", 30, "host: Test NCCL failure common.cu:1204 'unhandled cuda error'")))
    [finding] = [f for f in benchmark_rules.check_aborted(machine, []) if f.id == "nccl-tests-aborted"]
    assert "after 1 message size, the largest 8 bytes: its numbers cover only what ran" in finding.explanation, (
        finding.explanation)
