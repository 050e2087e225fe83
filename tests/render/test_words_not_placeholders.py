"""Prose says what is missing in words: an nccl-tests run that finished no size printed no bandwidth (it read
"max busbw -, avg busbw -, out-of-bounds -"), and an RCCL log without a version line is RCCL, not NCCL."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
runner = CliRunner()


def _lines(*args: str) -> list[str]:
    return runner.invoke(app, ["analyze", *args]).stdout.splitlines()


def test_an_nccl_tests_run_that_finished_no_size_says_so() -> None:
    lines = _lines(str(FIXTURES / "bench" / "nccl-tests-5090-test-nccl-failure-before-rows-287.txt"), "--details")
    assert "nccl-tests all_reduce on 2 GPUs: no bus bandwidth printed (no message size finished), out-of-bounds " \
           "not printed" in lines
    assert not any(" -," in line or line.endswith(" -") for line in lines if line.startswith("nccl-tests "))


def test_an_nccl_tests_run_with_figures_keeps_them() -> None:
    lines = _lines(str(FIXTURES / "bench" / "nccl-tests-2nodes-200g-tail.txt"), "--details")
    assert "nccl-tests collective on rank count not printed: max busbw 96.69 GB/s, avg busbw 84.8558 GB/s, " \
           "out-of-bounds 0" in lines


def test_an_rccl_log_without_a_version_line_is_named_rccl() -> None:
    lines = _lines(str(FIXTURES / "nccl" / "rccl-mi250x-socket-comm-suffix.log"))
    assert "NCCL: RCCL (version not in the log); 1 communicator, up to 8 ranks; connection lines: 4 NET, 5 P2P" in lines
