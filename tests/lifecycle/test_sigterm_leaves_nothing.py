"""`kill PID` (docker stop, Kubernetes, a supervisor's terminate()) signals the main process alone: every
process k3diag forked or started must end with it, at once, with no traceback and exit 143 (and on
SIGKILL, which no handler sees, the kernel stops the forked workers: PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import alive, kill_all, none_alive, signal_and_wait

REPO = Path(__file__).resolve().parents[2]
NCCL_LOG = REPO / "fixtures" / "nccl" / "nccl-2.19-64ranks-init-complete.log"

# The real `k3diag analyze` entry, with the pool used for any size and each cut part's worker busy for a
# minute (a gigabyte part), its pid written where the test can see it: the process tree of a big log.
_BUSY_WORKERS = """
import os, sys, time
from k3diag.parse.nccl import pool
pool.POOL_MIN_BYTES = 0
pool.available_cores = lambda: 2
real = pool._parse_part
def busy(path, name, start, end, cut_part):
    if cut_part:
        with open(os.environ["PIDS"], "a") as out:
            out.write(f"{os.getpid()}\\n")
        time.sleep(60)
    return real(path, name, start, end, cut_part)
pool._parse_part = busy
sys.argv = ["k3diag", "analyze", os.environ["LOG"], "--json"]
from k3diag.__main__ import main
main()
"""




def _wait_for(path: Path, seconds: float) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return [int(pid) for pid in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"no worker started within {seconds} s")


def _start(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    if not NCCL_LOG.exists():
        pytest.skip(f"{NCCL_LOG} is not in this checkout")
    pids = tmp_path / "pids"
    env = dict(os.environ, PYTHONPATH=str(REPO), LOG=str(NCCL_LOG), PIDS=str(pids))
    process = subprocess.Popen([sys.executable, "-c", _BUSY_WORKERS], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    return process, _wait_for(pids, 30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_main_process_stops_the_pool_workers_now(tmp_path: Path, signum: int, code: int) -> None:
    process, workers = _start(tmp_path)
    try:
        stderr, took = signal_and_wait(process, signum)
        assert process.returncode == code, stderr
        assert "Traceback" not in stderr, stderr
        # the worker had 60 s of work left: stopped, not waited for
        assert took < 5, f"took {took:.1f} s to stop"
        assert none_alive(workers) == [], "a pool worker outlived k3diag"
    finally:
        process.kill()
        kill_all(workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_killed_main_process_takes_its_workers_with_it(tmp_path: Path) -> None:
    process, workers = _start(tmp_path)
    try:
        process.kill()  # SIGKILL: no handler, no clean-up in k3diag itself
        process.communicate(timeout=20)
        end = time.monotonic() + 5
        while time.monotonic() < end and any(alive(pid) for pid in workers):
            time.sleep(0.05)
        assert [pid for pid in workers if alive(pid)] == [], "a pool worker outlived a killed k3diag"
    finally:
        kill_all(workers)


# The parent's after-fork moment widened to half a second (a hook registered as logging's own is), so a
# SIGTERM lands inside it every time: raised there, it was printed as "Exception ignored" and lost.
_SLOW_FORK = """
import os, time
def slow_after_fork_in_parent():
    open(os.environ["FORKED"], "w").write("x")
    time.sleep(0.5)
os.register_at_fork(after_in_parent=slow_after_fork_in_parent)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_sigterm_during_the_fork_is_not_lost(tmp_path: Path) -> None:
    forked, pids = tmp_path / "forked", tmp_path / "pids"
    env = dict(os.environ, PYTHONPATH=str(REPO), LOG=str(NCCL_LOG), PIDS=str(pids), FORKED=str(forked))
    process = subprocess.Popen([sys.executable, "-c", _SLOW_FORK + _BUSY_WORKERS], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while not forked.exists() and time.monotonic() < end:
            time.sleep(0.01)
        assert forked.exists(), "the pool never forked"
        stderr, took = signal_and_wait(process, signal.SIGTERM)
        assert process.returncode == 143, stderr
        assert "Exception ignored" not in stderr and "Traceback" not in stderr, stderr
        assert took < 10, f"took {took:.1f} s"
    finally:
        process.kill()
        kill_all([int(p) for p in pids.read_text().split()] if pids.exists() else [])
