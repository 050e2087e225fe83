"""Turning pasted text back into what the tool printed: ANSI codes, CRLF, prompts, junk.

People paste outputs from terminals, chat apps and issue trackers: colour codes survive,
tabs become spaces, lines get a `$ ` prompt in front, Windows line endings creep in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3diag.textcodec import decode_text, detect_encoding  # noqa: F401  (re-exported)

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# A shell prompt followed by a command: `$ cmd`, `# cmd`, `user@host:~$ cmd`, `(venv) user@h:~/x# cmd`,
# `[root@host ~]# cmd`, `PS C:\> cmd`, `> cmd`.
_PROMPT_RE = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?(?:"
    r"[\w.-]+@[\w.-]+(?::[^$#\s]*)?\s*[$#%]"  # user@host:path$
    r"|\[[^\]]*@[^\]]*\]\s*[$#]"  # [root@host ~]#
    r"|PS\s+[^>\n]*>"  # PowerShell: PS C:\Users\me>
    r"|[$#%>]"  # bare prompt
    r")\s+(?P<command>\S.*)$"
)
# A prompt that cannot be mistaken for output (`user@host:~$`, `[root@host ~]#`, `PS C:\>`), with any
# command or none: the paste moved on from the output above it. Lone `$`/`#`/`>` are left out
# because tool outputs print such lines (nccl-tests starts its comment lines with `#`).
_SHELL_PROMPT_RE = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?(?:"
    r"[\w.-]+@[\w.-]+(?::[^$#\s]*)?\s*[$#%]"
    r"|\[[^\]]*@[^\]]*\]\s*[$#]"
    r"|PS\s+[^>\n]*>"
    r")(?:\s+.*)?$"
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
    """Drop ANSI codes, carriage returns and byte order marks; keep everything else as printed."""
    if "\ufeff" in text:
        # Files saved on Windows start with one; `cat a.txt b.txt > all.txt` puts more in the middle.
        text = text.replace("\ufeff", "")
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


def is_shell_prompt(line: str) -> bool:
    """A line that is an unmistakable shell prompt, with or without a command after it."""
    return bool(_SHELL_PROMPT_RE.match(line))


# Magic numbers of the compressors people use on logs, and the command that undoes each.
_COMPRESSED = (
    (b"\x1f\x8b", "gzip-compressed", "gunzip -k"),
    (b"\xfd7zXZ\x00", "xz-compressed", "unxz -k"),
    (b"BZh", "bzip2-compressed", "bunzip2 -k"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "unzstd"),
    (b"PK\x03\x04", "a zip archive", "unzip"),
)


def compressed_kind(head: bytes) -> tuple[str, str] | None:
    """(what it is, the command that unpacks it) for a compressed file, from its magic number."""
    for magic, kind, command in _COMPRESSED:
        if head.startswith(magic):
            return kind, command
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
