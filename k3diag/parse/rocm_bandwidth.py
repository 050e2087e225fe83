"""`rocm-bandwidth-test` (rocm_bandwidth_test), classic output and the TransferBench-based one.

Classic (1.x-2.6): a version line, one `Device: N,  name[,  uuid][,  bus]` line per agent
(CPUs first), then matrices whose rows are separated by blank lines:

              RocmBandwidthTest Version: 2.6.0
              Device: 0,  Intel(R) Xeon(R) W-2135 CPU @ 3.70GHz
              Device: 1,  AMD Radeon Graphics,  GPU-9318692173497dfc,  19:0.0
              Inter-Device Access                 (1.x/2.0: "Device Access")
              D/D       0         1         2
              0         1         0         0
              ...
              Unidirectional copy peak bandwidth GB/s   (1.0: "Unidirectional peak bandwidth")
              Bidirectional copy peak bandwidth GB/s    (2.0.1: "Bdirectional ...", sic)

`N/A` cells are null. `-e` prints `Device Index:/Device Type:/Device Name:/Device  BDF:`
blocks instead of `Device:` lines. Since ROCm 7, `rocm_bandwidth_test run tb p2p` runs
TransferBench and prints its matrices: columns `CPU 00 ... GPU 07`, rows `GPU 00  ->`
(bidirectional: `->`, `<-` and `<->` rows per source); those are read too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef
from k3diag.parse.ids import normalize_bdf
from k3diag.parse.text import Section, normalize

FORMAT = "rocm-bandwidth-test"
TOOL = "rocm-bandwidth-test"

START_RE = re.compile(r"^\s*RocmBandwidthTest Version:")
_VERSION_RE = re.compile(r"RocmBandwidthTest Version:\s*(?P<version>\S+)")
_DEVICE_RE = re.compile(r"^\s*Device:\s*(?P<id>\d+)\s*,\s*(?P<rest>(?:.*\S)?)\s*$")
_INDEX_RE = re.compile(r"^\s*Device Index:\s*(?P<id>\d+)\s*$")
_KV_RE = re.compile(r"^\s*Device\s+(?P<key>Type|Name|BDF|UUID):\s*(?P<value>(?:.*\S)?)\s*$")
_DD_RE = re.compile(r"^\s*D/D\s+(?P<cols>.*)$")
_ROW_RE = re.compile(r"^\s*(?P<id>\d+)\s+(?P<cells>\S.*)$")
_TB_HEADER_RE = re.compile(r"^\s*SRC(?:\+EXE)?\\+DST\s+(?P<cols>.*)$")
_TB_ROW_RE = re.compile(r"^\s*(?P<kind>CPU|GPU)\s+(?P<num>\d+)\s+(?P<dir><->|->|<-)\s+(?P<cells>.*)$")
_TB_LABEL_RE = re.compile(r"(CPU|GPU)\s+(\d+)")
_DEVICE_SPLIT_RE = re.compile(r",\s{2,}|,\s*(?=GPU-)|,\s*(?=[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]$)")
_SHORT_BDF_RE = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]$")
_GPU_NAME_RE = re.compile(r"Radeon|Instinct|Vega|Navi|gfx|MI\d{2,3}|^Device [0-9a-f]{4}$|GPU", re.I)
_CPU_NAME_RE = re.compile(r"\bCPU\b|Processor|EPYC|Xeon|Core\(TM\)|Ryzen|Threadripper", re.I)

# Matrix titles (lower case, prefix match) -> matrix name used in the JSON report.
_TITLES: tuple[tuple[str, str], ...] = (
    ("inter-device access", "access"),
    ("device access", "access"),
    ("inter-device numa distance", "numa_distance"),
    ("device numa distance", "numa_distance"),
    ("unidirectional copy peak bandwidth", "unidirectional"),
    ("unidirectional peak bandwidth", "unidirectional"),
    ("bidirectional copy peak bandwidth", "bidirectional"),
    ("bdirectional copy peak bandwidth", "bidirectional"),
    ("bidirectional peak bandwidth", "bidirectional"),
    ("bdirectional peak bandwidth", "bidirectional"),
    ("unidirectional copy latency", "unidirectional_latency"),
    ("bidirectional copy latency", "bidirectional_latency"),
)


@dataclass
class RbtDevice:
    id: int  # the tool's device number (classic: agent index, CPUs first; TransferBench: column order)
    type: str | None = None  # "cpu" | "gpu" | None
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    gpu_index: int | None = None  # position among GPU devices: the HIP/amd-smi order on a standard host
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "type": self.type,
            "name": self.name,
            "uuid": self.uuid,
            "bus_id": self.bus_id,
            "gpu_index": self.gpu_index,
        }


@dataclass
class RbtMatrix:
    name: str
    title: str
    row_ids: list[int] = field(default_factory=list)
    col_ids: list[int] = field(default_factory=list)
    values: list[list[float | int | None]] = field(default_factory=list)
    row_sources: list[SourceRef] = field(default_factory=list)

    def value(self, row_id: int, col_id: int) -> float | int | None:
        try:
            return self.values[self.row_ids.index(row_id)][self.col_ids.index(col_id)]
        except (ValueError, IndexError):
            return None

    def source(self, row_id: int) -> SourceRef | None:
        try:
            return self.row_sources[self.row_ids.index(row_id)]
        except (ValueError, IndexError):
            return None


@dataclass
class RocmBandwidthBenchmark:
    """One rocm-bandwidth-test run. `to_json` follows the report contract
    ({tool, devices, matrices: {name: [[...]]}}) and adds the ids of each matrix's rows/columns."""

    tool: str = TOOL
    version: str | None = None
    variant: str = "classic"  # classic | transferbench
    devices: list[RbtDevice] = field(default_factory=list)
    matrices: dict[str, RbtMatrix] = field(default_factory=dict)
    input: str | None = None

    def device(self, device_id: int) -> RbtDevice | None:
        return next((device for device in self.devices if device.id == device_id), None)

    def gpu_devices(self) -> list[RbtDevice]:
        return [device for device in self.devices if device.type == "gpu"]

    def to_json(self) -> dict:
        return {
            "tool": self.tool,
            "version": self.version,
            "variant": self.variant,
            "devices": [device.to_json() for device in self.devices],
            "matrices": {name: [list(row) for row in matrix.values] for name, matrix in self.matrices.items()},
            "matrix_ids": {
                name: {"rows": list(matrix.row_ids), "columns": list(matrix.col_ids)}
                for name, matrix in self.matrices.items()
            },
        }


