"""Helpers for tests that start real processes: whether one is still running, and the clean-up."""

from __future__ import annotations

import os
import signal


def alive(pid: int) -> bool:
    """Running: a zombie has ended (nobody reaped it yet), and a pid that is gone is not alive."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


def kill_all(pids: list[int]) -> None:
    """SIGKILL whatever a failed test left running."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def signal_and_wait(process, signum: int, timeout: float = 20) -> tuple[str, float]:
    """Send `signum` to a started `subprocess.Popen` (text mode, stderr piped); its stderr and how many
    seconds it took to end."""
    import time

    signalled = time.monotonic()
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=timeout)
    return stderr, time.monotonic() - signalled


def none_alive(pids: list[int], settle: float = 0.5) -> list[int]:
    """The pids still running after `settle` seconds (an empty list is what a test wants)."""
    import time

    time.sleep(settle)
    return [pid for pid in pids if alive(pid)]
