"""`amd-smi topology`: the text tables and `--json`, across the amd-smi versions in use.

Text (ROCm 6.1 and later): one table per fact, rows and columns labelled by PCI bus id,
cells left aligned in 13 columns, a blank line between tables on 6.x and none on 7.x/26.x,
and a legend at the end on newer releases:

    ACCESS TABLE:
                 0000:03:00.0 0000:0c:00.0
    0000:03:00.0 ENABLED      DISABLED
    ...
    NUMA BW TABLE:            (cells "<min>-<max>", N/A off XGMI)
    CACHE COHERANCY TABLE:    (sic on amd-smi 26.x; later "COHERENCY")

JSON has had two shapes (both read here):
  ROCm 6.0/6.1   [{"gpu": 0, "link_accessibility": {"gpu_0": "ENABLED", ...}, "weight": {...},
                   "hops": {...}, "link_type": {...}, "numa_bandwidth": {...}}]
  ROCm 6.2+      [{"gpu": 0, "bdf": "...", "links": [{"gpu": 1, "bdf": "...", "weight": 15,
                   "link_status": "ENABLED", "link_type": "XGMI", "num_hops": 1,
                   "bandwidth": "50000-100000", "coherent": "C", "atomics": "64,32", ...}]}]
and newer releases may wrap the list in an object (`{"gpu_data": [...]}`). The very first
releases printed booleans for accessibility and "XMGI" for XGMI. Documentation copies carry
trailing commas and `...` lines; those are tolerated.
"""

from __future__ import annotations

import json
import re
from typing import Any

from k3diag.model.amd_records import (
    AmdGpuFact,
    AmdPairFact,
    AmdTopology,
    drop_placeholder_values,
    normalize_link_type,
)
from k3diag.model.source import SourceRef
from k3diag.parse.ids import is_bdf, normalize_bdf
from k3diag.parse.lazy_re import lazy
from k3diag.parse.text import Section, normalize, prompt_command

FORMAT = "amd-smi-topology"

# Only the first table starts an output; splitting at every table would tear one output apart.
START_RE = lazy(r"^ACCESS TABLE:\s*$")
_TABLE_RE = lazy(r"^\s*(?P<title>[A-Z](?:[A-Z /-]*[A-Z/-])?)\s+TABLE:\s*$")
_SNIFF_TEXT_RE = lazy(r"^[^\S\n]*(ACCESS|WEIGHT|HOPS|LINK TYPE|NUMA BW)\s+TABLE:\s*$", re.M)
_SNIFF_JSON_RE = lazy(r'"(link_accessibility|link_type|num_hops|link_status|numa_bandwidth)"\s*:')
_BW_RE = lazy(r"^(\d+)\s*-\s*(\d+)$")
_GPU_KEY_RE = lazy(r"^gpu_(\d+)$")

# Table title -> AmdPairFact field.
_TABLES: dict[str, str] = {
    "ACCESS": "accessible",
    "WEIGHT": "weight",
    "HOPS": "hops",
    "LINK TYPE": "link_type",
    "NUMA BW": "bandwidth",
    "CACHE COHERANCY": "coherent",
    "CACHE COHERENCY": "coherent",
    "ATOMICS": "atomics",
    "DMA": "dma",
    "BI-DIRECTIONAL": "bi_directional",
}
# Keys of the ROCm 6.0/6.1 JSON -> AmdPairFact field.
_LEGACY_KEYS: dict[str, str] = {
    "link_accessibility": "accessible",
    "weight": "weight",
    "hops": "hops",
    "link_type": "link_type",
    "numa_bandwidth": "bandwidth",
    "coherent": "coherent",
    "atomics": "atomics",
    "dma": "dma",
    "bi_dir": "bi_directional",
}
# Keys of one link in the 6.2+ JSON -> AmdPairFact field.
_LINK_KEYS: dict[str, str] = {
    "link_status": "accessible",
    "weight": "weight",
    "num_hops": "hops",
    "link_type": "link_type",
    "bandwidth": "bandwidth",
    "coherent": "coherent",
    "atomics": "atomics",
    "dma": "dma",
    "bi_dir": "bi_directional",
}


def sniff(text: str) -> float:
    head = text[:200_000]
    if _SNIFF_TEXT_RE.search(head) and re.search(r"^[^\S\n]*[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d", head, re.M):
        return 0.95
    if _SNIFF_TEXT_RE.search(head):
        return 0.7
    if _SNIFF_JSON_RE.search(head) and re.search(r'"gpu"\s*:', head) and _json_start(head.split("\n")) is not None:
        return 0.95
    return 0.0


def parse(section: Section, input_name: str) -> AmdTopology:
    text = normalize(section.text)
    lines = text.split("\n")
    start = _json_start(lines)
    if start is not None and not _SNIFF_TEXT_RE.search(text):
        result = _parse_json(lines, start, section.first_line, input_name)
    else:
        result = _parse_text(lines, section.first_line, input_name)
    drop_placeholder_values(result)
    return result


