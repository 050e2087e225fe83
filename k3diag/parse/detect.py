"""What an input is: cut a file into the outputs it holds and name each one's format.

The format is never taken from a file name. A file holding several outputs pasted one
after another (with or without the prompt lines) is cut into sections and each part is
detected on its own. This is the parse layer's front door: `k3diag.join.build` hands it
text and gets back sections and format specs; it knows nothing of machines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import compress, count
from typing import Iterator

from k3diag.evidence import has_c0_controls
from k3diag.parse.hints import fold
from k3diag.parse.lazy_re import lazy
from k3diag.parse.registry import FORMATS, FormatSpec, parser_module
from k3diag.parse.text import Section, is_shell_prompt, prompt_command, prompt_host, unwrap_paste

SNIFF_THRESHOLD = 0.5
SNIFF_CHARS = 64 * 1024
# How much of a file is looked at to decide whether it is a (possibly huge) streaming log.
STREAM_SNIFF_BYTES = 256 * 1024


def detect(text: str, command: str | None = None) -> FormatSpec | None:
    """The format whose parser is most confident about this text, if any is confident enough."""
    # The head of an output tells what it is; sniffing megabytes would only cost time. Lines too long to
    # begin any output (a launcher's 70 KB environment dump before the log) are not its head: sniffed past,
    # they would have filled the whole window and hidden the output behind them.
    start = _past_long_lines(text)
    return _detect_head(text[start:start + SNIFF_CHARS], command)


def _past_long_lines(text: str) -> int:
    """Where the text begins once its leading lines longer than `MAX_START_LINE_CHARS` are skipped (0 for
    a text of one long line: that line is all there is to sniff)."""
    start = 0
    while len(text) - start > MAX_START_LINE_CHARS and text.find("\n", start, start + MAX_START_LINE_CHARS + 1) < 0:
        end = text.find("\n", start)
        if end < 0 or end + 1 >= len(text):
            return start
        start = end + 1
    return start


# Each section is detected twice (when neighbours are merged, then to parse it), and a log of a
# command run in a loop holds the same output thousands of times: remember recent answers.
@lru_cache(maxsize=256)
def _detect_head(text: str, command: str | None) -> FormatSpec | None:
    best: tuple[float, FormatSpec] | None = None
    hint = command_format(command)
    folded = fold(text)  # once for every hint
    # Each format's hint is tried only when its turn comes (its parser imported only when sniffed): once a
    # sniffer is certain, the hints after it are not searched either (all 38 of them cost ~4 ms over an
    # `nvidia-smi -q` head, and a file of 1,000 such outputs spent 40% of its time there)
    for position, spec in enumerate(FORMATS):
        if not spec.may_match(text, folded):
            continue
        module = parser_module(spec)
        if module is None:
            continue
        try:
            score = min(float(module.sniff(text)), 1.0)  # 1.0 is certain: no sniffer says more
        except Exception:  # a sniffer must never take the report down
            continue
        if hint == spec.name:
            score += 0.3
        if best is None or score > best[0]:
            best = (score, spec)
        if best[0] >= 1.0 and (hint is None or hint == best[1].name
                               or not any(later.name == hint and later.may_match(text, folded)
                                          for later in FORMATS[position + 1:])):
            # no later format can score more (only the command's format gets more than 1.0): neither its
            # sniffer nor its import is paid for (an `nvidia-smi -q` was sniffed as lspci too, ~3 ms)
            break
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
# Text is scanned for start lines a window of about this many characters at a time (cut at a line
# end), so the distinct lines of one window are all that is held besides the text.
_WINDOW_CHARS = 1 << 20
_FITS = MAX_START_LINE_CHARS.__ge__  # len(line) -> whether such a line is tried at all


class ControlBytesFound(Exception):
    """`split_sections(check_controls=True)` met a C0 control byte: read the text again, checked."""


def split_sections(text: str, command: str | None = None, *, normalized: bool = False,
                   final_newline_dropped: bool = False, check_controls: bool = False) -> list[Section]:
    """Cut a file into the outputs it holds, at prompt lines and at lines that begin a known output.

    One pass over the text (`_start_lines`): each window's distinct lines are searched for the
    prompt literals and each format's start literals (`FormatSpec.start`) with `str.find`, and only
    the lines holding one are tried, once per distinct line, against the prompt patterns and that
    format's `START_RE`; a format whose literal no line holds is not even imported. Lines are never
    split out of the text for the sections: they are slices between line starts. `normalized`: the
    text is `normalize`d already (the sections say so, and parsers skip normalizing them again).
    `final_newline_dropped`: the text was read without its final newline (`Evidence.read_whole_text`), so the last section is not cut again (a file that ends in a
    blank line keeps it), and a single section is the text itself, not a copy. `check_controls`:
    raise `ControlBytesFound` if a line holds a C0 control (`evidence.C0_BYTES`; the text is ASCII):
    looked for in each window's distinct lines, what the search holds anyway.
    """
    starts: dict[int, str | None] = {0: command}  # line start offset -> the prompt's command
    hosts: dict[int, str] = {}
    # Prompt lines running no tool we read (`user@host:~$ cd ~`, the bare `PS C:\>` a PowerShell paste
    # ends with): they end the output above; blanked so no parser takes them for a row.
    blank: set[int] = set()
    command_prompts: set[int] = set()
    candidates: list[int] = []
    for start, kind in _start_lines(text, check_controls):
        if kind.prompt is not None:
            starts[start] = kind.prompt
            command_prompts.add(start)
        elif kind.shell:
            starts[start] = None
            blank.add(start)
        else:
            candidates.append(start)
            continue
        if kind.host:
            hosts[start] = kind.host
    for start in candidates:
        # A blank line between a prompt and the output it printed keeps them together.
        if _previous_nonblank_line(text, start) not in command_prompts:
            starts.setdefault(start, None)
    return _sections(text, starts, hosts, blank, normalized, len(text) + 1 if final_newline_dropped else len(text))


@dataclass(frozen=True)
class _LineKind:
    """What a line holding a literal is: a prompt running a known command, another shell prompt, or
    (neither) the start line of some format's output."""

    prompt: str | None = None
    shell: bool = False
    host: str | None = None


