"""Running a command for evidence: always with a timeout, never raising.

A GPU that has fallen off the bus makes `nvidia-smi` hang in the kernel; a collector that
waits forever is worse than no collector, so every command is killed (with its process
group) when its time is up and the evidence says so.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time

from k3diag.evidence import Evidence

DEFAULT_TIMEOUT_S = 20.0
MAX_OUTPUT_BYTES = 64 * 1024 * 1024

# What a timeout of each tool usually means, for the one sentence the user reads.
_TIMEOUT_MEANING = {
    "nvidia-smi": "a GPU that has fallen off the bus or a hung driver makes nvidia-smi hang; "
    "check `dmesg | grep -i xid` for Xid 79 and the GPU's PCIe link",
    "rocm-smi": "a hung amdgpu driver or a GPU that stopped responding makes rocm-smi hang; check `dmesg | grep -i amdgpu`",
    "amd-smi": "a hung amdgpu driver or a GPU that stopped responding makes amd-smi hang; check `dmesg | grep -i amdgpu`",
    "lspci": "lspci hangs when reading the config space of a device that stopped responding; check `dmesg` for AER errors",
}


def run_command(
    argv: list[str],
    name: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    format_hint: str | None = None,
    env: dict[str, str] | None = None,
) -> Evidence:
    command = shlex.join(argv)
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # so a timeout can kill the whole group
            env=env,
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
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        try:
            stdout, stderr = process.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            stdout, stderr = b"", b""
        meaning = _TIMEOUT_MEANING.get(os.path.basename(argv[0]), "the tool did not answer in time")
        return Evidence(
            name=name,
            kind="command",
            command=command,
            data=stdout[:MAX_OUTPUT_BYTES] or None,
            stderr=stderr.decode("utf-8", errors="replace")[-4000:],
            duration_s=round(time.monotonic() - started, 3),
            timed_out=True,
            format_hint=format_hint,
            error=f"`{command}` did not finish within {timeout_s:g} s and was stopped: {meaning}",
        )
    duration = round(time.monotonic() - started, 3)
    error = None
    stderr_text = stderr.decode("utf-8", errors="replace")
    if process.returncode != 0:
        first = next((line.strip() for line in stderr_text.splitlines() if line.strip()), "")
        if not first:
            first = next((line.strip() for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()), "")
        error = f"`{command}` exited with code {process.returncode}" + (f": {first[:200]}" if first else "")
    return Evidence(
        name=name,
        kind="command",
        command=command,
        data=stdout[:MAX_OUTPUT_BYTES],
        exit_code=process.returncode,
        duration_s=duration,
        stderr=stderr_text[-4000:],
        format_hint=format_hint,
        error=error,
    )


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            process.kill()
        except OSError:
            pass
