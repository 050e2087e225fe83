"""Evidence in, one `Machine` out: detect each input's format from its content, parse, merge.

The format is never taken from a file name. A file holding several outputs pasted one
after another (with or without the prompt lines) is cut into sections and each part is
detected and parsed on its own.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable

from k3diag.evidence import MAX_TEXT_BYTES, Evidence
from k3diag.model.machine import InputRecord, Machine
from k3diag.parse.registry import FormatSpec, available_formats, merger, parser_module, spec_named
from k3diag.parse.text import (
    Section,
    compressed_kind,
    is_shell_prompt,
    looks_binary,
    normalize,
    prompt_command,
)

SNIFF_THRESHOLD = 0.5
SNIFF_CHARS = 64 * 1024
# How much of a file is looked at to decide whether it is a (possibly huge) streaming log.
STREAM_SNIFF_BYTES = 256 * 1024


def build_machine(evidence: Iterable[Evidence], machine: Machine | None = None) -> Machine:
    machine = machine or Machine()
    for item in evidence:
        ingest(item, machine)
    fill_derived_links(machine)
    return machine


def fill_derived_links(machine: Machine) -> None:
    """GPU pairs no tool reported get the path class the PCIe tree implies (origin `pcie-tree`).

    AMD hosts and sysfs-only evidence have no `topo -m`; without this the matrix and the
    planner would know nothing about those pairs. Pairs a tool did report keep only the
    tool's reading: the PCIe layer's `topology-path-mismatch` rule compares the two.
    """
    if not machine.pci or len(machine.gpus) < 2:
        return
    try:
        from k3diag.model.pcie_tree import derived_links
    except ModuleNotFoundError:
        return
    try:
        derived = derived_links(machine)
    except Exception as exc:  # the tree is a convenience here; never lose the report over it
        machine.note("pcie-tree", f"the PCIe tree could not be derived ({type(exc).__name__}: {exc})")
        return
    reported = {link.key() for link in machine.links if link.path is not None}
    for link in derived:
        if link.key() not in reported:
            machine.add_link(link)


def ingest(item: Evidence, machine: Machine) -> None:
    """Read one piece of evidence into the machine; every problem becomes a warning, never an exception."""
    if item.error:
        machine.note(item.name, item.error)
    if item.error and not item.data and item.path is None:
        record = InputRecord(path=item.name, format="unknown", command=item.command)
        record.warnings.append(item.error)
        machine.inputs.append(record)
        return
    try:
        head = item.head(STREAM_SNIFF_BYTES)
    except OSError as exc:
        record = InputRecord(path=item.name, format="unknown", command=item.command)
        record.warnings.append(f"could not read {item.name}: {exc.strerror or exc}; check the path and its permissions")
        machine.inputs.append(record)
        return
    size = item.size
    if not head.strip():
        record = InputRecord(path=item.name, format="unknown", size_bytes=size, command=item.command)
        reason = "the file is empty"
        if item.kind == "command":
            reason = f"`{item.command}` printed nothing"
            if item.error:
                reason = item.error
        record.warnings.append(reason)
        machine.inputs.append(record)
        return

    if item.format_hint:
        spec = spec_named(item.format_hint)
        if spec is not None and parser_module(spec) is not None and not spec.streaming:
            text, _ = item.read_text()
            _parse_section(spec, Section(text=text, first_line=1, command=item.command), item, machine, size)
            return

    # UTF-16 (what Windows PowerShell saves) is full of NUL bytes: judge the decoded text, not the bytes.
    head_text = head.decode(item.encoding, errors="replace")
    if looks_binary(head if item.encoding == "utf-8" else head_text.encode("utf-8")):
        record = InputRecord(path=item.name, format="unknown", size_bytes=size, command=item.command)
        compressed = compressed_kind(head)
        if compressed is not None:
            kind, unpack = compressed
            record.warnings.append(
                f"{item.name} is {kind}; unpack it first (`{unpack} {item.name}`) and give the unpacked files"
            )
        else:
            record.warnings.append(
                f"{item.name} looks like binary data, not the text output of a tool; give the saved text output instead"
            )
        machine.inputs.append(record)
        return

    head_text = normalize(head_text)
    stream_spec = _streaming_format(head_text)
    if stream_spec is not None:
        _parse_stream(stream_spec, item, machine, size)
        return

    text, truncated = item.read_text(MAX_TEXT_BYTES)
    text = normalize(text)
    sections = split_sections(text, command=item.command)
    parsed_any = False
    for section in sections:
        spec = detect(section.text, section.command)
        if spec is None:
            continue
        parsed_any = True
        _parse_section(spec, section, item, machine, size, truncated=truncated)
    if not parsed_any:
        record = InputRecord(path=item.name, format="unknown", size_bytes=size, command=item.command)
        record.warnings.append(item.error or _describe_unknown(text, item.name))
        machine.inputs.append(record)


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
        hint = _command_format(command)
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


def _parse_section(
    spec: FormatSpec,
    section: Section,
    item: Evidence,
    machine: Machine,
    size: int | None,
    truncated: bool = False,
) -> None:
    record = InputRecord(path=item.name, format=spec.name, size_bytes=size, command=section.command or item.command)
    if truncated:
        record.warnings.append(
            f"only the first {MAX_TEXT_BYTES // (1024 * 1024)} MiB of {item.name} were read; "
            "split the file to analyze the rest"
        )
    _run_parser(spec, lambda module: module.parse(section, item.name), item, machine, record)


def _parse_stream(spec: FormatSpec, item: Evidence, machine: Machine, size: int | None) -> None:
    record = InputRecord(path=item.name, format=spec.name, size_bytes=size, command=item.command)
    _run_parser(spec, lambda module: module.parse_stream(item.iter_lines(), item.name), item, machine, record)


def _run_parser(spec: FormatSpec, call, item: Evidence, machine: Machine, record: InputRecord) -> None:
    """Parse, record the input, merge: a parser or merger bug costs this one input, never the report."""
    try:
        result = call(parser_module(spec))
    except OSError as exc:  # a streamed file that became unreadable part way
        record.warnings.append(f"reading {item.name} failed part way: {exc}")
        machine.inputs.append(record)
        return
    except Exception as exc:
        record.warnings.append(f"the {spec.name} parser failed on this input ({type(exc).__name__}: {exc}); "
                               "please report it with the file attached")
        machine.inputs.append(record)
        return
    record.warnings.extend(getattr(result, "warnings", []) or [])
    machine.inputs.append(record)
    merge = merger(spec)
    if merge is not None:
        try:
            merge(result, machine, record)
        except Exception as exc:
            record.warnings.append(f"could not merge {spec.name} facts ({type(exc).__name__}: {exc})")


def _streaming_format(head_text: str) -> FormatSpec | None:
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


def _command_format(command: str | None) -> str | None:
    if not command:
        return None
    for pattern, name in _COMMAND_FORMATS:
        if pattern.search(command):
            return name
    return None


def _describe_unknown(text: str, name: str) -> str:
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    if len(first) > 80:
        first = first[:77] + "..."
    return (
        f"{name}: format not recognized (first line: {first!r}); k3diag reads nvidia-smi topo -m/-p2p/-q, "
        "--query-gpu CSV, lspci -vv, NCCL/RCCL logs, nccl-tests, p2pBandwidthLatencyTest, nvbandwidth, "
        "rocm-smi/amd-smi topology and rocm-bandwidth-test outputs"
    )
