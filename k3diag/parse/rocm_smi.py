"""`rocm-smi --showtopo` (and its parts `--showtopoweight/-hops/-type/-access/-numa`).

The output is a banner, then one block per section, each headed by a line of `=` with the
section title in it:

    ============================ ROCm System Management Interface ============================
    ================================ Weight between two GPUs =================================
           GPU0         GPU1
    GPU0   0            15
    ...
    ======================================= Numa Nodes =======================================
    GPU[0]\t\t: (Topology) Numa Node: 0
    GPU[0]\t\t: (Topology) Numa Affinity: 0
    ================================== End of ROCm SMI Log ===================================

Matrix cells are padded to 13 columns (trailing spaces on older releases); the self cell is
`0`; pasted copies collapse the padding to single spaces or lose the banner. NUMA lines are
separated by tabs or by spaces. A `WARNING:` line may follow the banner (low-power state).
"""

from __future__ import annotations

import re

from k3diag.model.amd_records import AmdTopology, normalize_link_type
from k3diag.model.source import SourceRef
from k3diag.parse.lazy_re import lazy
from k3diag.parse.text import Section, normalize, prompt_command

FORMAT = "rocm-smi-showtopo"

START_RE = lazy(r"^\s*=+\s*ROCm System Management Interface\s*=+\s*$")
# The title from its first to its last character that is neither a blank nor `=` (a lazy title before `\s*=+`
# was quadratic in blanks inside it: 20,000 took seconds). The opening bar is taken whole, as a look-ahead's
# group matched again (Python 3.10 has no atomic groups), so the closing bar can never take part of it: 20,000
# `=` and then a word, no title, were quadratic too. A line of bars alone is a title line with no name
# (`_is_bar`), as the pattern read it when its opening bar could give the closing one its last `=`.
_TITLE_RE = lazy(r"^\s*(?=(?P<bar>=+))(?P=bar)\s*(?P<title>(?:[^=\s](?:[^=]*[^=\s])?)?)\s*=+\s*$")


def _is_bar(line: str) -> bool:
    """Whether a line is two or more `=` between blanks alone (an opening and a closing bar)."""
    stripped = line.strip()
    return len(stripped) >= 2 and not stripped.strip("=")
_GPU_LABEL_RE = lazy(r"^GPU(\d+)$")
_NUMA_RE = lazy(
    r"^\s*GPU\[(?P<gpu>\d+)\]\s*:\s*\(Topology\)\s*Numa\s+(?P<kind>Node|Affinity)\s*:\s*(?P<value>\S+)", re.I
)
_WARNING_RE = lazy(r"^\s*WARNING:", re.I)

# Section titles (lower case) -> which fact the matrix holds.
_SECTIONS: dict[str, str] = {
    "weight between two gpus": "weight",
    "hops between two gpus": "hops",
    "link type between two gpus": "link_type",
    "link accessibility between two gpus": "access",
    "numa nodes": "numa",
}
_SNIFF_RE = lazy(
    r"(Weight|Hops|Link Type|Link accessibility) between two GPUs|\(Topology\)\s*Numa (Node|Affinity)", re.I
)


def sniff(text: str) -> float:
    head = text[:200_000]
    if _SNIFF_RE.search(head):
        if _starts_inside_a_matrix(head):
            # A piece cut out of a longer output (another format's start pattern matched a
            # `GPU0 GPU1` header line): stay below the detection threshold so the piece is
            # glued back to the output it belongs to.
            return 0.4
        return 0.95
    if START_RE.search(head) or "End of ROCm SMI Log" in head:
        # rocm-smi, but not a topology section: not ours to parse.
        return 0.2
    return 0.0


def _starts_inside_a_matrix(text: str) -> bool:
    for line in text.split("\n"):
        if not line.strip() or prompt_command(line) is not None:
            continue
        first = line.split()[0]
        return bool(_GPU_LABEL_RE.match(first))
    return False