@dataclass
class RocmBandwidthResult:
    benchmarks: list[RocmBandwidthBenchmark] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    head = text[:200_000]
    if "RocmBandwidthTest" in head:
        return 0.95
    if re.search(r"^[^\S\n]*D/D\s", head, re.M) and re.search(r"peak bandwidth GB/s", head, re.I):
        return 0.85
    if re.search(r"copy peak bandwidth GB/s \[", head) and re.search(r"SRC(\+EXE)?\\+DST", head):
        return 0.8
    return 0.0


def parse(section: Section, input_name: str) -> RocmBandwidthResult:
    result = RocmBandwidthResult()
    bench = RocmBandwidthBenchmark(input=input_name)
    lines = normalize(section.text).split("\n")
    title: str | None = None
    current: RbtMatrix | None = None
    tb_labels: list[tuple[str, int]] = []
    pending_device: RbtDevice | None = None
    for offset, raw in enumerate(lines):
        line_no = section.first_line + offset
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        ref = SourceRef(input_name, line_no, line)
        version = _VERSION_RE.search(line)
        if version:
            bench.version = version.group("version")
            continue
        device = _DEVICE_RE.match(line)
        if device:
            bench.devices.append(_device_from_line(int(device.group("id")), device.group("rest"), ref))
            continue
        index = _INDEX_RE.match(line)
        if index:
            pending_device = RbtDevice(id=int(index.group("id")), source=ref)
            bench.devices.append(pending_device)
            continue
        kv = _KV_RE.match(line)
        if kv and pending_device is not None:
            _device_field(pending_device, kv.group("key"), kv.group("value"))
            continue
        header = _DD_RE.match(line)
        if header:
            ids = [int(token) for token in header.group("cols").split() if token.isdigit()]
            name = _matrix_name(title or "")
            if name in bench.matrices:
                name = f"{name}_{len(bench.matrices)}"
            current = RbtMatrix(name=name, title=title or "", col_ids=ids)
            bench.matrices[name] = current
            continue
        tb_header = _TB_HEADER_RE.match(line)
        if tb_header:
            bench.variant = "transferbench"
            tb_labels = [(kind.lower(), int(num)) for kind, num in _TB_LABEL_RE.findall(tb_header.group("cols"))]
            _ensure_tb_devices(bench, tb_labels)
            name = _matrix_name(title or "")
            current = RbtMatrix(name=name, title=title or "", col_ids=list(range(len(tb_labels))))
            bench.matrices[name] = current
            continue
        tb_row = _TB_ROW_RE.match(line)
        if tb_row and current is not None and tb_labels:
            _read_tb_row(bench, current, tb_labels, tb_row, ref, result, line_no)
            continue
        row = _ROW_RE.match(line)
        if row and current is not None and not tb_labels:
            cells = [_cell(token) for token in row.group("cells").split()]
            if len(cells) != len(current.col_ids):
                result.warnings.append(
                    f"line {line_no}: row {row.group('id')} of {current.title or current.name!r} has {len(cells)} "
                    f"cells for {len(current.col_ids)} columns; read what is there"
                )
                cells = (cells + [None] * len(current.col_ids))[: len(current.col_ids)]
            current.row_ids.append(int(row.group("id")))
            current.values.append(cells)
            current.row_sources.append(ref)
            continue
        if _looks_like_title(stripped):
            title = stripped
            current = None
    _finish_devices(bench)
    if bench.matrices or bench.devices:
        result.benchmarks.append(bench)
    else:
        result.warnings.append("no rocm-bandwidth-test device list or matrix was found")
    for name, matrix in bench.matrices.items():
        if not matrix.row_ids:
            result.warnings.append(f"matrix {matrix.title or name!r} has a header but no rows (cut short?)")
    return result