# -- text tables ---------------------------------------------------------------------------


def _parse_text(lines: list[str], first_line: int, input_name: str) -> AmdTopology:
    result = AmdTopology(tool=FORMAT)
    field: str | None = None
    title: str | None = None
    columns: list[str] = []
    for offset, raw in enumerate(lines):
        line_no = first_line + offset
        line = raw.rstrip()
        if not line.strip():
            continue
        table = _TABLE_RE.match(line)
        if table:
            title = table.group("title").strip()
            field = _TABLES.get(title.upper())
            columns = []
            result.tables.append(title)
            if field is None:
                result.warnings.append(f"line {line_no}: table {title!r} is not one k3diag reads; skipped")
            continue
        if line.strip().startswith("Legend:"):
            field = None
            continue
        if field is None:
            continue
        tokens = line.split()
        if all(is_bdf(token) for token in tokens):
            columns = [normalize_bdf(token) for token in tokens]
            for bus in columns:
                result.gpu_by_bus(bus)
            continue
        if not is_bdf(tokens[0]):
            result.warnings.append(f"line {line_no}: not a row of the {title} table: {line.strip()[:80]!r}")
            continue
        if not columns:
            result.warnings.append(f"line {line_no}: a {title} row before its header line; skipped")
            continue
        src = normalize_bdf(tokens[0])
        result.gpu_by_bus(src)
        cells = tokens[1:]
        if len(cells) != len(columns):
            result.warnings.append(
                f"line {line_no}: {src} has {len(cells)} cells for {len(columns)} columns in the {title} table; "
                "read the cells that are there"
            )
        ref = SourceRef(input_name, line_no, line)
        for dst, cell in zip(columns, cells):
            if dst == src:
                continue
            pair = result.pair(src_bus_id=src, dst_bus_id=dst)
            _set_field(result, pair, field, cell, ref, f"line {line_no}")
    if not result.tables:
        result.warnings.append("no amd-smi topology table was found")
    return result


# -- JSON ----------------------------------------------------------------------------------


def _json_start(lines: list[str]) -> int | None:
    """Index of the line where the JSON document begins (after prompt lines and blank lines)."""
    for index, line in enumerate(lines[:50]):
        stripped = line.strip()
        if not stripped or prompt_command(line) is not None:
            continue
        if stripped.startswith(("[", "{")):
            return index
        if index > 10:
            return None
    return None


def _load_json(text: str, first_line: int = 1) -> tuple[Any, str | None]:
    """The JSON value at the start of `text` (line `first_line` of the file), tolerating trailing commas and
    `...` lines; a problem names the file's line, not the document's."""
    decoder = json.JSONDecoder()
    stripped = text.lstrip()
    first_line += text[: len(text) - len(stripped)].count("\n")
    try:
        value, _ = decoder.raw_decode(stripped)
        return value, None
    except json.JSONDecodeError as exc:
        first_error = exc
    cleaned = "\n".join(line for line in text.split("\n") if line.strip() not in ("...", "…"))
    cleaned = re.sub(r",(\s*[\]}])", r"\1", cleaned)
    try:
        value, _ = decoder.raw_decode(cleaned.lstrip())
        return value, "the JSON had trailing commas or `...` lines (a documentation copy?); read it leniently"
    except json.JSONDecodeError:
        return None, f"not valid JSON: {first_error.msg} at line {first_line + first_error.lineno - 1}"


def _gpu_entries(value: Any) -> list[dict]:
    """The per-GPU objects, wherever a release put them."""
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    if isinstance(value, dict):
        if "gpu" in value and ("links" in value or "link_type" in value):
            return [value]
        for item in value.values():
            if isinstance(item, list) and any(isinstance(x, dict) and "gpu" in x for x in item):
                return [x for x in item if isinstance(x, dict)]
    return []


class _LineFinder:
    """Finds, in order, the line of each `"key":` a pretty-printed document holds, so facts from
    JSON can cite a line. Compact JSON (one line) cites its first line."""

    def __init__(self, lines: list[str], start: int, first_line: int, input_name: str) -> None:
        self.lines = lines
        self.first_line = first_line
        self.input_name = input_name
        self.fallback = start
        self.cursors: dict[str, int] = {}

    def next(self, key: str, after: int | None = None) -> SourceRef:
        pattern = re.compile(r'"' + re.escape(key) + r'"\s*:')
        position = max(self.cursors.get(key, self.fallback), after or 0)
        for index in range(position, len(self.lines)):
            if pattern.search(self.lines[index]):
                self.cursors[key] = index + 1
                return self.ref(index)
        return self.ref(self.fallback)

    def ref(self, index: int) -> SourceRef:
        return SourceRef(self.input_name, self.first_line + index, self.lines[index].rstrip())


