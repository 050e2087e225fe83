"""NVIDIA nvbandwidth output, text and JSON (`-j`).

    nvbandwidth Version: v0.7
    Device 0: NVIDIA A100-SXM4-80GB (00000000:34:00)
    Running device_to_device_memcpy_read_ce.
    memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
              0         1
    0       N/A    276.07
    1    276.19       N/A
    SUM device_to_device_memcpy_read_ce 552.26

JSON (`json_output.cpp`): `{"nvbandwidth": {"version", "git_version", "CUDA Runtime Version",
"Driver Version", "testcases": [{"name", "status", "bandwidth_description",
"bandwidth_matrix": [["N/A", "26.34", ...], ...], "sum", ...}]}}` with cells as strings; log
lines may surround the object. Pastes drop the `Running` line or quote it (`> Running ...`)
and trim the middle with `...`; a test can be `Waiving ...` or stop on an `ASSERT`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.bench_records import NvbandwidthBenchmark, NvbandwidthTestcase
from k3diag.model.source import SourceRef
from k3diag.model.words import shown_number
from k3diag.parse.matrix_labels import damaged_index_warning, gpu_index

START_RE = re.compile(r"^\s*nvbandwidth Version:")
_RUNNING_RE = re.compile(r"^\W*Running (?P<name>\w+)\.?\s*$")
_WAIVING_RE = re.compile(r"^\W*Waiving (?P<name>\w+)\.?\s*$")
_DESC_RE = re.compile(r"^\s*(?P<desc>(?:memcpy|memory latency)\b.*\((?:GB/s|ns|us)\))\s*$")
_SUM_RE = re.compile(r"^\s*SUM (?P<name>\w+) (?P<value>[-\d.eE+]+|N/A)")
_HEADER_RE = re.compile(r"^\s*\d+(?:\s+\d+)*\s*$")
# Each cell ends at a blank or the line's end: with the blank optional (`\s*`), a run of digits could be cut
# into cells in exponentially many ways, and a row with anything after its numbers (a terminal colour code)
# took minutes to refuse (a 500-byte paste: 170 s)
_ROW_LABEL_RE = re.compile(r"^\s*\d+\s+\S")
_ROW_RE = re.compile(r"^\s*(?P<label>\d+)\s+(?P<cells>(?:(?:N/A|-?[\d.]+(?:[eE][-+]?\d+)?)(?:\s+|$))+)$")
_DEVICE_RE = re.compile(r"^\s*Device (?P<idx>\d+):\s*(?P<name>(?:.*?\S)??)(?:\s*\((?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\))?\s*$")
_VERSION_RE = re.compile(r"nvbandwidth Version:\s*(?P<v>\S+)")
_DRIVER_RE = re.compile(r"^\s*Driver Version:\s*(?P<v>\S+)")
_RUNTIME_RE = re.compile(r"CUDA Runtime Version:\s*(?P<v>\S+)")


@dataclass
class NvbandwidthResult:
    benchmarks: list[NvbandwidthBenchmark] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    head = text[:200_000]
    if "nvbandwidth Version" in head or '"nvbandwidth"' in head:
        return 0.95
    if re.search(r"^[^\w\n]*Running \w+_(?:memcpy|copy|latency)\w*\.", head, re.M):
        return 0.9
    if re.search(r"memcpy (?:CE|SM) (?:CPU|GPU)\(row\)", head):
        return 0.85
    if re.search(r"^[^\S\n]*SUM \w+_(?:ce|sm) [\d.]+", head, re.M):
        return 0.8
    return 0.0


def parse(section, input_name: str) -> NvbandwidthResult:
    text = section.text
    if '"nvbandwidth"' in text:
        result = _parse_json(text, input_name)
        if result is not None:
            return result
    return _parse_text(section, input_name)


def _parse_json(text: str, input_name: str) -> NvbandwidthResult | None:
    import json

    start = text.find("{")
    while start >= 0:
        try:
            data, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(data, dict) and isinstance(data.get("nvbandwidth"), dict):
            break
        start = text.find("{", start + 1)
    else:
        return None
    root = data["nvbandwidth"]
    line = text[:start].count("\n") + 1
    result = NvbandwidthResult()
    bench = NvbandwidthBenchmark(input=input_name)
    bench.version = _str(root.get("version"))
    bench.driver_version = _str(root.get("Driver Version"))
    bench.cuda_runtime_version = _str(root.get("CUDA Runtime Version"))
    if root.get("error"):
        bench.errors.append(str(root["error"]))
    testcases = root.get("testcases")
    if not isinstance(testcases, list):
        testcases = []
    for item in testcases:
        if not isinstance(item, dict) or not item.get("name"):
            continue
        name = str(item["name"])
        case = NvbandwidthTestcase(name=name, status=_str(item.get("status")),
                                   description=_str(item.get("bandwidth_description")),
                                   source=SourceRef(input_name, line, f'"name" : "{name}"'))
        matrix = item.get("bandwidth_matrix")
        if isinstance(matrix, list):
            for row in matrix:
                if isinstance(row, list):
                    case.matrix.append([_num(cell) for cell in row])
        case.sum = _num(item.get("sum"))
        if item.get("error"):
            bench.errors.append(f"{name}: {item['error']}")
        bench.testcases[name] = case
    result.benchmarks.append(bench)
    return result


def _parse_text(section, input_name: str) -> NvbandwidthResult:
    result = NvbandwidthResult()
    bench = NvbandwidthBenchmark(input=input_name)
    current: NvbandwidthTestcase | None = None
    unnamed: list[NvbandwidthTestcase] = []
    rows: dict[int, list[float | None]] = {}
    width: int | None = None
    damaged: list[str] = []  # lines whose GPU index is no GPU index (`matrix_labels`)

    def finish_matrix() -> None:
        nonlocal rows, width
        if current is not None and rows:
            n = max(rows) + 1
            current.matrix = [rows.get(i, [None] * (width or 0)) for i in range(n)]
        rows = {}
        width = None

    for offset, raw in enumerate(section.text.split("\n")):
        lineno = section.first_line + offset
        line = raw.rstrip()
        if not line.strip():
            continue
        match = _VERSION_RE.search(line)
        if match:
            bench.version = match.group("v")
            continue
        match = _RUNTIME_RE.search(line)
        if match:
            bench.cuda_runtime_version = match.group("v")
            continue
        match = _DRIVER_RE.match(line)
        if match:
            bench.driver_version = match.group("v")
            continue
        match = _DEVICE_RE.match(line)
        if match and not line.lstrip().startswith("Device=") and "Version" not in line:
            bus = match.group("bus")
            if gpu_index(match.group("idx")) is None:
                damaged.append(f"line {lineno}: device {shown_number(match.group('idx'))}")
                continue
            bench.devices.append({"index": int(match.group("idx")), "name": match.group("name") or None,
                                  "bus_id": _bdf(bus) if bus else None})
            continue
        match = _RUNNING_RE.match(line)
        if match:
            finish_matrix()
            name = match.group("name")
            current = bench.testcases.setdefault(name, NvbandwidthTestcase(name=name, source=SourceRef(input_name, lineno, line)))
            current.status = "Running"
            continue
        match = _WAIVING_RE.match(line)
        if match:
            finish_matrix()
            name = match.group("name")
            bench.testcases[name] = NvbandwidthTestcase(name=name, status="Waived", source=SourceRef(input_name, lineno, line))
            current = None
            continue
        match = _DESC_RE.match(line)
        if match:
            if current is None or current.matrix or rows or current.description:
                finish_matrix()
                # a matrix without its `Running` line (trimmed paste): named by the SUM line after it
                current = NvbandwidthTestcase(name="", source=SourceRef(input_name, lineno, line))
                unnamed.append(current)
            current.description = match.group("desc")
            continue
        match = _SUM_RE.match(line)
        if match:
            finish_matrix()
            name = match.group("name")
            if current is not None and not current.name:
                current.name = name
                unnamed.remove(current)
                bench.testcases[name] = current
            case = bench.testcases.setdefault(name, NvbandwidthTestcase(name=name))
            case.sum = _num(match.group("value"))
            if case.status in (None, "Running"):
                case.status = "Passed"
            current = None
            continue
        if line.strip().startswith("ASSERT") or "Invalid value when checking" in line:
            bench.errors.append(f"line {lineno}: {line.strip()}")
            if current is not None:
                current.status = "Error"
            continue
        if current is None:
            continue
        if _HEADER_RE.match(line) and width is None and not rows:
            width = len(line.split())
            continue
        match = _ROW_RE.match(line)
        if match is None and width is not None and _ROW_LABEL_RE.match(line):
            # a row with something that is no value in it (a colour code's remains, a glued word): its
            # values are not known, and said, rather than the matrix losing a row in silence
            shown = line.strip()
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            result.warnings.append(f"line {lineno}: a row of {current.name or 'a matrix'} holds something that is "
                                   f"not a value ({shown!r}); that row is not read")
            continue
        if match:
            cells = [_num(c) for c in match.group("cells").split()]
            if width is not None and len(cells) != width:
                result.warnings.append(f"line {lineno}: {len(cells)} values for {width} columns in {current.name or 'a matrix'}")
                cells = (cells + [None] * width)[:width]
            label = gpu_index(match.group("label"))
            if label is None:
                damaged.append(f"line {lineno}: row {shown_number(match.group('label'))}")
                continue
            rows[label] = cells
    finish_matrix()
    for index, case in enumerate(unnamed):
        name = f"unnamed_{index}"
        case.name = name
        bench.testcases[name] = case
        result.warnings.append(f"a matrix ({case.description}) has no test name (its Running/SUM lines are missing)")
    warning = damaged_index_warning(damaged)
    if warning:
        result.warnings.append(warning)
    if bench.testcases or bench.devices or bench.version:
        result.benchmarks.append(bench)
    else:
        result.warnings.append("no nvbandwidth test case found")
    return result


def _num(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if text.upper() == "N/A" or not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _str(value) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def _bdf(text: str) -> str:
    parts = text.lower().split(":")
    domain, bus, rest = parts[0], parts[1], parts[2]
    dev, _, fn = rest.partition(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn or '0'}"