def _looks_like_title(text: str) -> bool:
    lowered = text.lower()
    if lowered.startswith("launch command"):
        return False
    return any(lowered.startswith(prefix) for prefix, _ in _TITLES) or "bandwidth" in lowered or "latency" in lowered


def _matrix_name(title: str) -> str:
    lowered = title.lower().strip()
    for prefix, name in _TITLES:
        if lowered.startswith(prefix):
            return name
    if not lowered:
        return "untitled"
    return re.sub(r"[^a-z0-9]+", "_", lowered).strip("_")[:60]


def _device_from_line(device_id: int, rest: str, ref: SourceRef) -> RbtDevice:
    # Fields are separated by ",  " (two spaces); names never contain that.
    parts = [part.strip() for part in _DEVICE_SPLIT_RE.split(rest)]
    device = RbtDevice(id=device_id, name=parts[0] or None, source=ref)
    for part in parts[1:]:
        if part.upper().startswith("GPU-"):
            device.uuid = part
        elif _SHORT_BDF_RE.match(part):
            device.bus_id = normalize_bdf(part)
    if device.uuid or device.bus_id or (device.name and _GPU_NAME_RE.search(device.name)):
        device.type = "gpu"
    elif device.name and _CPU_NAME_RE.search(device.name):
        device.type = "cpu"
    return device


def _device_field(device: RbtDevice, key: str, value: str) -> None:
    if key == "Type":
        device.type = value.strip().lower() or None
    elif key == "Name":
        device.name = value or None
    elif key == "UUID":
        device.uuid = value or None
    elif key == "BDF" and _SHORT_BDF_RE.match(value.strip()):
        device.bus_id = normalize_bdf(value.strip())


def _ensure_tb_devices(bench: RocmBandwidthBenchmark, labels: list[tuple[str, int]]) -> None:
    if bench.devices:
        return
    for position, (kind, number) in enumerate(labels):
        bench.devices.append(
            RbtDevice(
                id=position,
                type=kind,
                name=f"{kind.upper()} {number:02d}",
                gpu_index=number if kind == "gpu" else None,
            )
        )


def _read_tb_row(
    bench: RocmBandwidthBenchmark,
    matrix: RbtMatrix,
    labels: list[tuple[str, int]],
    match: re.Match[str],
    ref: SourceRef,
    result: RocmBandwidthResult,
    line_no: int,
) -> None:
    direction = match.group("dir")
    # Unidirectional rows are "->"; in the bidirectional table the "<->" row is the pair's total.
    if matrix.name == "bidirectional" and direction != "<->":
        sub = "bidirectional_send" if direction == "->" else "bidirectional_receive"
        target = bench.matrices.setdefault(sub, RbtMatrix(name=sub, title=matrix.title, col_ids=list(matrix.col_ids)))
    else:
        target = matrix
    key = (match.group("kind").lower(), int(match.group("num")))
    try:
        row_id = labels.index(key)
    except ValueError:
        result.warnings.append(f"line {line_no}: row {key[0].upper()} {key[1]} is not among the columns")
        return
    cells = [_cell(token) for token in match.group("cells").split()]
    if len(cells) != len(target.col_ids):
        result.warnings.append(
            f"line {line_no}: {len(cells)} cells for {len(target.col_ids)} columns; read what is there"
        )
        cells = (cells + [None] * len(target.col_ids))[: len(target.col_ids)]
    target.row_ids.append(row_id)
    target.values.append(cells)
    target.row_sources.append(ref)


def _finish_devices(bench: RocmBandwidthBenchmark) -> None:
    if bench.variant == "transferbench":
        return
    gpu_number = 0
    for device in sorted(bench.devices, key=lambda item: item.id):
        if device.type == "gpu":
            device.gpu_index = gpu_number
            gpu_number += 1


def _cell(token: str) -> float | int | None:
    if token.upper() == "N/A":
        return None
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return None