def parse(section: Section, input_name: str) -> AmdTopology:
    result = AmdTopology(tool=FORMAT)
    lines = normalize(section.text).split("\n")
    kind: str | None = None
    columns: list[int] = []
    for offset, raw in enumerate(lines):
        line_no = section.first_line + offset
        line = raw.rstrip()
        if not line.strip():
            continue
        bar = _is_bar(line)
        title = None if bar else _TITLE_RE.match(line)
        if bar or title:
            name = title.group("title").strip() if title else ""
            kind = _SECTIONS.get(name.lower())
            columns = []
            if kind is not None:
                result.tables.append(name)
            continue
        if _WARNING_RE.match(line):
            result.tool_messages.append(SourceRef(input_name, line_no, line))
            continue
        numa = _NUMA_RE.match(line)
        if numa:
            _read_numa(result, numa, SourceRef(input_name, line_no, line))
            continue
        if kind == "numa" and line.lstrip().startswith("GPU["):
            result.warnings.append(f"line {line_no}: NUMA line not understood (cut short?): {line.strip()[:80]!r}")
            continue
        if kind is None or kind == "numa":
            continue
        if not any(ch.isalnum() for ch in line):
            # A separator a user added under a pasted block (`*****`, `-----`) ends the section.
            kind = None
            continue
        tokens = line.split()
        if all(_GPU_LABEL_RE.match(token) for token in tokens):
            columns = [int(_GPU_LABEL_RE.match(token).group(1)) for token in tokens]  # type: ignore[union-attr]
            for index in columns:
                result.gpu_by_index(index)
            continue
        row = _GPU_LABEL_RE.match(tokens[0])
        if row is None:
            result.warnings.append(f"line {line_no}: not a row of the {kind} matrix: {line.strip()[:80]!r}")
            continue
        if not columns:
            result.warnings.append(f"line {line_no}: a {kind} row before the GPU header line; skipped")
            continue
        src = int(row.group(1))
        result.gpu_by_index(src)
        cells = tokens[1:]
        if len(cells) != len(columns):
            result.warnings.append(
                f"line {line_no}: GPU{src} has {len(cells)} cells for {len(columns)} columns; "
                "read the cells that are there, the rest are unknown"
            )
        ref = SourceRef(input_name, line_no, line)
        for dst, cell in zip(columns, cells):
            if dst == src:
                continue
            _read_cell(result, kind, src, dst, cell, ref, line_no)
    if not result.pairs and not any(gpu.numa_node is not None for gpu in result.gpus):
        if result.gpus:
            result.warnings.append("only one GPU is listed, so there are no GPU pairs to read")
        else:
            result.warnings.append("no topology section (weight, hops, link type, NUMA) was found")
    return result


def _read_cell(result: AmdTopology, kind: str, src: int, dst: int, cell: str, ref: SourceRef, line_no: int) -> None:
    pair = result.pair(src_index=src, dst_index=dst)
    value = cell.strip()
    if kind in ("weight", "hops"):
        number = _int_or_none(value)
        if number is None and value.upper() != "N/A":
            result.warnings.append(f"line {line_no}: {kind} GPU{src}->GPU{dst} is {value!r}, not a number")
        setattr(pair, kind, number)
        pair.sources[kind] = ref
    elif kind == "link_type":
        pair.link_type_raw = value
        pair.link_type = normalize_link_type(value)
        if pair.link_type is None and value.upper() not in ("N/A", "0", "UNKNOWN"):
            result.warnings.append(f"line {line_no}: link type GPU{src}->GPU{dst} {value!r} is not XGMI or PCIE")
        pair.sources["link_type"] = ref
    elif kind == "access":
        lowered = value.lower()
        pair.accessible = True if lowered == "true" else False if lowered == "false" else None
        pair.sources["accessible"] = ref


def _read_numa(result: AmdTopology, match: re.Match[str], ref: SourceRef) -> None:
    gpu = result.gpu_by_index(int(match.group("gpu")))
    value = _int_or_none(match.group("value"))
    # -1 is how the kernel says "no NUMA affinity" (single node, or a VM).
    if value is not None and value < 0:
        value = None
    if match.group("kind").lower() == "node":
        gpu.numa_node = value
        gpu.source = gpu.source or ref
    else:
        gpu.numa_affinity = value
        if gpu.source is None:
            gpu.source = ref
    if "numa nodes" not in (name.lower() for name in result.tables):
        result.tables.append("Numa Nodes")


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
