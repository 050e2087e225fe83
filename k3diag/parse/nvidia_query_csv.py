"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

The header names the fields, with units in brackets (`memory.total [MiB]`); values carry
units unless `nounits` (`81559 MiB`), and missing ones read `[N/A]` or `[Not Supported]`.
With `noheader` the field list exists only on the command line, so without it the rows
cannot be read and the parser says so instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef
from k3diag.parse.lazy_re import lazy
from k3diag.parse.nvidia_topo_matrix import bare_command
from k3diag.parse.text import Section, normalize, prompt_command
from k3diag.model.words import counted

# A header line: comma-separated field names such as `index, name, memory.total [MiB]`.
START_RE = lazy(
    r"^\s*(?:index|name|gpu_name|pci\.bus_id|gpu_bus_id|uuid|gpu_uuid|timestamp|driver_version|pstate|"
    r"memory\.\w+|pcie\.link\.[\w.]+|utilization\.\w+|temperature\.\w+)(?:\s*\[[^\]]*\])?\s*,\s*[a-z_]"
)

# Field name (as printed or as queried, aliases folded) -> the record attribute it fills.
FIELD_ALIASES: dict[str, str] = {
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "pci.bus_id": "bus_id",
    "gpu_bus_id": "bus_id",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "pstate": "performance_state",
    "memory.total": "memory_total_mib",
    "pcie.link.gen.current": "gen_current",
    "pcie.link.gen.gpucurrent": "gen_device_current",
    "pcie.link.gen.max": "gen_max",
    "pcie.link.gen.gpumax": "gen_device_max",
    "pcie.link.gen.hostmax": "gen_host_max",
    "pcie.link.width.current": "width_current",
    "pcie.link.width.max": "width_max",
    "driver_version": "driver_version",
    "utilization.gpu": "utilization_gpu_percent",
}
_KNOWN_FIELD_RE = lazy(r"^[a-z_]+(?:\.[a-z_]+)*$")
_QUERY_ARG_RE = lazy(r"--query-gpu[= ]\s*([\w.,]+)")
_MISSING = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", "[GPU is lost]", "[Insufficient Permissions]"}


@dataclass
class CsvGpu:
    index: int | None = None
    index_from: str | None = None  # "field" | "order"
    name: str | None = None
    bus_id: str | None = None
    uuid: str | None = None
    performance_state: str | None = None
    memory_total_mib: int | None = None
    gen_current: int | None = None
    gen_device_current: int | None = None
    gen_max: int | None = None
    gen_device_max: int | None = None
    gen_host_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None
    driver_version: str | None = None
    utilization_gpu_percent: int | None = None
    values: dict[str, str] = field(default_factory=dict)  # every field as printed
    source: SourceRef | None = None


@dataclass
class QueryCsvResult:
    fields: list[str] = field(default_factory=list)  # names without units
    units: dict[str, str] = field(default_factory=dict)
    header_from: str | None = None  # "header" | "command" | None
    gpus: list[CsvGpu] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def split_header_field(text: str) -> tuple[str, str | None]:
    match = re.match(r"^\s*([^\[]+?)\s*(?:\[([^\]]*)\])?\s*$", text)
    if not match:
        return text.strip(), None
    return match.group(1), match.group(2)


def fields_from_command(command: str | None) -> list[str] | None:
    if not command:
        return None
    match = _QUERY_ARG_RE.search(command)
    if not match:
        return None
    return [name for name in match.group(1).split(",") if name]


def sniff(text: str) -> float:
    lines = [line for line in normalize(text[:100_000]).split("\n") if line.strip()][:6]
    for line in lines:
        if START_RE.match(line):
            names = [split_header_field(part)[0] for part in line.split(",")]
            if all(_KNOWN_FIELD_RE.match(name) for name in names):
                return 0.9
    # A noheader CSV: rows of the same width holding a bus id; only the command line can confirm it.
    rows = [line for line in lines if "," in line and not line.lstrip().startswith(("$", "#", "nvidia-smi"))]
    if rows and len({line.count(",") for line in rows}) == 1 and re.search(r"\b[0-9A-F]{8}:[0-9A-F]{2}:", rows[0]):
        return 0.35
    return 0.0


