"""nccl-tests outputs as pasted: runs that died (`host: Test NCCL failure file:line ...`, before any row in
NVIDIA/nccl-tests#287, after some in #322), rows under NCCL INFO lines without their header
(Azure/aks-rdma-infiniband#30), one bus number for every GPU (NVIDIA/nccl#583)."""

from __future__ import annotations

from nccl_fixtures import fixture_section

from k3diag.analyze.engine import run_rules
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.parse import nccl_tests
from k3diag.parse.text import Section
from tests.fabric.conftest import FIXTURES

BEFORE_ROWS = "nccl-tests-5090-test-nccl-failure-before-rows-287.txt"
AFTER_ROWS = "nccl-tests-rows-then-failure-several-hosts-322.txt"


def _aborted(name: str) -> list:
    machine = build_machine([Evidence(name=name, path=FIXTURES / "bench" / name)])
    return [f for f in run_rules(machine) if f.id == "nccl-tests-aborted"]


def test_failure_before_any_row_is_said() -> None:
    result = nccl_tests.parse(fixture_section("bench", BEFORE_ROWS), BEFORE_ROWS)
    (bench,) = result.benchmarks
    assert bench.op == "all_reduce" and bench.rows == [] and len(bench.devices) == 2
    assert bench.failure == "NCCL error at common.cu:392: 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'"
    assert bench.failure_hosts == ["GENOA-06"] and bench.failure_source.line == 11
    assert result.warnings == [
        "the all_reduce test aborted (line 11): NCCL error at common.cu:392: 'unhandled cuda error (run with "
        "NCCL_DEBUG=INFO for details)' on GENOA-06; no size finished"]
    assert bench.to_json()["failure"] == bench.failure
    (finding,) = _aborted(BEFORE_ROWS)
    assert finding.severity == "fail" and finding.title == "nccl-tests all_reduce aborted on GENOA-06"
    assert "before any message size finished: it measured nothing" in finding.explanation


def test_failure_after_rows_keeps_the_rows_and_names_every_host() -> None:
    result = nccl_tests.parse(fixture_section("bench", AFTER_ROWS), AFTER_ROWS)
    (bench,) = result.benchmarks
    assert [row.size_bytes for row in bench.rows][-1] == 17179869184 and len(bench.rows) == 5
    assert bench.rows[-1].in_place.busbw == 367.44
    assert bench.failure_hosts == ["HCA-128", "HCA-108", "HCA-107"]
    # the ` .. host pid N: Test failure common.cu:915` stack lines are no unreadable table lines
    assert not any("could not be read" in w for w in result.warnings)
    (finding,) = _aborted(AFTER_ROWS)
    assert "after 5 message sizes, the largest 17179869184 bytes: its numbers cover only what ran" in finding.explanation


def test_failure_wordings_of_other_builds() -> None:
    # the format strings of nccl-tests' NCCLCHECK/CUDACHECK: with the last error after ` / `, before 2.13
    # without host and last error, a CUDA call. The lines are real (nccl-tests#166, a DGX Spark write-up, #280,
    # a CSCS docs page), except that the second one's last-error text after ` / ` was put in by this test: the
    # real line has it empty, and the `'%s / %s'` format string's second field must still be read.
    def failure(line: str) -> str | None:
        text = "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n" + line + "\n"
        return nccl_tests.parse(Section(text, 1), "t").benchmarks[0].failure

    assert failure("ubuntu: Test NCCL failure common.cu:958 'internal error - please report this issue to the "
                   "NCCL developers / '") == ("NCCL error at common.cu:958: 'internal error - please report this issue "
                                              "to the NCCL developers'")
    assert failure("gx10-9c8c: Test NCCL failure common.cu:401 'remote process exited or there was a network error / "
                   "NET/IB: Got completion from peer'") == (
        "NCCL error at common.cu:401: 'remote process exited or there was a network error: NET/IB: Got completion "
        "from peer'")
    assert failure("c2211f46f318: Test NCCL failure common.cu:1005 'unhandled CUDA error'") == (
        "NCCL error at common.cu:1005: 'unhandled CUDA error'")
    assert failure("node03: Test CUDA failure common.cu:732 'out of memory'") == (
        "CUDA error at common.cu:732: 'out of memory'")
    assert failure("[1,0]<stdout>:nid006352: Test NCCL failure common.cu:958 'invalid usage (run with "
                   "NCCL_DEBUG=WARN for details)") == (
        "NCCL error at common.cu:958: 'invalid usage (run with NCCL_DEBUG=WARN for details)'")


def test_rows_under_nccl_info_lines_without_a_header_are_read() -> None:
    # Azure/aks-rdma-infiniband#30: the paste starts inside the NCCL_DEBUG=INFO lines, the table header is
    # not in it, `-c 0` prints N/A for #wrong. It was read as an NCCL log and the rows were dropped.
    name = "nccl-tests-rows-under-nccl-info-no-header-na-wrong-aks30.txt"
    machine = build_machine([Evidence(name=name, path=FIXTURES / "bench" / name)])
    [record] = machine.inputs
    assert record.format == "nccl-tests" and record.warnings == []
    [bench] = machine.benchmarks
    assert [row.size_bytes for row in bench.rows] == [8, 32, 128, 512, 2048]
    last = bench.rows[-1]
    assert (last.out_of_place.busbw, last.in_place.busbw, last.in_place.wrong) == (0.09, 0.10, None)
    assert bench.wrong_total == 0
    # the NCCL lines still reach the NCCL view
    assert machine.nccl and sorted(machine.nccl[0].hosts) == ["nccl-tests-worker-0", "nccl-tests-worker-1"]


def test_one_bus_number_for_every_gpu_is_no_bus_id() -> None:
    # NVIDIA/nccl#583: eight A100s, each `[0x00]` (old nccl-tests print the bus number only; a VM puts all
    # GPUs on bus 0). They were all given bus id 0000:00:00.0, the host bridge's.
    name = "nccl-tests-8xa100-no-group-all-bus-0x00-nccl583.txt"
    result = nccl_tests.parse(fixture_section("bench", name), name)
    (bench,) = result.benchmarks
    assert bench.nranks == 8 and bench.op == "all_reduce" and bench.columns[7] == "error"
    assert [d.bus_id for d in bench.devices] == [None] * 8
    assert [d.name for d in bench.devices] == ["NVIDIA A100-SXM4-40GB"] * 8
    assert result.warnings == [
        "the test header gives 8 GPUs on one host the same PCI bus (0x00): old nccl-tests print only the bus "
        "number, and in a VM every GPU may sit on bus 0; their bus ids are left unknown"]
    # distinct buses stay: the 2x 5090 header of nccl-tests#287
    (other,) = nccl_tests.parse(fixture_section("bench", BEFORE_ROWS), BEFORE_ROWS).benchmarks
    assert [d.bus_id for d in other.devices] == ["0000:21:00.0", "0000:61:00.0"]
