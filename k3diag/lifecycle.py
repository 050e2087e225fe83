"""How a k3diag process ends when it is told to: SIGTERM, and the processes it forked.

`kill PID`, `docker stop`, Kubernetes and a supervisor's `Popen.terminate()` signal the main process
alone, not its group. Python's default for SIGTERM ends the process on the spot: no `finally` runs, so a
temporary file stays beside the report it was to replace, and a worker forked to read half of a log
blocks for ever writing its result to a pipe nobody reads. Here SIGTERM raises `Terminated` in the main
thread instead (every clean-up runs; `__main__` exits 143, 128 + SIGTERM), each forked worker asks the
kernel to stop it when its parent dies (`die_with_parent`, Linux), and a pool interrupted while its
workers run stops them now (`stop_workers`) rather than waiting for their part to finish.

A leaf module: it imports nothing from k3diag, so any layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any, Iterator

EXIT_TERMINATED = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Terminated(BaseException):
    """SIGTERM arrived; raised like KeyboardInterrupt so every `finally` (killing children, removing
    temporary files) runs before the process ends."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM raises `Terminated` in the main thread instead of ending the process
    on the spot (which would leave child process groups running and temporary files behind)."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_held() -> Iterator[None]:
    """While forking: SIGTERM waits (blocked) and arrives once the fork is done. Raised inside the fork's own
    hooks (logging's and multiprocessing's after-fork code), `Terminated` would be printed as "Exception
    ignored" and lost, and the command would go on; the child unblocks it in `die_with_parent`."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a SIGTERM held meanwhile is delivered here


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """In a forked worker: the kernel sends `sig` when the parent dies, whatever killed it (SIGKILL too);
    SIGTERM is the default action again (the parent's `Terminated` handler was inherited by the fork, and
    a worker has nothing of its own to clean up). Linux only; elsewhere the parent's clean-up stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL if sig == signal.SIGKILL else _raise_terminated)
    if hasattr(signal, "pthread_sigmask"):  # forked under `sigterm_held`: this process takes SIGTERM again
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request was made
        os._exit(1)


def stop_workers(pool: Any) -> None:
    """An executor whose caller was interrupted: cancel what has not started and stop the workers now,
    instead of `shutdown(wait=True)` waiting seconds for a worker to finish a part nobody will read."""
    # `_processes` is the executor's own table of its workers (CPython 3.8+); it has no public handle
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    with contextlib.suppress(Exception):
        pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=1)
