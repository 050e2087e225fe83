"""What an input is: cut a file into the outputs it holds and name each one's format.

The format is never taken from a file name. A file holding several outputs pasted one
after another (with or without the prompt lines) is cut into sections and each part is
detected on its own. This is the parse layer's front door: `k3diag.join.build` hands it
text and gets back sections and format specs; it knows nothing of machines.
"""

from __future__ import annotations

import re
from functools import lru_cache

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
# Every prompt `prompt_command`/`is_shell_prompt` accept holds one of these: `user@host`, `[root@host ~]#`
# and `PS C:\>` forms their own literal, a bare prompt its character and the space after it. `#` and
# `>` alone would make every nccl-tests comment and XML line a candidate.
_PROMPT_LITERALS = ("@", "PS", "$", "%", "# ", "#\t", "> ", ">\t")
_NON_SPACE_RE = re.compile(r"\S")


def split_sections(text: str, command: str | None = None) -> list[Section]:
    """Cut a file into the outputs it holds, at prompt lines and at lines that begin a known output.

    One pass over the text, in C: each format's start literals (`FormatSpec.start`) and the prompt
    characters are searched for with `str.find`, and only the lines holding one are tried against
    the prompt patterns and that format's `START_RE`; a format whose literal the text lacks is not
    even imported. Lines are never split out of the text: sections are slices between line starts.
    """
    starts: dict[int, str | None] = {0: command}  # line start offset -> the prompt's command
    hosts: dict[int, str] = {}
    # Prompt lines running no tool we read (`user@host:~$ cd ~`, the bare `PS C:\>` a PowerShell paste
    # ends with): they end the output above; blanked so no parser takes them for a row.
    blank: set[int] = set()
    command_prompts: set[int] = set()
    for start in _lines_holding(text, _PROMPT_LITERALS):
        line = _line(text, start)
        prompt = prompt_command(line)
        if prompt is not None:
            starts[start] = prompt
            command_prompts.add(start)
        elif is_shell_prompt(line):
            starts[start] = None
            blank.add(start)
        else:
            continue
        host = prompt_host(line)
        if host:
            hosts[start] = host
    candidates: set[int] = set()
    for spec in FORMATS:
        if not spec.start or not any(literal in text for literal in spec.start):
            continue
        module = parser_module(spec)
        pattern = getattr(module, "START_RE", None) if module is not None else None
        if pattern is None:
            continue
        for start in _lines_holding(text, spec.start):
            if start not in starts and start not in candidates and pattern.match(_line(text, start)):
                candidates.add(start)
    for start in candidates:
        # A blank line between a prompt and the output it printed keeps them together.
        if _previous_nonblank_line(text, start) not in command_prompts:
            starts.setdefault(start, None)
    return _sections(text, starts, hosts, blank)


def _sections(text: str, starts: dict[int, str | None], hosts: dict[int, str], blank: set[int]) -> list[Section]:
    ordered = sorted(starts)
    # [first line offset, end offset, command, host, blanked line offsets]: slices of the text, so
    # gluing a piece to its neighbour never copies text
    pieces: list[list] = []
    host: str | None = None
    for position, start in enumerate(ordered):
        end = ordered[position + 1] if position + 1 < len(ordered) else len(text)
        if start in hosts:
            host = hosts[start]
        elif start in blank:
            host = None
        content_from = _line_end(text, start) if start in blank else start
        if _NON_SPACE_RE.search(text, content_from, end) is None:
            continue
        piece_command = starts[start]
        blanked = [start] if start in blank else []
        # A start pattern can fire twice inside one output (a wrapped header, a repeated legend):
        # a piece too short to be anything is glued to the one before it.
        if pieces and piece_command is None and detect(_slice(text, start, end, blanked)) is None:
            pieces[-1][1] = end
            pieces[-1][4].extend(blanked)
            continue
        if pieces and piece_command is None and pieces[-1][2] and \
                detect(_slice(text, pieces[-1][0], pieces[-1][1], pieces[-1][4])) is None:
            # `$ NCCL_P2P_DISABLE=1 ./all_reduce_perf`, a stray line, then the output: the command is its
            piece_command = pieces[-1][2]
        pieces.append([start, end, piece_command, host, blanked])
    sections: list[Section] = []
    line_number, counted_to = 1, 0
    for start, end, piece_command, piece_host, blanked in pieces:
        line_number += text.count("\n", counted_to, start)
        counted_to = start
        sections.append(Section(text=_slice(text, start, end, blanked), first_line=line_number,
                                command=piece_command, host=piece_host))
    return sections


def _slice(text: str, start: int, end: int, blanked: list[int]) -> str:
    """The text from `start` to `end` without its final newline; blanked lines keep their newline
    (so the line numbers of what follows hold) but lose their content."""
    if end > start and end <= len(text) and text[end - 1 : end] == "\n":
        end -= 1
    if not blanked:
        return text[start:end]
    parts: list[str] = []
    position = start
    for line_start in blanked:
        parts.append(text[position:line_start])
        position = min(_line_end(text, line_start), end)
    parts.append(text[position:end])
    return "".join(parts)


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end == -1 else end


def _line(text: str, start: int) -> str:
    """The line beginning at `start`, or "" when it is too long to begin an output (content, not a header)."""
    end = _line_end(text, start)
    return text[start:end] if end - start <= MAX_START_LINE_CHARS else ""


def _previous_nonblank_line(text: str, start: int) -> int | None:
    end = start - 1  # the newline that ends the line before
    while end >= 0:
        line_start = text.rfind("\n", 0, end) + 1
        if _NON_SPACE_RE.search(text, line_start, end) is not None:
            return line_start
        end = line_start - 1
    return None


def _lines_holding(text: str, literals: tuple[str, ...]) -> list[int]:
    """Start offsets of the lines that contain any of `literals`, found with `str.find`."""
    found: set[int] = set()
    for literal in literals:
        position = text.find(literal)
        while position != -1:
            line_start = text.rfind("\n", 0, position) + 1
            found.add(line_start)
            line_end = text.find("\n", position)
            position = text.find(literal, line_end) if line_end != -1 else -1
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
