"""What an input is: cut a file into the outputs it holds and name each one's format.

The format is never taken from a file name. A file holding several outputs pasted one
after another (with or without the prompt lines) is cut into sections and each part is
detected on its own. This is the parse layer's front door: `k3diag.join.build` hands it
text and gets back sections and format specs; it knows nothing of machines.
"""

from __future__ import annotations

import re
from functools import lru_cache

from k3diag.parse.registry import FormatSpec, available_formats, parser_module
from k3diag.parse.text import Section, is_shell_prompt, prompt_command

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


def split_sections(text: str, command: str | None = None) -> list[Section]:
    """Cut a file into the outputs it holds, at prompt lines and at lines that begin a known output."""
    lines = text.split("\n")
    starts: dict[int, str | None] = {0: command}
    start_patterns = []
    for spec in available_formats(text):
        pattern = getattr(parser_module(spec), "START_RE", None)
        if pattern is not None:
            start_patterns.append(pattern)
    previous_was_prompt = False
    # Prompt lines running no tool we read (`user@host:~$ cd ~`, the bare `PS C:\>` a PowerShell paste
    # ends with): they end the output above; blanked so no parser takes them for a row.
    blank: set[int] = set()
    for index, line in enumerate(lines):
        prompt = prompt_command(line)
        if prompt is not None:
            starts[index] = prompt
            previous_was_prompt = True
            continue
        if is_shell_prompt(line):
            starts[index] = None
            blank.add(index)
            previous_was_prompt = False
            continue
        if not previous_was_prompt and index not in starts:
            for pattern in start_patterns:
                if pattern.match(line):
                    starts.setdefault(index, None)
                    break
        # A blank line between a prompt and the output it printed keeps them together.
        if line.strip():
            previous_was_prompt = False
    ordered = sorted(starts)
    sections: list[Section] = []
    for position, start in enumerate(ordered):
        end = ordered[position + 1] if position + 1 < len(ordered) else len(lines)
        chunk = lines[start:end]
        if start in blank:
            chunk[0] = ""  # keeps the line numbers of what follows
        if not "".join(chunk).strip():
            continue
        sections.append(Section(text="\n".join(chunk), first_line=start + 1, command=starts[start]))
    return _merge_same_format_neighbours(sections)


def _merge_same_format_neighbours(sections: list[Section]) -> list[Section]:
    """A start pattern can fire twice inside one output (a wrapped header, a repeated legend);
    a section too short to be anything is glued to the one before it."""
    merged: list[Section] = []
    for section in sections:
        if merged and section.command is None and detect(section.text) is None:
            prev = merged[-1]
            merged[-1] = Section(text=prev.text + "\n" + section.text, first_line=prev.first_line, command=prev.command)
        else:
            merged.append(section)
    return merged


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
