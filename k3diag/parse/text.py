"""Turning pasted text back into what the tool printed: ANSI codes, CRLF, prompts, junk.

People paste outputs from terminals, chat apps and issue trackers: colour codes survive,
tabs become spaces, lines get a `$ ` prompt in front, Windows line endings creep in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from k3diag.compression import compressed
from k3diag.evidence import C0_BYTES, has_c0_controls  # noqa: F401  (C0_BYTES re-exported)
from k3diag.parse.lazy_re import lazy
from k3diag.textcodec import decode_text, detect_encoding  # noqa: F401  (re-exported)

# Every ECMA-48 / ANSI sequence kind a terminal log can hold, 7- and 8-bit forms:
# CSI (`ESC [ 1;31m`, `\x9b`), the string commands OSC, DCS, SOS, PM and APC up to BEL or ST
# (`ESC ] 0;title BEL`, which prompts write into `script` logs; an unterminated one is cut at the
# end of its line, never eating the next), nF escapes (`ESC ( B`), and the single-character
# Fp/Fe/Fs escapes (`ESC 7`, `ESC =`, `ESC c`). A lone ESC at the end is dropped too.
_ANSI_RE = lazy(
    "(?:\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]"
    "|(?:\x1b[\\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\\\|\x9c)?"
    "|\x1b[ -/]*[0-~]"
    "|\x1b"
)
# Control characters that are never part of a tool's text output: NUL padding (a log written just
# before a crash, a serial console), backspaces, bells, C1 controls. TAB, LF, CR and ESC (its
# sequences are stripped above) are handled on their own.
CONTROL_RE = lazy("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\x80-\x9f]")
# A shell prompt followed by a command: `$ cmd`, `# cmd`, `user@host:~$ cmd`, `(venv) user@h:~/x# cmd`,
# `[root@host ~]# cmd`, `PS C:\> cmd`, `> cmd`.
_PROMPT_RE = lazy(
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
_SHELL_PROMPT_RE = lazy(
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
    # RDMA ports and the NVLink fabric service: each starts an output of its own.
    "ibstat",
    "ibv_devinfo",
    "systemctl",
    "journalctl",
)

MAX_LINE_CHARS = 1 << 16


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def normalize(text: str) -> str:
    """Drop ANSI/ECMA-48 sequences, carriage returns, byte order marks and control characters;
    keep everything else as printed. `clean_text` also says how many control characters went."""
    return clean_text(text)[0]


def clean_text(text: str, controls_dropped: bool = False) -> tuple[str, int]:
    """`normalize`'s text, and how many control characters (NULs included) it dropped.

    `controls_dropped`: the C0 controls and DEL are gone already (`Evidence.read_text` drops them
    while reading), so only the C1 ones, outside ASCII, can be left to look for. Each check is a
    C-speed `in` where it can be: a 25 MB `lspci -vv` is checked in milliseconds, not a regex pass.
    """
    ascii_only = text.isascii()  # a flag of the string: no C1 control, BOM or 8-bit CSI in it
    if not ascii_only and "\ufeff" in text:
        # Files saved on Windows start with one; `cat a.txt b.txt > all.txt` puts more in the middle.
        text = text.replace("\ufeff", "")
    if "\x1b" in text or (not ascii_only and ("\x9b" in text or "\x9d" in text or "\x90" in text)):
        text = strip_ansi(text)
        ascii_only = text.isascii()
    dropped = 0
    if not (controls_dropped and ascii_only) and _has_controls(text):
        text, dropped = CONTROL_RE.subn("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, dropped


def _has_controls(text: str) -> bool:
    # Large ASCII text: a `memchr` search for each control character (`has_c0_controls`; CONTROL_RE's
    # characters outside ASCII cannot be in it, and a test holds its ASCII part equal to `C0_BYTES`), not a
    # regex pass.
    if text.isascii() and len(text) > 4096:
        return has_c0_controls(text)
    return CONTROL_RE.search(text) is not None


# `> ` marks of an e-mail or Markdown quote, nested or not; only a space after each is part of the mark:
# a tab there is a column separator of the quoted output (a `topo -m` header line starts with one). The
# one spelling of a quote mark: `unquote_reply` strips it from a whole quoted output, `dmesg` from a line.
QUOTE_MARKS = r"\s*(?:> ?)+"
_QUOTE_RE = lazy("^" + QUOTE_MARKS)


def unquote_reply(lines: list[str]) -> tuple[list[str], bool]:
    """Lines of an output quoted in an e-mail reply (`> GPU0 X OK ...`) without the `> ` marks.

    Only when most non-blank lines carry the mark, so a lone `> nvidia-smi topo -m` prompt stays a prompt.
    The line count is kept, so line numbers still point into the file."""
    filled = [line for line in lines if line.strip()]
    quoted = [line for line in filled if _QUOTE_RE.match(line)]
    if len(quoted) < 3 or len(quoted) * 5 < len(filled) * 3:
        return lines, False
    return [_QUOTE_RE.sub("", line, count=1) if _QUOTE_RE.match(line) else line for line in lines], True


_SAMPLE_LINES = 400


def unwrap_paste(text: str) -> tuple[str, str, str | None]:
    """A whole paste without what the medium added, the line count kept (line numbers still point into
    the file), and what was taken off in words ('' when nothing was): the `> ` marks of an e-mail reply
    when most lines carry them (`unquote_reply`'s rule), a log collector's prefix (`_LOG_PREFIX`), and an
    indentation every non-blank line shares (a forum post, a ticket or a mail that indented the output by
    four spaces). Each is judged on the first lines, then on all of them, so a big output pays one look at
    its head. The third value is the host a `pdsh`/`clush` label names (`gpu042: ` before every line)."""
    if not _may_be_wrapped(text):
        return text, "", None
    taken = []
    host = None
    if unquote_reply(_head(text))[1]:
        lines, quoted = unquote_reply(text.split("\n"))
        if quoted:
            text = "\n".join(lines)
            taken.append("the `> ` marks of an e-mail reply")
    if _prefixed_share(list(map(_LOG_PREFIX_RE.match, _head(text))))[0]:
        lines = text.split("\n")
        matches = list(map(_LOG_PREFIX_RE.match, lines))  # one match per line, for the share and the cut
        marked, label = _prefixed_share(matches)
        if marked:
            name = label.strip()[:-1]
            if label and not name.isdigit() and _HOST_LABEL_RE.match(name):
                host = name
            ends = [m.end() if label or not m.group("label") else m.start("label") for m in matches]
            text = "\n".join(line[end:] for line, end in zip(lines, ends))
            taken.append(marked)
    if _shared_indent(_head(text)):
        lines = text.split("\n")
        width = len(_shared_indent(lines))
        if width:
            text = "\n".join(line[width:] for line in lines)
            taken.append("the indentation every line shared")
    return text, " and ".join(taken), host


def _head(text: str) -> list[str]:
    return text[:65536].split("\n", _SAMPLE_LINES)[:_SAMPLE_LINES]


# What a log collector puts before each line it relays: an RFC 3339 time (`kubectl logs --timestamps`,
# Fluent Bit, Loki) and its one separator, and/or a source label (`pdsh`/`clush` `host1: `, `srun --label`
# `3: `, `mpirun --tag-output` `[1,0]<stdout>:`). The label must be the same on the lines it marks: a paste
# interleaving two hosts is two machines' output, never unwrapped into one.
_LOG_PREFIX = (r"^(?P<stamp>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?[ \t])?"
               r"(?P<label>(?:[A-Za-z0-9][\w.-]*|\[\d+,\d+\]<std(?:out|err)>):[ \t])?")
_LOG_PREFIX_RE = lazy(_LOG_PREFIX)
# a label that can be a host name: letters first, with a digit or a dash (`gpu042`, `node-a`), not a word
# (`Note: `, `Error: ` before every line of a pasted message are not hosts), nor `[1,0]<stdout>`
_HOST_LABEL_RE = lazy(r"[A-Za-z][A-Za-z0-9-]*[0-9-][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*$")


def _prefixed_share(matches: list) -> tuple[str, str]:
    """In words, the per-line prefix most non-blank lines carry ('' when not so; see `_LOG_PREFIX`), and
    the label that goes with it ('' when only the time stamps go: the lines do not share one label).
    `matches`: `_LOG_PREFIX_RE.match` of each line."""
    filled = stamped = 0
    labels: dict[str, int] = {}
    for match in matches:
        if not match.string.strip():
            continue  # a blank line
        filled += 1
        if match.group("stamp"):
            stamped += 1
        label = match.group("label")
        if label:
            labels[label] = labels.get(label, 0) + 1
    if filled < 3:
        return "", ""
    label, count = next(iter(labels.items())) if len(labels) == 1 else ("", 0)
    shared = label if count * 5 >= filled * 4 else ""
    if stamped * 5 >= filled * 4:
        return "the time stamp" + (f" and the `{shared.strip()}` label" if shared else "") + " before each line", shared
    if shared:
        return f"the `{shared.strip()}` label before each line", shared
    return "", ""


def _may_be_wrapped(text: str) -> bool:
    """Whether the first few non-blank lines could carry a wrapper's mark (`>`, a leading blank, a time
    stamp or a label): most sections start plainly, and pay only this look (a loop of 10,000 outputs)."""
    looked = marked = 0
    for line in text[:4096].split("\n", 12)[:12]:
        if not line.strip():
            continue
        looked += 1
        first = line[0]
        if first in "> \t" or ((first.isalnum() or first == "[") and _LOG_PREFIX_RE.match(line).end()):
            marked += 1
        if looked == 5:
            break
    return marked >= min(3, looked) and marked > 0


def _shared_indent(lines: list[str]) -> str:
    """The run of spaces (or tabs) that begins every non-blank line, when there are at least three; ''."""
    leads = [line[: len(line) - len(line.lstrip(" \t"))] for line in lines if line.strip()]
    return os.path.commonprefix(leads) if len(leads) >= 3 else ""


def split_lines(text: str) -> list[str]:
    return normalize(text).split("\n")


def prompt_command(line: str) -> str | None:
    """The command on a shell prompt line, when the line is one and runs a tool we know."""
    match = _PROMPT_RE.match(line)
    if not match:
        return None
    command = match.group("command").strip()
    lowered = command.lower()
    # `./build/all_reduce_perf`, `NCCL_P2P_DISABLE=1 /opt/nccl-tests/build/all_reduce_perf`: by path too
    if any(lowered.startswith(known) or f" {known}" in lowered or f"/{known}" in lowered for known in _KNOWN_COMMANDS):
        return command
    return None


_PROMPT_HOST_RE = lazy(r"^\s*(?:\([^)]*\)\s*)?(?:[\w.-]+@(?P<host>[\w.-]+)|\[[^\]@\s]*@(?P<bracketed>[\w.-]+))")


def prompt_host(line: str) -> str | None:
    """The host a prompt names: `user@node1:~$`, `[root@node1 ~]#`; None for `$ ` or `PS C:\\>`."""
    match = _PROMPT_HOST_RE.match(line)
    if not match:
        return None
    return match.group("host") or match.group("bracketed")


def is_shell_prompt(line: str) -> bool:
    """A line that is an unmistakable shell prompt, with or without a command after it."""
    return bool(_SHELL_PROMPT_RE.match(line))


def compressed_kind(head: bytes) -> tuple[str, str] | None:
    """(what it is, the command that unpacks it) for a compressed file, from its magic number
    (`k3diag.compression`, the bundle reader's table too)."""
    found = compressed(head)
    return (found[1], found[2]) if found is not None else None


# Share of a sample that must be non-text for the whole input to count as binary data. Text with
# NUL padding or a few stray control bytes stays far below it; compressed data, executables and
# core dumps sit far above (half their bytes are not valid UTF-8).
BINARY_SHARE = 0.30
_NUL_RUN_RE = lazy(b"\x00+")


def looks_binary(sample: bytes) -> bool:
    """Mostly non-text bytes (undecodable, or control characters other than TAB/LF/CR/ESC).

    One NUL is not proof: a run of NUL padding counts as one non-text character, so a log with
    a crash's zero-filled block still reads as text, while a sample with nothing but NULs and
    controls is binary.
    """
    if not sample:
        return False
    sample = sample[:262144]
    runs = len(_NUL_RUN_RE.findall(sample)) if b"\x00" in sample else 0
    squeezed = _NUL_RUN_RE.sub(b"", sample) if runs else sample
    text = squeezed.decode("utf-8", errors="replace")
    # A multi-byte character cut by the sample's end is not evidence of binary data.
    if text.endswith("\ufffd"):
        text = text[:-1]
    if not text.strip():
        return runs > 0
    bad = text.count("\ufffd")
    control = len(CONTROL_RE.findall(text))
    return (bad + control + runs) > max(16, int((len(text) + runs) * BINARY_SHARE))


@dataclass(frozen=True)
class Section:
    """A piece of a file holding one tool's output; `first_line` is 1-based in the whole file."""

    text: str
    first_line: int
    command: str | None = None
    host: str | None = None  # the host a prompt line above the output names (`user@node1:~$`)
    # The text is `normalize`d already (cut from a normalized file): `section_text` hands it on as
    # it is instead of scanning megabytes again for what cannot be there.
    normalized: bool = field(default=False, compare=False)
    # Why the text is known to be only part of an output (a few lines quoted in a document's code block, a
    # file read only in part); empty when nothing says so. A parser that judges what did not happen (an NCCL
    # init never seen to complete) says "not seen in this excerpt" rather than a fault.
    excerpt: str = field(default="", compare=False)


def section_text(section: Section) -> str:
    """`normalize(section.text)`, without the work when the section says it is normalized."""
    return section.text if section.normalized else normalize(section.text)
