"""What an input is: cut a file into the outputs it holds and name each one's format.

The format is never taken from a file name. A file holding several outputs pasted one
after another (with or without the prompt lines) is cut into sections and each part is
detected on its own. This is the parse layer's front door: `k3diag.join.build` hands it
text and gets back sections and format specs; it knows nothing of machines.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache
from itertools import accumulate

from k3diag.parse.registry import FORMATS, FormatSpec, available_formats, parser_module
from k3diag.parse.text import Section, is_shell_prompt, prompt_command, prompt_host

SNIFF_THRESHOLD = 0.5
SNIFF_CHARS = 64 * 1024
# How much of a file is looked at to decide whether it is a (possibly huge) streaming log.
STREAM_SNIFF_BYTES = 256 * 1024


def detect(text: str, command: str | None = None) -> FormatSpec | None:
    """The format whose parser is most confident about this text, if any is confident enough."""
    # The head of an output tells what it is; sniffing megabytes would only cost time.
    return _detect_head(text[:SNIFF_CHARS], command)


# Each section is detected twice (when neighbours are merged, then to parse it), and a log of a
# command run in a loop holds the same output thousands of times: remember recent answers.
@lru_cache(maxsize=256)
def _detect_head(text: str, command: str | None) -> FormatSpec | None:
    best: tuple[float, FormatSpec] | None = None
    for spec in available_formats(text):
        module = parser_module(spec)
        try:
            score = float(module.sniff(text))
        except Exception:  # a sniffer must never take the report down
            continue
        hint = command_format(command)
        if hint == spec.name:
            score += 0.3
        if best is None or score > best[0]:
            best = (score, spec)
    if best is None or best[0] < SNIFF_THRESHOLD:
        return None
    return best[1]


# Longest line that can begin an output or be a prompt: longer lines (a 50 MB single-line file) are
# content, and no pattern is tried on them.
MAX_START_LINE_CHARS = 4096
# Every prompt `prompt_command`/`is_shell_prompt` accept holds one of these characters.
_PROMPT_LITERALS = ("$", "#", "%", ">")


def split_sections(text: str, command: str | None = None) -> list[Section]:
    """Cut a file into the outputs it holds, at prompt lines and at lines that begin a known output.

    One pass over the text, in C: each format's start literal (`FormatSpec.start`) is searched for
    with `str.find`, and only the lines holding one are tried against that format's `START_RE`;
    a format whose literal the text lacks is not even imported. Prompts likewise.
    """
    lines = text.split("\n")
    offsets = _line_offsets(lines)
    starts: dict[int, str | None] = {0: command}
    hosts: dict[int, str] = {}
    # Prompt lines running no tool we read (`user@host:~$ cd ~`, the bare `PS C:\>` a PowerShell paste
    # ends with): they end the output above; blanked so no parser takes them for a row.
    blank: set[int] = set()
    command_prompts: set[int] = set()
    for index in _lines_holding(text, offsets, _PROMPT_LITERALS):
        line = lines[index]
        if len(line) > MAX_START_LINE_CHARS:
            continue
        prompt = prompt_command(line)
        if prompt is not None:
            starts[index] = prompt
            command_prompts.add(index)
        elif is_shell_prompt(line):
            starts[index] = None
            blank.add(index)
        else:
            continue
        host = prompt_host(line)
        if host:
            hosts[index] = host
    candidates: set[int] = set()
    for spec in FORMATS:
        if not spec.start or not any(literal in text for literal in spec.start):
            continue
        module = parser_module(spec)
        pattern = getattr(module, "START_RE", None) if module is not None else None
        if pattern is None:
            continue
        for index in _lines_holding(text, offsets, spec.start):
            if index in starts or index in candidates or len(lines[index]) > MAX_START_LINE_CHARS:
                continue
            if pattern.match(lines[index]):
                candidates.add(index)
    for index in candidates:
        # A blank line between a prompt and the output it printed keeps them together.
        before = index - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        if before not in command_prompts:
            starts.setdefault(index, None)
    ordered = sorted(starts)
    pieces: list[list] = []  # [start, end, command, host]; line ranges, so gluing never copies text
    host: str | None = None
    for position, start in enumerate(ordered):
        end = ordered[position + 1] if position + 1 < len(ordered) else len(lines)
        if start in hosts:
            host = hosts[start]
        elif start in blank:
            host = None
        first = start + 1 if start in blank else start
        if not any(lines[k].strip() for k in range(first, end)):
            continue
        piece_command = starts[start]
        # A start pattern can fire twice inside one output (a wrapped header, a repeated legend):
        # a piece too short to be anything is glued to the one before it.
        if pieces and piece_command is None and detect(_text(lines, start, end, blank)) is None:
            pieces[-1][1] = end
            continue
        pieces.append([start, end, piece_command, host])
    return [
        Section(text=_text(lines, start, end, blank), first_line=start + 1, command=piece_command, host=piece_host)
        for start, end, piece_command, piece_host in pieces
    ]


def _text(lines: list[str], start: int, end: int, blank: set[int]) -> str:
    chunk = lines[start:end]
    for index in blank:
        if start <= index < end:
            chunk[index - start] = ""  # keeps the line numbers of what follows
    return "\n".join(chunk)


def _line_offsets(lines: list[str]) -> list[int]:
    """The offset in the text where each line begins."""
    offsets = [0]
    offsets.extend(accumulate(len(line) + 1 for line in lines))
    return offsets


def _lines_holding(text: str, offsets: list[int], literals: tuple[str, ...]) -> list[int]:
    """Indexes of the lines that contain any of `literals`, found with `str.find` (no per-line loop)."""
    found: set[int] = set()
    for literal in literals:
        position = text.find(literal)
        while position != -1:
            index = bisect_right(offsets, position) - 1
            found.add(index)
            position = text.find(literal, offsets[index + 1]) if index + 1 < len(offsets) else -1
    return sorted(found)


def streaming_format(head_text: str) -> FormatSpec | None:
    for spec in available_formats(head_text):
        if not spec.streaming:
            continue
        module = parser_module(spec)
        try:
            if float(module.sniff(head_text)) >= SNIFF_THRESHOLD:
                # A file that is mostly another format with a few NCCL lines (nccl-tests prints
                # NCCL INFO lines) is not a log: let the section detector decide.
                other = detect(head_text)
                if other is None or other.name == spec.name:
                    return spec
        except Exception:
            continue
    return None


# `nvidia-smi.exe` is how the command is typed in PowerShell.
_COMMAND_FORMATS = (
    (re.compile(r"nvidia-smi(?:\.exe)?\s+topo\s+(-m|--matrix)\b"), "nvidia-smi-topo-matrix"),
    (re.compile(r"nvidia-smi(?:\.exe)?\s+topo\s+(-p2p|--p2p)"), "nvidia-smi-topo-p2p"),
    (re.compile(r"nvidia-smi(?:\.exe)?\s+.*--query-gpu"), "nvidia-smi-query-gpu-csv"),
    (re.compile(r"nvidia-smi(?:\.exe)?\s+(-q|--query)\b"), "nvidia-smi-query"),
    (re.compile(r"lspci\s+.*-t"), "lspci-tv"),
    (re.compile(r"lspci\b"), "lspci-vv"),
    (re.compile(r"rocm-smi\b.*--showtopo"), "rocm-smi-showtopo"),
    (re.compile(r"amd-smi\s+topology"), "amd-smi-topology"),
    (re.compile(r"rocm-bandwidth-test"), "rocm-bandwidth-test"),
    (re.compile(r"nvbandwidth"), "nvbandwidth"),
    (re.compile(r"p2pBandwidthLatencyTest", re.I), "p2p-bandwidth-latency-test"),
    (re.compile(r"_perf\b"), "nccl-tests"),
)


def command_format(command: str | None) -> str | None:
    if not command:
        return None
    for pattern, name in _COMMAND_FORMATS:
        if pattern.search(command):
            return name
    return None


def describe_unknown(text: str, name: str) -> str:
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    if len(first) > 80:
        first = first[:77] + "..."
    return (
        f"{name}: format not recognized (first line: {first!r}); k3diag reads nvidia-smi topo -m/-p2p/-q, "
        "--query-gpu CSV, lspci -vv, NCCL/RCCL logs, nccl-tests, p2pBandwidthLatencyTest, nvbandwidth, "
        "rocm-smi/amd-smi topology and rocm-bandwidth-test outputs"
    )
