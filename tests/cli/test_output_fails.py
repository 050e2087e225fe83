"""Standard output that cannot be written (a full disk, a closed or read-only descriptor) is one sentence on
standard error and exit 74 (EX_IOERR), never a traceback; a reader that left (`| head`) is not that."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "nvidia" / "topo-m-2x5090-tabs-gpu-numa-id.txt"
EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}


def _run(args: list[str], stdout) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3diag", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=300, cwd=REPO, env=ENV)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", [["analyze", str(TOPO)], ["analyze", str(TOPO), "--json"],
                                  ["audit", str(EXAMPLE), "--model", "k3"]])
def test_a_full_disk_is_one_sentence_and_exit_74(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = _run(args, full)
    assert done.returncode == 74
    assert done.stderr.strip().splitlines() == [
        f"k3diag {args[0]}: could not write to standard output (No space left on device); what it shows is incomplete"]


def test_a_read_only_standard_output_is_one_sentence_and_exit_74() -> None:
    with open(os.devnull) as read_only:
        done = _run(["analyze", str(TOPO), "--json"], read_only)
    assert done.returncode == 74
    assert "Traceback" not in done.stderr
    assert "could not write to standard output (Bad file descriptor)" in done.stderr


def test_a_closed_standard_output_is_one_sentence_and_exit_74() -> None:
    done = subprocess.run(["bash", "-c", 'exec "$0" -m k3diag analyze "$1" >&-', sys.executable, str(TOPO)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=ENV)
    assert done.returncode == 74
    assert done.stderr.strip() == ("k3diag analyze: could not write to standard output (it is closed); "
                                   "what it shows is incomplete")


def test_a_reader_that_left_is_not_a_write_error() -> None:
    done = subprocess.run(["bash", "-c", '"$0" -m k3diag analyze "$1" --fail-on never | head -c 1 >/dev/null; '
                           'exit "${PIPESTATUS[0]}"', sys.executable, str(EXAMPLE)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=ENV)
    assert done.returncode == 0
    assert "could not write" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["analyze", "--help"]])
def test_help_on_a_full_disk_is_not_lost_silently(args: list[str]) -> None:
    # click probes standard output with `write("")` inside `except Exception`: the first failure was
    # swallowed there and the help went nowhere, with exit 0
    with open("/dev/full", "w") as full:
        done = _run(args, full)
    assert done.returncode == 74
    assert "could not write to standard output (No space left on device)" in done.stderr
    assert "Traceback" not in done.stderr


def _with_stderr_gone(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`k3diag ... 2>&1 | head -1` after head left: standard error is a pipe nobody reads."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "k3diag", *args], stdout=subprocess.PIPE, stderr=write_end,
                              text=True, timeout=300, cwd=tmp_path, env=ENV)
    finally:
        os.close(write_end)


def test_a_reader_that_left_standard_error_changes_no_exit_code(tmp_path: Path) -> None:
    # a message on standard error cannot be shown: the exit code still says what happened (was 1)
    assert _with_stderr_gone(["analyze", str(tmp_path / "missing.txt")], tmp_path).returncode == 64
    assert _with_stderr_gone(["no-such-command"], tmp_path).returncode == 64
    done = _with_stderr_gone(["analyze", str(TOPO)], tmp_path)
    assert done.returncode == 0 and "Verdict [OK]" in done.stdout


def test_collect_still_writes_its_bundle_when_nobody_reads_its_progress(tmp_path: Path) -> None:
    # `k3diag collect -o b.tar.gz 2>&1 | head -1` wrote no bundle and exited 1 at the first progress line
    done = _with_stderr_gone(["collect", "-o", str(tmp_path / "b.tar.gz")], tmp_path)
    assert done.returncode == 0
    assert (tmp_path / "b.tar.gz").stat().st_size > 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_full_standard_error_changes_no_exit_code(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "k3diag", "analyze", str(tmp_path / "missing.txt")],
                              stdout=subprocess.PIPE, stderr=full, text=True, timeout=300, env=ENV)
    assert done.returncode == 64