def _start_lines(text: str, check_controls: bool = False) -> Iterator[tuple[int, _LineKind]]:
    """(offset, kind) of every prompt line and every line a format's `START_RE` matches, in order;
    `check_controls`: see `split_sections`."""
    kinds: dict[str, _LineKind | None] = {}  # distinct lines already tried
    position, size = 0, len(text)
    while position < size:
        cut = text.find("\n", position + _WINDOW_CHARS)
        cut = size if cut < 0 else cut
        window = text[position:cut]  # the whole text, not a copy, when it fits in one window
        lines = window.split("\n")
        distinct = set(lines)
        if check_controls and has_c0_controls("\n".join(distinct)):
            raise ControlBytesFound
        if max(map(len, distinct)) > MAX_START_LINE_CHARS:  # rare: measured on the distinct lines only
            distinct = set(compress(distinct, map(_FITS, map(len, distinct))))
        holding = _holding_literals(distinct)
        fresh = [line for line in holding if line not in kinds]
        kinds.update(zip(fresh, _classify(fresh)))
        found = {line: kind for line in holding if (kind := kinds[line]) is not None}
        if found:
            # offsets of the lines found: lengths summed in C between one found line and the next
            offset, previous = position, 0
            for index in compress(count(), map(found.__contains__, lines)):
                offset += sum(map(len, lines[previous:index])) + index - previous
                previous = index
                yield offset, found[lines[index]]  # type: ignore[misc]
        position = cut + 1


def _holding_literals(distinct: set[str]) -> list[str]:
    """The lines of `distinct` that hold a prompt literal or a start literal (of a format that has
    a start pattern), found by searching the distinct lines joined, not each line."""
    blob = "\n".join(distinct)
    return [blob[start:_line_end(blob, start)] for start in _lines_holding(blob, _all_literals())]


def _classify(lines: list[str]) -> list[_LineKind | None]:
    kinds: list[_LineKind | None] = []
    for line in lines:
        kind: _LineKind | None = None
        if any(literal in line for literal in _PROMPT_LITERALS):
            prompt = prompt_command(line)
            if prompt is not None:
                kind = _LineKind(prompt=prompt, host=prompt_host(line))
            elif is_shell_prompt(line):
                kind = _LineKind(shell=True, host=prompt_host(line))
        if kind is None:
            for spec in FORMATS:
                if spec.start and any(literal in line for literal in spec.start):
                    pattern = _start_pattern(spec)
                    if pattern is not None and pattern.match(line):
                        kind = _LineKind()
                        break
        kinds.append(kind)
    return kinds


@cache
def _all_literals() -> tuple[str, ...]:
    return tuple(dict.fromkeys(_PROMPT_LITERALS + tuple(literal for spec in FORMATS for literal in spec.start)))