def _parse_json(lines: list[str], start: int, first_line: int, input_name: str) -> AmdTopology:
    result = AmdTopology(tool=FORMAT)
    value, problem = _load_json("\n".join(lines[start:]), first_line + start)
    if problem:
        result.warnings.append(problem)
    entries = _gpu_entries(value)
    if not entries:
        if value is not None:
            result.warnings.append("the JSON holds no per-GPU topology objects (no \"gpu\" with links)")
        return result
    finder = _LineFinder(lines, start, first_line, input_name)
    for entry in entries:
        src_index = _as_int(entry.get("gpu"))
        src_bus = _as_bdf(entry.get("bdf"))
        gpu_ref = finder.next("gpu")
        gpu = _gpu_fact(result, src_index, src_bus)
        gpu.source = gpu.source or gpu_ref
        if isinstance(entry.get("links"), list):
            if "links" not in result.tables:
                result.tables.append("links")
            _read_links(result, entry["links"], src_index, src_bus, finder)
        else:
            _read_legacy(result, entry, src_index, finder)
    return result


def _read_links(
    result: AmdTopology, links: list, src_index: int | None, src_bus: str | None, finder: _LineFinder
) -> None:
    for link in links:
        if not isinstance(link, dict):
            continue
        dst_index = _as_int(link.get("gpu"))
        dst_bus = _as_bdf(link.get("bdf"))
        _gpu_fact(result, dst_index, dst_bus)
        anchor = finder.next("gpu")
        refs = {key: finder.next(key, after=anchor.line - finder.first_line if anchor.line else None)
                for key in _LINK_KEYS if key in link}
        if (dst_index is not None and dst_index == src_index) or (dst_bus is not None and dst_bus == src_bus):
            continue
        pair = result.pair(src_index=src_index, dst_index=dst_index, src_bus_id=src_bus, dst_bus_id=dst_bus)
        for key, field in _LINK_KEYS.items():
            if key in link:
                _set_field(result, pair, field, link[key], refs[key], f"gpu {src_index} link to gpu {dst_index}")


def _read_legacy(result: AmdTopology, entry: dict, src_index: int | None, finder: _LineFinder) -> None:
    for key, field in _LEGACY_KEYS.items():
        block = entry.get(key)
        if not isinstance(block, dict):
            continue
        if key not in result.tables:
            result.tables.append(key)
        block_ref = finder.next(key)
        after = block_ref.line - finder.first_line if block_ref.line else None
        for dst_key, cell in block.items():
            match = _GPU_KEY_RE.match(str(dst_key))
            if not match:
                continue
            dst_index = int(match.group(1))
            result.gpu_by_index(dst_index)
            ref = finder.next(str(dst_key), after=after)
            after = (ref.line - finder.first_line + 1) if ref.line else after
            if dst_index == src_index:
                continue
            pair = result.pair(src_index=src_index, dst_index=dst_index)
            _set_field(result, pair, field, cell, ref, f"gpu {src_index} {key} gpu_{dst_index}")


# -- cells ---------------------------------------------------------------------------------


def _set_field(result: AmdTopology, pair: AmdPairFact, field: str, cell: Any, ref: SourceRef, where: str) -> None:
    text = "" if cell is None else str(cell).strip()
    if field == "accessible":
        if isinstance(cell, bool):
            pair.accessible = cell
        elif text.upper() in ("ENABLED", "TRUE"):
            pair.accessible = True
        elif text.upper() in ("DISABLED", "FALSE"):
            pair.accessible = False
        else:
            pair.accessible = None
    elif field in ("weight", "hops"):
        number = _as_int(cell)
        if number is None and text.upper() not in ("N/A", ""):
            result.warnings.append(f"{where}: {field} {text!r} is not a number")
        setattr(pair, field, number)
    elif field == "link_type":
        pair.link_type_raw = text
        pair.link_type = normalize_link_type(text)
        if pair.link_type is None and text.upper() not in ("N/A", "SELF", "UNKNOWN", ""):
            result.warnings.append(f"{where}: link type {text!r} is not XGMI or PCIE")
    elif field == "bandwidth":
        match = _BW_RE.match(text)
        if match:
            pair.bandwidth_min, pair.bandwidth_max = int(match.group(1)), int(match.group(2))
        elif text.upper() not in ("N/A", ""):
            result.warnings.append(f"{where}: NUMA bandwidth {text!r} is not <min>-<max>")
    else:
        setattr(pair, field, None if text.upper() in ("N/A", "") else text)
    pair.sources[field] = ref


def _gpu_fact(result: AmdTopology, index: int | None, bus: str | None) -> AmdGpuFact:
    if bus is not None:
        gpu = result.gpu_by_bus(bus)
        if gpu.index is None:
            gpu.index = index
        return gpu
    if index is not None:
        return result.gpu_by_index(index)
    return AmdGpuFact()  # neither id nor bus id: nothing to attach facts to


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _as_bdf(value: Any) -> str | None:
    if isinstance(value, str) and is_bdf(value):
        return normalize_bdf(value)
    return None
