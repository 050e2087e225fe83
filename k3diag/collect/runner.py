"""Running a command for evidence: a timeout, a shared deadline, capped output, nothing left running.

A GPU that has fallen off the bus makes `nvidia-smi` hang in the kernel; a collector that
waits forever is worse than no collector. So every command:

- runs in its own session and process group (`start_new_session`), so a terminal's Ctrl-C
  does not reach it by accident and a kill reaches all of it;
- stops at its own timeout or at the collection's `Deadline`, whichever comes first, and is
  then killed with its whole group (SIGKILL: a tool that ignores SIGTERM is still stopped);
- has its output read as it comes and kept up to `max_output_bytes`: past that the command
  is stopped and the cut is said in the evidence (and so in the bundle's manifest);
- carries a marker in its environment, so that a child that left the group (`setsid`) and
  kept the pipe open is found through /proc and killed too: a tool that exits while such a
  child holds its stdout keeps the output it printed, and nothing of it is left behind;
- is killed the same way when the collector is interrupted (Ctrl-C, or SIGTERM turned into
  `Terminated` by `k3diag.lifecycle.terminate_on_sigterm`), before the exception goes on.

API for other collectors (`collect`, `check`): make one `Deadline(seconds)` for the whole run and
pass it as `deadline=` to every `run_command`; `deadline.remaining()` tells what is left, and a
command asked for after the deadline is not started (its evidence says so). Never raises.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass

from k3diag.evidence import Evidence

DEFAULT_TIMEOUT_S = 20.0
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
MAX_STDERR_BYTES = 64 * 1024
# After the command exits, how long a child still holding its pipes may go on printing.
EXIT_GRACE_S = 0.5
_MARKER_VARIABLE = "K3DIAG_RUN"
_READ_BYTES = 256 * 1024

# What a timeout of each tool usually means, for the one sentence the user reads.
_TIMEOUT_MEANING = {
    "nvidia-smi": "a GPU that has fallen off the bus or a hung driver makes nvidia-smi hang; "
    "check `dmesg | grep -i xid` for Xid 79 and the GPU's PCIe link",
    "rocm-smi": "a hung amdgpu driver or a GPU that stopped responding makes rocm-smi hang; check `dmesg | grep -i amdgpu`",
    "amd-smi": "a hung amdgpu driver or a GPU that stopped responding makes amd-smi hang; check `dmesg | grep -i amdgpu`",
    "lspci": "lspci hangs when reading the config space of a device that stopped responding; check `dmesg` for AER errors",
}


@dataclass
class Deadline:
    """One end time shared by every command of a collection. `seconds=None` means no deadline."""

    seconds: float | None
    started: float = 0.0

    def __post_init__(self) -> None:
        if not self.started:
            self.started = time.monotonic()

    def remaining(self) -> float | None:
        if self.seconds is None:
            return None
        return self.seconds - (time.monotonic() - self.started)

    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def clamp(self, timeout_s: float) -> float:
        """The timeout a command gets: its own, or what is left of the deadline when that is less."""
        left = self.remaining()
        return timeout_s if left is None else max(0.0, min(timeout_s, left))


def run_command(
    argv: list[str],
    name: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    format_hint: str | None = None,
    env: dict[str, str] | None = None,
    *,
    deadline: Deadline | None = None,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
) -> Evidence:
    command = shlex.join(argv)
    if deadline is not None and deadline.expired():
        return Evidence(name=name, kind="command", command=command, format_hint=format_hint,
                        meta={"skipped": "deadline"},
                        error=f"`{command}` was not run: the collection's deadline of {deadline.seconds:g} s had "
                              "passed; run it by hand or give a longer --deadline")
    limit_s = deadline.clamp(timeout_s) if deadline is not None else timeout_s
    marker = uuid.uuid4().hex
    child_env = dict(os.environ if env is None else env)
    child_env[_MARKER_VARIABLE] = marker
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: a kill reaches all of it, a terminal's ^C none of it
            env=child_env,
        )
    except FileNotFoundError:
        return Evidence(name=name, kind="command", command=command, format_hint=format_hint,
                        error=f"`{argv[0]}` is not installed or not on PATH, so `{command}` could not run")
    except PermissionError:
        return Evidence(name=name, kind="command", command=command, format_hint=format_hint,
                        error=f"permission denied running `{command}`; run k3diag as a user allowed to run it")
    except OSError as exc:
        return Evidence(name=name, kind="command", command=command, format_hint=format_hint,
                        error=f"`{command}` could not start: {exc.strerror or exc}")
    except BaseException:
        # Ctrl-C or SIGTERM while the command was starting: it may be running already (Popen raises after
        # the exec, before it returns), with no Popen to stop it by; its marker finds it
        _kill_marked(marker)
        raise
    try:
        outcome = _collect_output(process, started + limit_s, max_output_bytes)
    finally:
        # Whatever happened (done, timed out, cut, Ctrl-C, SIGTERM): nothing of it keeps running.
        _stop_everything(process, marker)
    stdout, stderr, timed_out, cut = outcome
    duration = round(time.monotonic() - started, 3)
    stderr_text = stderr.decode("utf-8", errors="replace")
    meta: dict = {}
    if timed_out:
        by_deadline = deadline is not None and limit_s < timeout_s
        if by_deadline:
            assert deadline is not None
            meta["stopped_at_deadline"] = True  # the run's deadline, not the command's own limit: not a hang
            error = (f"`{command}` was stopped after {limit_s:.1f} s, when the collection's deadline of "
                     f"{deadline.seconds:g} s was reached; run it by hand or give a longer --deadline")
        else:
            meaning = _TIMEOUT_MEANING.get(os.path.basename(argv[0]), "the tool did not answer in time")
            error = f"`{command}` did not finish within {timeout_s:g} s and was stopped: {meaning}"
        return Evidence(name=name, kind="command", command=command, data=stdout or None,
                        stderr=stderr_text[-4000:], duration_s=duration, timed_out=True, format_hint=format_hint,
                        error=error, meta=meta)
    if cut:
        meta["output_cut_at_bytes"] = max_output_bytes
        error = (f"`{command}` printed more than {_size(max_output_bytes)}; the first {_size(max_output_bytes)} "
                 "were kept and the command was stopped")
        return Evidence(name=name, kind="command", command=command, data=stdout, stderr=stderr_text[-4000:],
                        duration_s=duration, format_hint=format_hint, error=error, meta=meta)
    returncode = process.returncode
    error = None
    if returncode != 0:
        first = next((line.strip() for line in stderr_text.splitlines() if line.strip()), "")
        if not first:
            first = next((line.strip() for line in stdout[:65536].decode("utf-8", "replace").splitlines()
                          if line.strip()), "")
        error = f"`{command}` exited with code {returncode}" + (f": {first[:200]}" if first else "")
    return Evidence(name=name, kind="command", command=command, data=stdout, exit_code=returncode,
                    duration_s=duration, stderr=stderr_text[-4000:], format_hint=format_hint, error=error, meta=meta)


def _collect_output(process: subprocess.Popen, stop_at: float, max_output_bytes: int) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout (kept up to the cap) and stderr (its tail) until both close, the time is up, the
    cap is passed, or the command has exited and its pipes stayed open past a short grace."""
    assert process.stdout is not None and process.stderr is not None
    out = bytearray()
    err = bytearray()
    selector = selectors.DefaultSelector()
    for stream in (process.stdout, process.stderr):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream.fileno(), selectors.EVENT_READ, stream is process.stdout)
    open_streams = 2
    grace_until: float | None = None
    timed_out = cut = False
    try:
        while open_streams:
            now = time.monotonic()
            if grace_until is None and process.poll() is not None:
                grace_until = now + EXIT_GRACE_S
            until = stop_at if grace_until is None else min(stop_at, grace_until)
            if now >= until:
                # Out of time while it runs: a timeout. Exited, with a leftover child holding the
                # pipe past the grace: it finished, and what it printed is kept.
                timed_out = process.poll() is None
                break
            for key, _ in selector.select(timeout=min(until - now, 0.2)):
                try:
                    chunk = os.read(key.fd, _READ_BYTES)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    selector.unregister(key.fd)
                    open_streams -= 1
                    continue
                if key.data:  # stdout
                    room = max_output_bytes - len(out)
                    if len(chunk) > room:
                        out += chunk[:room]
                        cut = True
                    else:
                        out += chunk
                else:
                    err += chunk
                    if len(err) > 2 * MAX_STDERR_BYTES:
                        del err[:-MAX_STDERR_BYTES]
            if cut:
                break
        if not cut and not timed_out and open_streams == 0:
            # Both pipes closed: wait for the exit status, still bounded by the time left.
            try:
                process.wait(timeout=max(0.0, stop_at - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        selector.close()
    return bytes(out), bytes(err[-MAX_STDERR_BYTES:]), timed_out, cut


def _stop_everything(process: subprocess.Popen, marker: str) -> None:
    """Kill the command's process group, every process that carries its marker (children that left
    the group with setsid), reap the command, and close the pipes."""
    _kill_group(process.pid)
    _kill_marked(marker)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:  # in an uninterruptible kernel wait (a hung driver): cannot be helped
        pass
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _kill_marked(marker: str) -> None:
    """SIGKILL every process whose environment holds this run's marker (Linux /proc; elsewhere the
    process group kill is all there is)."""
    proc = "/proc"
    if not os.path.isdir(proc):
        return
    needle = f"{_MARKER_VARIABLE}={marker}".encode()
    me = os.getpid()
    for _ in range(3):  # a marked process may fork while we look: look again until none is left
        found = False
        try:
            entries = os.listdir(proc)
        except OSError:
            return
        for entry in entries:
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"{proc}/{entry}/environ", "rb") as handle:
                    environ = handle.read()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                found = True
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.05)


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):g} MiB"
    if count >= 1024:
        return f"{count / 1024:g} KiB"
    return f"{count} bytes"