def _start_pattern(spec: FormatSpec) -> "re.Pattern[str] | None":
    module = parser_module(spec)
    return getattr(module, "START_RE", None) if module is not None else None


def _sections(text: str, starts: dict[int, str | None], hosts: dict[int, str], blank: set[int],
              normalized: bool, file_end: int) -> list[Section]:
    """`file_end`: where the file's text ends, one past the text's end when its final newline was left
    out: a section ending there has no newline to lose."""
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
        if pieces and piece_command is None and detect(_slice_head(text, start, end, blanked, file_end)) is None:
            pieces[-1][1] = end
            pieces[-1][4].extend(blanked)
            continue
        # The next device block of an ibstat (`repeats`: its start line begins every block) continues it.
        if pieces and piece_command is None and not blanked and _continues(text, start, pieces[-1], file_end):
            pieces[-1][1] = end
            continue
        if pieces and piece_command is None and pieces[-1][2] and \
                detect(_slice_head(text, pieces[-1][0], pieces[-1][1], pieces[-1][4], file_end)) is None:
            # `$ NCCL_P2P_DISABLE=1 ./all_reduce_perf`, a stray line, then the output: the command is its
            piece_command = pieces[-1][2]
        pieces.append([start, end, piece_command, host, blanked])
    sections: list[Section] = []
    line_number, counted_to = 1, 0
    for start, end, piece_command, piece_host, blanked in pieces:
        line_number += text.count("\n", counted_to, start)
        counted_to = start
        sections.append(Section(text=_slice(text, start, end, blanked, file_end), first_line=line_number,
                                command=piece_command, host=piece_host, normalized=normalized))
    return sections


_REPEATING = tuple(spec for spec in FORMATS if spec.repeats)


def _continues(text: str, start: int, previous: list, file_end: int) -> bool:
    """Whether the line at `start` begins another block of a `repeats` format whose output the piece
    before it is."""
    line = text[start:_line_end(text, start)]
    for spec in _REPEATING:
        if any(literal in line for literal in spec.start):
            pattern = _start_pattern(spec)
            if pattern is not None and pattern.match(line):
                before = detect(_slice_head(text, previous[0], previous[1], previous[4], file_end), previous[2])
                return before is not None and before.name == spec.name
    return False


def _slice_head(text: str, start: int, end: int, blanked: list[int], file_end: int) -> str:
    """`_slice(text, start, end, blanked, file_end)[:SNIFF_CHARS]`, all `detect` reads, without copying the rest
    (a 25 MB section would be copied to sniff its first 64 KiB)."""
    # enough raw text for SNIFF_CHARS characters once blanked lines and the final newline are gone
    cut = start + SNIFF_CHARS + 1 + sum(_line_end(text, line_start) - line_start for line_start in blanked)
    if cut >= end:
        return _slice(text, start, end, blanked, file_end)[:SNIFF_CHARS]
    return _slice(text, start, cut, [line_start for line_start in blanked if line_start < cut], file_end)[:SNIFF_CHARS]


def _slice(text: str, start: int, end: int, blanked: list[int], file_end: int) -> str:
    """The text from `start` to `end` without its final newline; blanked lines keep their newline
    (so the line numbers of what follows hold) but lose their content. A piece that ends where the
    text does when its final newline was left out (`file_end` past the end) has none to lose."""
    ends_file_without_newline = end == len(text) < file_end  # its newline was left out when read
    if end > start and end <= len(text) and text[end - 1 : end] == "\n" and not ends_file_without_newline:
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


_STREAMING = tuple(spec for spec in FORMATS if spec.streaming)


def streaming_format(head_text: str) -> FormatSpec | None:
    """The streaming format (an NCCL log) a file's head says it is, if any."""
    # Only the streaming formats' hints are tried: the others' would be tried again, on the head
    # `detect` reads, for the section they might be.
    folded = fold(head_text)
    for spec in _STREAMING:
        if not spec.may_match(head_text, folded):
            continue
        module = parser_module(spec)
        if module is None:
            continue
        try:
            if float(module.sniff(head_text)) >= SNIFF_THRESHOLD:
                # A file that is mostly another format with a few NCCL lines (nccl-tests prints
                # NCCL INFO lines) is not a log: let the section detector decide.
                other = detect(head_text)
                if other is None or other.name == spec.name:
                    # the same look through a medium's wrapping (an e-mail reply's `> `, a pdsh label): an NCCL
                    # log reads through it, the nccl-tests table in it does not, and was lost
                    plain, wrapped, _ = unwrap_paste(head_text)
                    other = detect(plain) if wrapped else None
                if other is None or other.name == spec.name:
                    return spec
        except Exception:
            continue
    return None


