"""Evidence in, one `Machine` out: detect each input's format from its content, parse, merge.

Detection and section splitting live in `k3diag.parse.detect`; this module runs each
section's parser and hands the result to the format's merger (`k3diag.join.merge_*`).
"""

from __future__ import annotations

from typing import Iterable

from k3diag.evidence import MAX_TEXT_BYTES, Evidence
from k3diag.model.identity import InputIdentity
from k3diag.model.machine import InputRecord, Machine
from k3diag.parse.detect import STREAM_SNIFF_BYTES, describe_unknown, detect, split_sections, streaming_format
from k3diag.parse.registry import FormatSpec, merger, parser_module, spec_named
from k3diag.parse.text import Section, compressed_kind, looks_binary, normalize


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
    stream_spec = streaming_format(head_text)
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
        record.warnings.append(item.error or describe_unknown(text, item.name))
        record.warnings.extend(item.take_notes())  # what reading dropped or cut
        machine.inputs.append(record)


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
    record.warnings.extend(item.take_notes())  # what reading dropped or cut (NULs, overlong lines)
    reported = getattr(result, "identity", None)
    if isinstance(reported, InputIdentity):  # what the parser read about its machine
        record.identity.update(reported)
    machine.inputs.append(record)
    merge = merger(spec)
    if merge is not None:
        try:
            merge(result, machine, record)
        except Exception as exc:
            record.warnings.append(f"could not merge {spec.name} facts ({type(exc).__name__}: {exc})")


