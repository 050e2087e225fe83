"""`analyze` ends its process without the interpreter's teardown (`k3diag.__main__._leave_now`): the report
still comes out whole, with the verdict's exit code, and a program that runs k3diag inside itself, or has
work of its own at exit, keeps it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO, env=ENV)


def test_the_report_comes_out_whole_with_the_verdicts_exit_code() -> None:
    done = _run([sys.executable, "-m", "k3diag", "analyze", str(EXAMPLE), "--json"])
    report = json.loads(done.stdout)  # all of it: the last write was flushed before the process ended
    assert done.returncode == report["exit_code"] == 2
    assert report["verdict"]["status"] == "fail"


def test_a_program_running_k3diag_inside_itself_gets_the_exit_and_runs_its_own_exit_work() -> None:
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: print('own exit work', flush=True))\n"
             f"sys.argv = ['k3diag', 'analyze', {str(EXAMPLE)!r}]\n"
             "try:\n    runpy.run_module('k3diag', run_name='__main__', alter_sys=True)\n"
             "except SystemExit as exit:\n    print('k3diag exited', exit.code, flush=True)\n")
    done = _run([sys.executable, "-c", probe])
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["k3diag exited 2", "own exit work"]
    assert done.returncode == 0  # the embedding program's own ending, not k3diag's code


def test_a_program_that_ran_k3diag_as_its_main_module_and_went_on_ends_with_its_own_code() -> None:
    probe = ("import runpy, sys\n"
             f"sys.argv = ['k3diag', 'analyze', {str(EXAMPLE)!r}, '--json']\n"
             "try:\n    runpy.run_module('k3diag', run_name='__main__', alter_sys=True)\n"
             "except SystemExit as exit:\n    print('k3diag exited', exit.code, file=sys.stderr)\n")
    done = _run([sys.executable, "-c", probe])
    assert json.loads(done.stdout)["exit_code"] == 2
    assert done.stderr.splitlines()[-1] == "k3diag exited 2"
    assert done.returncode == 0


def test_a_usage_error_and_an_unreadable_path_keep_their_message_and_code() -> None:
    done = _run([sys.executable, "-m", "k3diag", "analyze", str(REPO / "no-such-file.txt")])
    assert done.returncode == 64
    assert "no-such-file.txt" in done.stderr
