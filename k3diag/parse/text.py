"""Turning pasted text back into what the tool printed: ANSI codes, CRLF, prompts, junk.

People paste outputs from terminals, chat apps and issue trackers: colour codes survive,
tabs become spaces, lines get a `$ ` prompt in front, Windows line endings creep in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# A shell prompt followed by a command: `$ cmd`, `# cmd`, `user@host:~$ cmd`, `(venv) user@h:~/x# cmd`,
# `[root@host ~]# cmd`, `PS C:\> cmd`, `> cmd`.
_PROMPT_RE = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?(?:"
    r"[\w.-]+@[\w.-]+(?::[^$#\s]*)?\s*[$#%]"  # user@host:path$
    r"|\[[^\]]*@[^\]]*\]\s*[$#]"  # [root@host ~]#
    r"|[$#%>]"  # bare prompt
    r")\s+(?P<command>\S.*)$"
)
_KNOWN_COMMANDS = (
    "nvidia-smi",
    "lspci",
    "rocm-smi",
    "amd-smi",
    "rocm-bandwidth-test",
    "nvbandwidth",
    "p2pbandwidthlatencytest",
    "all_reduce_perf",
    "all_gather_perf",
    "reduce_scatter_perf",
    "alltoall_perf",
    "broadcast_perf",
    "reduce_perf",
    "sendrecv_perf",
    "mpirun",
    "torchrun",
    "sudo",
    "cat",
    "./",
    "srun",
    "python",
)

MAX_LINE_CHARS = 1 << 16


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def normalize(text: str) -> str:
    """Drop ANSI codes and carriage returns; keep everything else as printed."""
    if "\x1b" in text:
        text = strip_ansi(text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def split_lines(text: str) -> list[str]:
    return normalize(text).split("\n")


def prompt_command(line: str) -> str | None:
    """The command on a shell prompt line, when the line is one and runs a tool we know."""
    match = _PROMPT_RE.match(line)
    if not match:
        return None
    command = match.group("command").strip()
    lowered = command.lower()
    if any(lowered.startswith(known) or f" {known}" in lowered for known in _KNOWN_COMMANDS):
        return command
    return None


def looks_binary(sample: bytes) -> bool:
    """NUL bytes or mostly undecodable bytes: not a text output we can read."""
    if not sample:
        return False
    if b"\x00" in sample[:8192]:
        return True
    text = sample[:8192].decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    control = sum(1 for ch in text if ord(ch) < 32 and ch not in "\n\r\t\x1b\x0c")
    return (bad + control) > max(16, len(text) // 10)


@dataclass(frozen=True)
class Section:
    """A piece of a file holding one tool's output; `first_line` is 1-based in the whole file."""

    text: str
    first_line: int
    command: str | None = None
