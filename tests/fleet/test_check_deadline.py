"""`k3diag check` answers within its deadline even when every tool hangs (fake nvidia-smi, lspci, amd-smi
and rocm-smi on PATH: the GPU driver boundary, which cannot run here), and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.processes import kill_all, none_alive, signal_and_wait

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "fixtures" / "hostroot" / "dual_socket"
HUNG_TOOLS = ("nvidia-smi", "lspci", "amd-smi", "rocm-smi")
DEADLINE_S = 8


def _hung_tools(folder: Path) -> Path:
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for tool in HUNG_TOOLS:
        script = bin_dir / tool
        # Records its pid, then hangs the way nvidia-smi does on a GPU that fell off the bus.
        script.write_text(f"#!/bin/sh\necho $$ >> {folder}/pids\nexec sleep 120\n")
        script.chmod(0o755)
    return bin_dir




def _tool_pids(folder: Path) -> list[int]:
    return [int(p) for p in (folder / "pids").read_text().split()] if (folder / "pids").exists() else []


def _check_with_hung_tools(folder: Path, *args: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess, list[int]]:
    """`k3diag check --root ROOT --node gpu042 ARGS` with every GPU tool on PATH hanging; its pids."""
    bin_dir = _hung_tools(folder)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin", PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "k3diag", "check", "--root", str(ROOT), "--node", "gpu042", *args],
                            env=env, capture_output=True, text=True, timeout=timeout)
    return result, _tool_pids(folder)


def test_hung_tools_make_an_unknown_answer_within_the_deadline(tmp_path: Path) -> None:
    started = time.monotonic()
    result, pids = _check_with_hung_tools(tmp_path, "--deadline", "3", "--timeout", "60", "--format", "npd",
                                          timeout=60)
    elapsed = time.monotonic() - started
    try:
        assert elapsed < 3 + 4, f"took {elapsed:.1f} s for a 3 s deadline"
        assert result.returncode == 2, result.stdout + result.stderr  # npd: Unknown
        line = result.stdout.splitlines()[0]
        assert line.startswith("UNKNOWN stopped at the 3 s deadline while running `"), line
        assert len(line) < 80
        assert pids, "no fake tool was started"
        assert none_alive(pids) == [], "a hung tool outlived the check"
    finally:
        kill_all(pids)


def test_the_text_says_which_step_was_running_and_what_to_do(tmp_path: Path) -> None:
    # 8 s: the collection gets what is left after the 3 s kept for analysis, so the hung command is the
    # step its deadline cuts; a 2 s deadline left 1 s for analysis, which a loaded 2-core CI machine overran.
    result, pids = _check_with_hung_tools(tmp_path, "--deadline", str(DEADLINE_S))
    try:
        assert result.returncode == 3
        first = result.stdout.splitlines()[0]
        assert first.startswith("k3diag check gpu042: UNKNOWN: ")
        # Either the collection's own deadline stopped the hung command, or the hard kill came first.
        assert (f"reached its {DEADLINE_S} s deadline: `" in first and "` was stopped" in first) or (
            f"did not finish within its {DEADLINE_S} s deadline and was stopped while running `" in first), first
        assert "check `dmesg | grep -i xid`" in first
        assert "checked in" in result.stdout
    finally:
        kill_all(pids)



def test_a_check_cut_during_analysis_says_so_and_does_not_blame_a_hung_tool(monkeypatch) -> None:
    from k3diag.fleet import check_run

    def slow_analysis(request, step, started):  # collection done; judging overruns the deadline
        step("analysis")
        time.sleep(30)

    monkeypatch.setattr(check_run, "perform_check", slow_analysis)  # the forked child runs it
    report, code, timing = check_run.run_check(check_run.CheckRequest(deadline_s=1.5, node="gpu042"))
    assert code == 3 and timing["timed_out"] is True and timing["last_step"] == "analysis"
    text = json.dumps(report)
    assert "stopped while analysing the evidence, after collection had finished; give a longer --deadline" in text
    assert "collecting analysis" not in text and "dmesg" not in text


def test_the_json_check_block_says_the_deadline_was_reached(tmp_path: Path) -> None:
    # A script that reads `check.timed_out` to find overruns must see this one, whichever layer stopped it:
    # the collection's deadline (the check still answered, `killed` false) or the kill of the whole check.
    result, pids = _check_with_hung_tools(tmp_path, "--deadline", str(DEADLINE_S), "--format", "json")
    try:
        assert result.returncode == 3, result.stderr
        report = json.loads(result.stdout)
        block = report["check"]
        assert block["timed_out"] is True, block
        assert block["node"] == "gpu042" and block["deadline_s"] == DEADLINE_S
        assert "deadline" in report["verdict"]["text"]
        if block["killed"]:
            assert block["last_step"], block
        else:
            assert block["last_step"] == "analysis", block  # it answered after the collection was cut
    finally:
        kill_all(pids)


def test_sigterm_to_the_check_stops_its_child_and_the_hung_tools_at_once(tmp_path: Path) -> None:
    # A supervisor's terminate() reaches the main process alone; the forked check and the tools it started
    # went on until their own timeout (20 s) before.
    bin_dir = _hung_tools(tmp_path)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin", PYTHONPATH=str(REPO))
    process = subprocess.Popen(
        [sys.executable, "-m", "k3diag", "check", "--root", str(ROOT), "--deadline", "60", "--timeout", "50",
         "--node", "gpu042"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids_file = tmp_path / "pids"
    pids: list[int] = []
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and not pids_file.exists():
            time.sleep(0.05)
        assert pids_file.exists(), "no fake tool was started"
        stderr, took = signal_and_wait(process, signal.SIGTERM)
        pids = _tool_pids(tmp_path)
        assert process.returncode == 143, stderr
        assert "Traceback" not in stderr, stderr
        assert took < 5, f"took {took:.1f} s"
        assert none_alive(pids) == [], "a hung tool outlived the check"
    finally:
        process.kill()
        kill_all(pids or _tool_pids(tmp_path))
