"""The command runner, against real fake executables on PATH (no mocking of the runner)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from k3diag.collect.runner import run_command


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_output_and_exit_code_are_recorded(tmp_path: Path) -> None:
    tool = _script(tmp_path, "nvidia-smi", 'echo "GPU0 X"; echo oops >&2; exit 0\n')
    evidence = run_command([str(tool), "topo", "-m"], name="topo.txt", timeout_s=5)
    assert evidence.data == b"GPU0 X\n"
    assert evidence.exit_code == 0
    assert evidence.stderr.strip() == "oops"
    assert evidence.error is None
    assert evidence.command.endswith("nvidia-smi topo -m")


def test_hanging_nvidia_smi_is_stopped_with_a_sentence(tmp_path: Path) -> None:
    # A GPU fallen off the bus makes nvidia-smi hang; the child also spawns a grandchild
    # that must die with it (the runner kills the process group).
    tool = _script(tmp_path, "nvidia-smi", "sleep 30 &\nsleep 30\n")
    started = time.monotonic()
    evidence = run_command([str(tool), "-q"], name="q.txt", timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert evidence.timed_out is True
    assert "did not finish within 0.5 s" in evidence.error
    assert "fallen off the bus" in evidence.error


def test_missing_tool_is_one_sentence(tmp_path: Path) -> None:
    evidence = run_command([str(tmp_path / "no-such-tool")], name="x.txt")
    assert evidence.data is None
    assert "is not installed or not on PATH" in evidence.error


def test_non_zero_exit_keeps_output_and_says_why(tmp_path: Path) -> None:
    tool = _script(
        tmp_path,
        "nvidia-smi",
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9\n",
    )
    evidence = run_command([str(tool)], name="smi.txt", timeout_s=5)
    assert evidence.exit_code == 9
    assert "exited with code 9" in evidence.error
    assert "couldn't communicate with the NVIDIA driver" in evidence.error


def test_permission_denied(tmp_path: Path) -> None:
    tool = tmp_path / "lspci"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o644)
    evidence = run_command([str(tool)], name="lspci.txt")
    if os.geteuid() == 0:
        # root may still be refused exec on a non-executable file
        assert evidence.error is not None
    assert evidence.error is not None and ("permission denied" in evidence.error or "could not start" in evidence.error)


def test_ctrl_c_while_the_command_starts_leaves_nothing_running(tmp_path: Path, monkeypatch) -> None:
    # Ctrl-C lands after the exec but before Popen returns (the window Popen raises in): the command runs,
    # and the runner has no Popen to stop it by. A Popen that starts the real child and then raises stands
    # for that moment (the boundary, not the runner, is faked).
    import subprocess

    import pytest

    import k3diag.collect.runner as runner

    tool = _script(tmp_path, "nvidia-smi", "trap '' TERM\nsleep 300\n")
    started: list[int] = []

    class InterruptedPopen(subprocess.Popen):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            started.append(self.pid)
            raise KeyboardInterrupt

    monkeypatch.setattr(runner.subprocess, "Popen", InterruptedPopen)
    with pytest.raises(KeyboardInterrupt):
        run_command([str(tool), "-q"], name="q.txt", timeout_s=60)
    assert started
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(started[0], os.WNOHANG)  # reap it: a killed child is a zombie until then
        except ChildProcessError:
            break
        if pid:
            break
        time.sleep(0.05)
    else:
        os.killpg(started[0], 9)  # its own session and group: the shell and its sleep
        raise AssertionError("the command started while Ctrl-C landed is still running")