# `nvidia-smi.exe` is how the command is typed in PowerShell. Compiled on first use (a prompt line's command
# is looked up), like every pattern on the start-up path.
_COMMAND_FORMATS = (
    (lazy(r"nvidia-smi(?:\.exe)?\s+topo\s+(-m|--matrix)\b"), "nvidia-smi-topo-matrix"),
    (lazy(r"nvidia-smi(?:\.exe)?\s+topo\s+(-p2p|--p2p)"), "nvidia-smi-topo-p2p"),
    (lazy(r"nvidia-smi(?:\.exe)?\s+.*--query-gpu"), "nvidia-smi-query-gpu-csv"),
    (lazy(r"nvidia-smi(?:\.exe)?\s+(-q|--query)\b"), "nvidia-smi-query"),
    (lazy(r"lspci\s+.*-t"), "lspci-tv"),
    (lazy(r"lspci\b"), "lspci-vv"),
    (lazy(r"rocm-smi\b.*--showtopo"), "rocm-smi-showtopo"),
    (lazy(r"amd-smi\s+topology"), "amd-smi-topology"),
    (lazy(r"rocm-bandwidth-test"), "rocm-bandwidth-test"),
    (lazy(r"nvbandwidth"), "nvbandwidth"),
    (lazy(r"p2pBandwidthLatencyTest", re.I), "p2p-bandwidth-latency-test"),
    (lazy(r"_perf\b"), "nccl-tests"),
)


def command_format(command: str | None) -> str | None:
    if not command:
        return None
    for pattern, name in _COMMAND_FORMATS:
        if pattern.search(command):
            return name
    return None


# What GPU tools print instead of their output when they fail: pasted as often as the output itself, and saying
# more than "format not recognized" (these phrasings are nvidia-smi's and the shell's own).
_TOOL_FAILURES = (
    (lazy(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
     "this is nvidia-smi's error, not its output: nvidia-smi could not communicate with the NVIDIA driver (the "
     "kernel module is not loaded, or it no longer matches after an update: `lsmod | grep nvidia`, "
     "`sudo dmesg | grep -i NVRM`)"),
    (lazy(r"Failed to initialize NVML: Driver/library version mismatch"),
     "this is nvidia-smi's error, not its output: the loaded NVIDIA kernel module and the user-space library "
     "differ (a driver update without a reboot: reboot, or reload the nvidia modules)"),
    (lazy(r"^No devices were found\s*$", re.M),
     "this is nvidia-smi's answer when it finds no NVIDIA GPU (`No devices were found`)"),
    (lazy(r"(?:^|: )(nvidia-smi|amd-smi|rocm-smi|lspci|ibstat|ibv_devinfo)(?:\.exe)?: (?:command )?not found"),
     "the shell did not find `{0}` on that host: its output is not in this file"),
    # the status tables pasted most often: they hold no link between GPUs, so say which output does
    (lazy(r"^\|\s*NVIDIA-SMI \d[\d.]*\s.*Driver Version", re.M),
     "this is plain `nvidia-smi` (its status table), which shows no link between GPUs; give `nvidia-smi topo -m` "
     "and `nvidia-smi -q` (or a `k3diag collect` bundle) instead"),
    # `(?<!=)`: tried only where a run of `=` starts (from inside a 20,000-long one, `=+` ran to its end from
    # every position: quadratic)
    (lazy(r"(?<!=)=+\s*Concise Info\s*=+"),
     "this is plain `rocm-smi` (its concise table), which shows no link between GPUs; give `rocm-smi --showtopo` "
     "or `amd-smi topology` (or a `k3diag collect` bundle) instead"),
)


def describe_unknown(text: str, name: str) -> str:
    head = text[:4096]
    for pattern, meaning in _TOOL_FAILURES:
        match = pattern.search(head)
        if match:
            return f"{name}: {meaning.format(*match.groups())}"
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    if len(first) > 80:
        first = first[:77] + "..."
    return (
        f"{name}: format not recognized (first line: {first!r}); k3diag reads nvidia-smi topo -m/-p2p/-q, "
        "--query-gpu CSV, lspci -vv, NCCL/RCCL logs, nccl-tests, p2pBandwidthLatencyTest, nvbandwidth, "
        "rocm-smi/amd-smi topology and rocm-bandwidth-test outputs"
    )
