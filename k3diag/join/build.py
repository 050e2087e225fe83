"""Evidence in, one `Machine` out: detect each input's format from its content, parse, merge.

Detection and section splitting live in `k3diag.parse.detect`; this module runs each
section's parser and hands the result to the format's merger (`k3diag.join.merge_*`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator

from k3diag.evidence import MAX_TEXT_BYTES, Evidence, TextRead
from k3diag.model.identity import InputIdentity
from k3diag.model.machine import InputRecord, Machine, Note
from k3diag.model.source import SourceRef
from k3diag.parse.detect import (
    STREAM_SNIFF_BYTES,
    ControlBytesFound,
    describe_unknown,
    detect,
    split_sections,
    streaming_format,
)
from k3diag.parse.lazy_re import lazy
from k3diag.parse.markdown_head import is_markdown  # the reader itself (`parse.markdown`) only for a document
from k3diag.parse.registry import FormatSpec, merger, parser_module, spec_named
from k3diag.parse.text import Section, clean_text, compressed_kind, looks_binary, normalize, unwrap_paste


@dataclass
class ParsedInput:
    """One input (or one section of a file) after parsing, before merging: what the join groups."""

    record: InputRecord
    spec: FormatSpec | None = None  # None: nothing was parsed; the record says why
    result: Any = None
    note: Note | None = None  # what the evidence itself reported (a command's failure, its time-out)

    @property
    def parsed(self) -> bool:
        return self.spec is not None and self.result is not None


def build_machine(evidence: Iterable[Evidence], machine: Machine | None = None) -> Machine:
    """Every input merged into one machine, unchecked: for a live host (one machine by definition) and for
    tests. Saved inputs of unknown origin go through `build_machines`, which never merges two machines."""
    machine = machine or Machine()
    for item in evidence:
        ingest(item, machine)
    finish_machine(machine)
    return machine


def finish_machine(machine: Machine) -> None:
    """What is derived once every input of a machine is merged: GPUs benchmarks name, then the
    paths the PCIe tree implies."""
    from k3diag.join.inventory import fill_inventory

    try:
        fill_inventory(machine)
    except Exception as exc:  # never lose the report over a convenience
        machine.note("inventory", f"GPUs named by benchmarks could not be joined ({type(exc).__name__}: {exc})")
    fill_derived_links(machine)


def ingest(item: Evidence, machine: Machine) -> None:
    """Read one piece of evidence into the machine; every problem becomes a warning, never an exception."""
    for parsed in parse_evidence(item):
        merge_parsed(parsed, machine)


def merge_parsed(parsed: ParsedInput, machine: Machine) -> None:
    """Record the input in `machine` and merge its records: a merger bug costs this one input."""
    if parsed.note is not None:
        machine.keep_note(parsed.note)
    machine.inputs.append(parsed.record)
    if not parsed.parsed:
        return
    merge = merger(parsed.spec)
    if merge is not None:
        try:
            merge(parsed.result, machine, parsed.record)
        except Exception as exc:
            parsed.record.warnings.append(f"could not merge {parsed.spec.name} facts ({type(exc).__name__}: {exc})")


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


def parse_evidence(item: Evidence) -> Iterator[ParsedInput]:
    """Parse one piece of evidence (each section of a file on its own); never raises."""
    # a command or reading k3diag (or a bundle's collector) ran that failed: said on the records, so that rules
    # need not read it from the words of a warning (one that printed nothing is marked where that is found)
    failed = item.kind != "file" and (item.error is not None or item.timed_out)
    for parsed in _parse_evidence(item):
        if failed:
            parsed.record.collection_failed = True
        yield parsed


def _parse_evidence(item: Evidence) -> Iterator[ParsedInput]:
    # stopped at its own time limit, not at the run's deadline: a command that hung
    hung = item.timed_out and not (item.meta or {}).get("stopped_at_deadline")
    note = Note(subject=item.name, message=item.error, timed_out=hung) if item.error else None
    if item.error and not item.data and item.path is None:
        record = InputRecord(path=item.name, format="unknown", command=item.command)
        record.warnings.append(item.error)
        yield ParsedInput(record, note=note)
        return
    try:
        head = item.head(STREAM_SNIFF_BYTES)
    except OSError as exc:
        record = InputRecord(path=item.name, format="unknown", command=item.command)
        record.warnings.append(f"could not read {item.name}: {exc.strerror or exc}; check the path and its permissions")
        yield ParsedInput(record, note=note)
        return
    size = item.size
    if not head.strip():
        record = InputRecord(path=item.name, format="unknown", size_bytes=size, command=item.command,
                             collection_failed=item.kind != "file")
        reason = "the file is empty"
        if item.kind == "command":
            reason = f"`{item.command}` printed nothing"
            if item.error:
                reason = item.error
        record.warnings.append(reason)
        yield ParsedInput(record, note=note)
        return

    if item.format_hint:
        spec = spec_named(item.format_hint)
        if spec is not None and parser_module(spec) is not None and not spec.streaming:
            text, _ = item.read_text()
            yield _parse_section(spec, Section(text=text, first_line=1, command=item.command), item, size, note)
            return

    # UTF-16 (what Windows PowerShell saves) is full of NUL bytes: judge the decoded text, not the bytes.
    head_text = head.decode(item.encoding, errors="replace")
    # a compressed file by its magic number first: a short or very compressible one may not look binary
    compressed = compressed_kind(head)
    if compressed is not None or looks_binary(head if item.encoding == "utf-8" else head_text.encode("utf-8")):
        record = InputRecord(path=item.name, format="unknown", size_bytes=size, command=item.command)
        cut = _stream_cut(head) if compressed is not None and size is not None and size <= len(head) else None
        if cut is not None:
            # the whole file is in `head`, and its stream stops short: unpacking it would fail too
            record.warnings.append(
                f"{item.name} is {compressed[0]} but ends early or is corrupt ({size} bytes; a cut download or "
                f"copy?); copy it again, `{cut} -t` checks it"
            )
        elif compressed is not None:
            kind, unpack = compressed
            record.warnings.append(
                f"{item.name} is {kind}; unpack it first (`{unpack} {item.name}`) and give the unpacked files"
            )
        else:
            record.warnings.append(
                f"{item.name} looks like binary data, not the text output of a tool; give the saved text output instead"
            )
        yield ParsedInput(record, note=note)
        return

    head_text = normalize(head_text)
    if is_markdown(head_text):  # a README or an issue saved as .md: its code blocks, not its prose
        yield from _parse_document(item, size, note)
        return
    stream_spec = streaming_format(head_text)
    if stream_spec is not None:
        yield _parse_stream(stream_spec, item, size, note)
        return

    text, truncated, sections = read_sections(item)
    parsed_any = False
    for section, spec, unwrapped in _detected(sections):
        parsed_any = True
        parsed = _parse_section(spec, section, item, size, note, truncated=truncated)
        if unwrapped:
            last = section.first_line + section.text.count("\n")
            parsed.record.warnings.insert(0, f"lines {section.first_line}-{last} read without {unwrapped}; "
                                             "the evidence quotes them so")
        yield parsed
        note = None  # said once, with the first section
    if not parsed_any:
        record = InputRecord(path=item.name, format="unknown", size_bytes=size, command=item.command)
        record.warnings.append(item.error or describe_unknown(text, item.name))
        record.warnings.extend(item.take_notes())  # what reading dropped or cut
        yield ParsedInput(record, note=note)


def _detected(sections: list[Section]) -> Iterator[tuple[Section, FormatSpec, str]]:
    """Each section with the format it holds, and what was taken off it to tell (empty when nothing was).

    A paste no format recognizes may be one wrapped by its medium: quoted in an e-mail reply (`> ` on most
    lines) or indented as a whole. Such a section is read again without that (`unwrap_paste`, the line count
    kept) and cut into the outputs it holds; formats that read their own quoting (topo, lspci) recognized
    theirs already and keep their lines as pasted."""
    for section in sections:
        spec = detect(section.text, section.command)
        if spec is None or spec.name not in _READS_ITS_OWN_QUOTES:
            plain, what, label_host = unwrap_paste(section.text)
            if what == _INDENT_ONLY and spec is not None and spec.name not in _READ_FROM_COLUMN_ZERO:
                what = ""  # a recognized output its tool prints indented (nccl-tests, lspci -tv): read as it is
            if what:
                offset = section.first_line - 1
                host = section.host or label_host
                parts = [(replace(part, first_line=part.first_line + offset, host=part.host or host),
                          detect(part.text, part.command))
                         for part in split_sections(plain, command=section.command, normalized=True)]
                found = [(part, part_spec, what) for part, part_spec in parts if part_spec is not None]
                if found:
                    yield from found
                    continue
        if spec is not None:
            yield section, spec, ""


_INDENT_ONLY = "the indentation every line shared"
# Recognized formats whose parser needs its block heads at column 0 (`GPU 00000000:1B:00.0` of `nvidia-smi -q`):
# an indented paste of one is read again unindented; other recognized outputs are read as pasted
_READ_FROM_COLUMN_ZERO = frozenset({"nvidia-smi-query"})
# Parsers that take a reply's `> ` marks and an indentation off themselves and quote the lines as pasted
_READS_ITS_OWN_QUOTES = frozenset({"nvidia-smi-topo-matrix", "nvidia-smi-topo-p2p", "lspci-vv", "dmesg"})


def _parse_document(item: Evidence, size: int | None, note: Note | None) -> Iterator[ParsedInput]:
    """A Markdown document: the outputs in its code blocks, each parsed; what it quotes but was not read
    is said first, on the first input read (or on the document's own record when nothing was)."""
    raw, truncated = item.read_text(MAX_TEXT_BYTES)
    text, _ = clean_text(raw, controls_dropped=True)
    from k3diag.parse.markdown import read_document

    document = read_document(text, item.name, item.command)
    parsed = []
    for section, spec in document.sections:
        parsed.append(_parse_section(spec, section, item, size, note, truncated=truncated))
        note = None  # said once, with the first section
    if not parsed:
        record = InputRecord(path=item.name, format="unknown", size_bytes=size, command=item.command)
        record.warnings.extend(document.notes or [
            f"{item.name} is a Markdown document, and none of its code blocks holds an output k3diag reads "
            "(its prose is not read: put an output in a ``` block, or give it as its own file)"])
        record.warnings.extend(item.take_notes())
        yield ParsedInput(record, note=note)
        return
    parsed[0].record.warnings[0:0] = document.notes
    yield from parsed


def read_sections(item: Evidence) -> tuple[str, bool, list[Section]]:
    """The normalized text of a file (at most `MAX_TEXT_BYTES`), whether it was cut, and the outputs it
    holds: `split_sections` of `normalize(item.read_text()[0])`, with one 25 MB copy and one 25 MB
    control-byte check fewer (`Evidence.read_whole_text`): the controls are looked for in the distinct
    lines the start-line search holds, and a text that has one is read again, checked."""
    read = item.read_whole_text(MAX_TEXT_BYTES, drop_final_newline=True, defer_control_check=True)
    if not read.controls_checked:
        try:
            return _split_read(read, item, check_controls=True)
        except ControlBytesFound:
            read = item.read_whole_text(MAX_TEXT_BYTES, drop_final_newline=True)
    return _split_read(read, item, check_controls=False)


def _split_read(read: TextRead, item: Evidence, check_controls: bool) -> tuple[str, bool, list[Section]]:
    # Normalizing gives the same text with or without the final newline, but a CR left at the end turns
    # into one: then the last section drops it, as it drops a final newline.
    dropped = read.final_newline_dropped and not read.text.endswith("\r")
    # Normalized once, here: reading dropped the control bytes already (or `split_sections` looks for
    # them), and the sections say they are normalized so their parsers do not scan the text again.
    text, _ = clean_text(read.text, controls_dropped=True)
    sections = split_sections(text, command=item.command, normalized=True, final_newline_dropped=dropped,
                              check_controls=check_controls)
    return text, read.truncated, sections


def _parse_section(
    spec: FormatSpec,
    section: Section,
    item: Evidence,
    size: int | None,
    note: Note | None,
    truncated: bool = False,
) -> ParsedInput:
    record = InputRecord(path=item.name, format=spec.name, size_bytes=size, command=section.command or item.command)
    if truncated:
        record.warnings.append(
            f"only the first {MAX_TEXT_BYTES // (1024 * 1024)} MiB of {item.name} were read; "
            "split the file to analyze the rest"
        )
    if truncated and not section.excerpt:
        section = replace(section, excerpt=f"only the first {MAX_TEXT_BYTES // (1024 * 1024)} MiB of the file were read")
    if section.host:  # `user@node1:~$ nvidia-smi topo -m`: the prompt names the machine
        record.identity.add_hostname(section.host, SourceRef(item.name, section.first_line, section.text.split("\n", 1)[0]))
    def call(module):
        try:
            return module.parse(section, item.name)
        except (ValueError, OverflowError):
            fixed = _huge_numbers_out(section)
            if fixed is None:
                raise
            section_read, said = fixed
            record.warnings.extend(said)
            return module.parse(section_read, item.name)

    return _run_parser(spec, call, item, record, note)


# A number no float holds (over 309 digits; `float()` of such an int raises OverflowError, as the JSON
# readers' values do) or longer than Python's int() takes (`sys.get_int_max_str_digits()`, 4,300: ValueError):
# no tool prints one. One in a damaged or glued line raised out of the parser, and the whole section was lost
# for one value. Its sign and fraction go with it, so `-1...` or `1....5` in JSON becomes `null`, not `-null`.
_HUGE_NUMBER_RE = lazy(r"-?\d{310,}(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _huge_numbers_out(section: Section) -> tuple[Section, list[str]] | None:
    """`section` with each number no float or int holds read as not available (`N/A`, `null` in JSON), and
    what was done in words; None when it holds no such number (the parser failed for another reason)."""
    found = list(_HUGE_NUMBER_RE.finditer(section.text))
    if not found:
        return None
    token = "null" if section.text.lstrip()[:1] in ("{", "[") else "N/A"
    said = [f"line {section.first_line + section.text.count(chr(10), 0, match.start())}: a number of "
            f"{sum(map(str.isdigit, match.group())):,} digits, which no tool prints (a damaged line?), was read as {token}"
            for match in found[:3]]
    if len(found) > 3:
        said.append(f"{len(found) - 3:,} more such numbers were read as {token}")
    return replace(section, text=_HUGE_NUMBER_RE.sub(token, section.text)), said


def _parse_stream(spec: FormatSpec, item: Evidence, size: int | None, note: Note | None) -> ParsedInput:
    record = InputRecord(path=item.name, format=spec.name, size_bytes=size, command=item.command)
    def call(module):
        # a parser that can read the evidence itself (the NCCL log's bytes fast path) does
        if hasattr(module, "parse_evidence"):
            return module.parse_evidence(item, item.name)
        return module.parse_stream(item.iter_lines(), item.name)

    return _run_parser(spec, call, item, record, note)


def _run_parser(spec: FormatSpec, call, item: Evidence, record: InputRecord, note) -> ParsedInput:
    """Parse and keep the result: a parser bug costs this one input, never the report."""
    try:
        result = call(parser_module(spec))
    except OSError as exc:  # a streamed file that became unreadable part way
        record.warnings.append(f"reading {item.name} failed part way: {exc}")
        return ParsedInput(record, note=note)
    except Exception as exc:
        record.warnings.append(f"the {spec.name} parser failed on this input ({type(exc).__name__}: {exc}); "
                               "please report it with the file attached")
        return ParsedInput(record, note=note)
    record.warnings.extend(getattr(result, "warnings", []) or [])
    record.warnings.extend(item.take_notes())  # what reading dropped or cut (NULs, overlong lines)
    reported = getattr(result, "identity", None)
    if isinstance(reported, InputIdentity):  # what the parser read about its machine
        record.identity.update(reported)
    return ParsedInput(record, spec=spec, result=result, note=note)


def _stream_cut(data: bytes) -> str | None:
    """The tool that tests it (`gzip`, `bzip2`, `xz`) when `data`, a whole file, starts a compressed stream
    that does not end within it; None when the stream is whole or not one the bundle reader knows."""
    import io

    from k3diag.bundle.detect import compression_of, decompressor

    kind = compression_of(data)
    if kind is None:
        return None
    try:
        with decompressor(kind, io.BytesIO(data)) as stream:
            for _ in range(64):  # at most 64 MiB out: a small bomb stays small (and is no cut file)
                if not stream.read(1 << 20):
                    break
    except Exception:  # EOFError (cut), BadGzipFile, zlib/lzma errors, OSError: all say the stream is damaged
        return kind
    return None