def parse(section: Section, input_name: str) -> QueryCsvResult:
    result = QueryCsvResult()
    lines = normalize(section.text).split("\n")
    command = section.command or bare_command(lines)
    header_index: int | None = None
    for index, line in enumerate(lines):
        if START_RE.match(line):
            header_index = index
            break
    if header_index is not None:
        for part in lines[header_index].split(","):
            name, unit = split_header_field(part)
            result.fields.append(name)
            if unit:
                result.units[name] = unit
        result.header_from = "header"
        first_row = header_index + 1
    else:
        queried = fields_from_command(command)
        if not queried:
            result.warnings.append(
                f"{input_name}: a --query-gpu CSV without its header line cannot be read (which column is which "
                "is only in the command line); save it without `noheader`, or keep the command line above it"
            )
            return result
        result.fields = queried
        result.header_from = "command"
        first_row = 0
    queried = fields_from_command(command)
    if queried and result.header_from == "header" and len(queried) != len(result.fields):
        result.warnings.append(
            f"the command asked for {len(queried)} fields but the header has {len(result.fields)}"
        )
    skipped: list[int] = []
    for index in range(first_row, len(lines)):
        line = lines[index]
        stripped = line.strip()
        if not stripped or stripped.startswith(("nvidia-smi ", "nvidia-smi.exe ")) or prompt_command(line) is not None:
            continue
        parts = [part.strip() for part in line.split(", ")]
        if len(parts) != len(result.fields):
            parts = [part.strip() for part in line.split(",")]
        if len(parts) != len(result.fields):
            skipped.append(section.first_line + index)
            result.warnings.append(
                f"line {section.first_line + index}: {len(parts)} values where the header has "
                f"{len(result.fields)} fields; skipped: {stripped[:60]!r}"
            )
            continue
        gpu = CsvGpu(source=SourceRef(input_name, section.first_line + index, line.rstrip()))
        for name, value in zip(result.fields, parts):
            gpu.values[name] = value
            _set(gpu, name, value, result, section.first_line + index)
        result.gpus.append(gpu)
    _keep_first_sample(result)
    for position, gpu in enumerate(result.gpus):
        if gpu.index is not None:
            gpu.index_from = "field"
        elif skipped and gpu.source is not None and gpu.source.line > skipped[0]:
            # Rows were left out ("[...]" in a paste), so the position no longer tells the index.
            gpu.index_from = None
        else:
            gpu.index, gpu.index_from = position, "order"
    if result.gpus and all(gpu.index_from == "order" for gpu in result.gpus) and not any(
        gpu.bus_id for gpu in result.gpus
    ):
        result.warnings.append(
            "the CSV has neither an index nor a pci.bus_id column; GPUs are numbered in the order shown"
        )
    return result


def _identity(gpu: CsvGpu) -> tuple[str, str] | None:
    for kind in ("bus_id", "uuid"):
        value = getattr(gpu, kind)
        if value:
            return kind, value.lower()
    return ("index", str(gpu.index)) if gpu.index is not None else None


def _keep_first_sample(result: QueryCsvResult) -> None:
    """`-l N` / `-lms N` repeats every GPU's row once per sample (a `timestamp` column tells them apart):
    read as they are, each sample would be taken for more GPUs. A row whose GPU (bus id, UUID or index)
    was already seen starts a later sample; the first sample's rows are kept."""
    seen: dict[tuple[str, str], CsvGpu] = {}
    kept: list[CsvGpu] = []
    repeats = 0
    for gpu in result.gpus:
        identity = _identity(gpu)
        if identity is not None and identity in seen:
            repeats += 1
            continue
        if identity is not None:
            seen[identity] = gpu
        kept.append(gpu)
    if not repeats:
        return
    samples = 1 + repeats // max(len(kept), 1)
    first = next((gpu.source.line for gpu in kept if gpu.source is not None), None)
    result.warnings.append(
        f"the CSV repeats the same {counted(len(kept), 'GPU')} {samples} times (a loop, `-l`/`-lms`); the first "
        f"sample{f' (from line {first})' if first is not None else ''} is read and {counted(repeats, 'later row')} "
        "left out")
    result.gpus = kept


def _set(gpu: CsvGpu, name: str, value: str, result: QueryCsvResult, line_no: int) -> None:
    attribute = FIELD_ALIASES.get(name)
    if attribute is None or value in _MISSING:
        return
    if attribute in ("name", "bus_id", "uuid", "driver_version"):
        setattr(gpu, attribute, value)
    elif attribute == "performance_state":
        gpu.performance_state = value if re.fullmatch(r"P\d{1,2}", value) else None
    else:
        match = re.match(r"^(\d+)", value)
        if match is None:
            result.warnings.append(f"line {line_no}: {name} value {value!r} is not a number")
            return
        setattr(gpu, attribute, int(match.group(1)))
