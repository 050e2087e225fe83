"""`nvidia-smi topo -m`: the GPU/NIC path matrix, affinities and legends, as users paste it.

What real pastes look like (see fixtures/nvidia/SOURCES.md): tab separated or spaces, the
header's leading tab lost or the header glued to the command line, rows indented, NIC
columns or NIC rows only, `NIC Legend:`, `CPU Affinity` alone on old drivers, `NUMA
Affinity` and `GPU NUMA ID` (N/A after a double tab) on new ones, ANSI underline on the
header, CRLF, lines cut at the terminal width, legends wrapped or missing, the very old
legend (`SOC`, "Path traverses") and the "switches" one.

Cells are split on runs of whitespace: every value nvidia-smi prints is one token, so tabs
and spaces read the same and a pasted tab that became spaces changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from sys import intern

from k3diag.model.source import SourceRef
from k3diag.parse.lazy_re import lazy
from k3diag.parse.text import Section, normalize, unquote_reply  # noqa: F401  (unquote_reply: lspci's import)
from k3diag.model.words import counted

# A line that begins a `topo -m` (or `topo -p2p`, which prints the same header) output: the
# header row, possibly glued to the command line that printed it.
START_RE = lazy(
    r"^\s*(?:.*\bnvidia-smi(?:\.exe)?\s+topo\s+\S+\s+)?GPU0\s*(?:GPU1|NIC0|mlx\d+_\d+|CPU\s+Affinity)\b"
)
# A header whose tabs were lost in the paste: `GPU0GPU1GPU2...mlx5_0\tCPU Affinity` (rows keep theirs).
_GLUED_RE = lazy(r"GPU\d+(?=GPU|NIC|mlx|CPU|NUMA)|(?:NIC\d+|mlx\d+_\d+)(?=GPU|NIC|mlx|CPU|NUMA)|Affinity(?=\S)")
_GLUE_POINT_RE = lazy(r"(?<=[0-9])(?=(?:GPU|NIC|mlx|CPU|NUMA))|(?<=Affinity)(?=\S)")


def unglue_header(line: str) -> str:
    """Put back the separators a paste dropped between header names; rows and other lines are unchanged."""
    if "GPU0" not in line or _GLUED_RE.search(line) is None:
        return line
    return _GLUE_POINT_RE.sub(" ", line)

TOPOLOGY_CODES = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "PSB"})
P2P_CODES = frozenset({"OK", "CNS", "GNS", "TNS", "NS", "U", "DR"})
_NV_RE = lazy(r"^NV\d+$")
# Uppercase codes a future driver might add; taken as cells (with a warning), never as affinities.
_CODE_LIKE_RE = lazy(r"^[A-Z][A-Z0-9#]{0,5}$")
# Two or more cells run together where a paste lost the tab between them (`SYSSYS` under NIC14 and NIC15
# of an 8x B200 matrix); split only when the parts fill cells the row would otherwise lack.
_GLUED_CELLS_RE = lazy(r"^(?:SYS|NODE|PHB|PXB|PIX|PSB|SOC|NV\d+?(?=NV|SYS|NODE|PHB|PXB|PIX|PSB|SOC|$)){2,}$")
_GLUED_CELL_PART_RE = lazy(r"SYS|NODE|PHB|PXB|PIX|PSB|SOC|NV\d+?(?=NV|SYS|NODE|PHB|PXB|PIX|PSB|SOC|$)")
_GPU_RE = lazy(r"^GPU(\d+)$")
_NIC_RE = lazy(r"^NIC\d+$")
_ENDPOINT_RE = lazy(r"^(?:GPU\d+|NIC\d+|[A-Za-z][\w.:-]*\d)$")
_CPULIST_RE = lazy(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
_LEGEND_ENTRY_RE = lazy(r"^\s*(X|[A-Z][A-Z0-9#]*)\s*=\s*((?:.*\S)?)\s*$")
_NIC_LEGEND_RE = lazy(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_SHELLISH_RE = lazy(r"^\s*(?:\([^)]*\)\s*)?(?:[\w.-]+@[\w.-]+|[$#>%]\s)")
TRAILING_LABELS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# What people type where they cut a header short (`GPU0  GPU1  GPU2  ...` above an 8-GPU `topo -p2p n`).
ELISION_MARKS = frozenset({"...", "\u2026", "[...]"})


def elided_header(line: str) -> bool:
    return any(token in ELISION_MARKS for token in line.split())
# A pasted matrix may hold a stray line ("[...]"); more than this and the matrix is over.
MAX_SKIPPED_LINES = 3


# slotted, and each cell's code one shared string (`sys.intern`): a file of 10,000 `topo -m` outputs holds every
# section's cells until its machines are built (about 90 cells an 8-GPU section: 24 KB a section before, 13.6 KB)
@dataclass(slots=True)
class MatrixCell:
    row: str
    col: str
    value: str | None  # as printed; None when blank, N/A or cut off
    source: SourceRef


@dataclass(slots=True)
class EndpointRow:
    """One row of the matrix: a GPU or NIC and what its trailing columns say."""

    name: str
    cpu_affinity: str | None = None  # as printed ("0-31,64-95")
    numa_affinity: str | None = None  # as printed ("0", "N/A")
    numa_node: int | None = None  # numa_affinity when it is one node
    gpu_numa_id: int | None = None
    source: SourceRef | None = None

    @property
    def gpu_index(self) -> int | None:
        match = _GPU_RE.match(self.name)
        return int(match.group(1)) if match else None


@dataclass
class TopoMatrixResult:
    columns: list[str] = field(default_factory=list)  # header order
    trailing_labels: list[str] = field(default_factory=list)  # CPU Affinity, NUMA Affinity, GPU NUMA ID present
    rows: dict[str, EndpointRow] = field(default_factory=dict)
    cells: list[MatrixCell] = field(default_factory=list)
    nic_legend: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0
    legend: dict[str, str] = field(default_factory=dict)  # code -> meaning as printed
    legend_style: str | None = None  # "bridges" (current) | "switches" | "old" | None when absent
    # `nvidia-smi topo -mp` prints PCIe paths only and hides NVLink by design: True when the command says
    # so or a current legend has no `NV#` line (topo -m always prints it), None when nothing tells.
    pcie_only: bool | None = None
    header_source: SourceRef | None = None
    # The header lists the GPUs cut short in the paste (`GPU0  GPU1  GPU2  ...`): the machine has at least
    # these GPUs, and how many more is unknown.
    gpu_list_cut: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def endpoints(self) -> list[str]:
        """Every endpoint named by a column or a row, in the order met."""
        names = list(self.columns)
        names.extend(name for name in self.rows if name not in names)
        return names

    def cell(self, row: str, col: str) -> str | None:
        for cell in self.cells:
            if cell.row == row and cell.col == col:
                return cell.value
        return None


@dataclass(frozen=True)
class MatrixHeader:
    line_index: int
    columns: list[str]
    trailing_labels: list[str]


def is_cell_token(token: str) -> bool:
    if _GPU_RE.match(token) or _NIC_RE.match(token):
        return False
    return token == "X" or token == "N/A" or bool(_NV_RE.match(token)) or bool(_CODE_LIKE_RE.match(token))


def find_header(lines: list[str], start: int = 0) -> MatrixHeader | None:
    """The first matrix header at or after `start`: GPU0 followed by endpoint names, not cells."""
    for index in range(start, len(lines)):
        header = parse_header_line(lines[index])
        if header is not None:
            columns, labels = header
            return MatrixHeader(index, columns, labels)
    return None


def parse_header_line(line: str) -> tuple[list[str], list[str]] | None:
    line = unglue_header(line)
    match = re.search(r"(?<!\S)GPU0(?!\S)", line)
    if match is None:
        return None
    prefix = line[: match.start()]
    # A row's first cell is its own name; a header has only whitespace (or the command that
    # printed it, when the newline was lost in the paste) before GPU0.
    if prefix.strip() and "nvidia-smi" not in prefix:
        return None
    tokens = line[match.start():].split()
    columns: list[str] = []
    position = 0
    while position < len(tokens):
        token = tokens[position]
        if token in ("CPU", "NUMA") or (token == "GPU" and tokens[position + 1 : position + 2] == ["NUMA"]):
            break
        if token in ELISION_MARKS and len(columns) > 1:
            break  # `GPU0  GPU1  GPU2  ...`: the author cut the columns; the rows are cut to match
        if not _ENDPOINT_RE.match(token) or is_cell_token(token):
            return None
        columns.append(token)
        position += 1
    rest = " ".join(tokens[position:])
    labels = [label for label in TRAILING_LABELS if label in rest]
    if len(columns) == 1 and not labels and len(tokens) > 1:
        return None
    return columns, labels


def looks_like_cpulist(value: str) -> bool:
    return bool(_CPULIST_RE.match(value))


def bare_command(lines: list[str]) -> str | None:
    """The command when a paste starts with it on a line of its own, without a shell prompt."""
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(("nvidia-smi ", "nvidia-smi.exe ")):
            return stripped
        return None
    return None


def sniff(text: str) -> float:
    lines, _ = unquote_reply(normalize(text[:100_000]).split("\n")[:400])
    header = find_header(lines)
    if header is None:
        return 0.0
    topology = p2p = rows = 0
    for line in lines[header.line_index + 1 :]:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].startswith("Legend"):
            break
        if not _ENDPOINT_RE.match(tokens[0]):
            continue
        rows += 1
        for token in tokens[1:]:
            if token in TOPOLOGY_CODES or _NV_RE.match(token):
                topology += 1
            elif token in P2P_CODES:
                p2p += 1
    joined = "\n".join(lines)
    score = 0.2 if rows else 0.05
    if topology and topology >= p2p:
        score += 0.5
    elif p2p:
        return 0.1
    if header.trailing_labels:
        score += 0.3
    if "Connection traversing" in joined or "Path traverses" in joined or "NIC Legend" in joined:
        score += 0.2
    return min(score, 1.0)


def parse(section: Section, input_name: str) -> TopoMatrixResult:
    result = TopoMatrixResult()
    raw_lines = normalize(section.text).split("\n")
    lines, quoted = unquote_reply(raw_lines)
    if quoted:
        result.warnings.append("the output was quoted in a reply (`> ` before each line); read without the marks")

    def ref(index: int) -> SourceRef:
        return SourceRef(input_name, section.first_line + index, raw_lines[index].rstrip())

    header = find_header(lines)
    if header is None:
        result.warnings.append(
            f"{input_name}: no `nvidia-smi topo -m` header (a line starting with GPU0 GPU1 ...) was found"
        )
        _parse_legends(lines, 0, result, ref)
        return result
    result.columns = header.columns
    result.trailing_labels = header.trailing_labels
    result.header_source = ref(header.line_index)
    if elided_header(lines[header.line_index]):
        result.gpu_list_cut = True
        result.warnings.append(
            f"line {section.first_line + header.line_index}: the header was cut short in the paste (`...` after "
            f"{header.columns[-1]}); the paths to the columns left out are unknown")
    if unglue_header(lines[header.line_index]) != lines[header.line_index]:
        result.warnings.append(
            f"line {section.first_line + header.line_index}: the header's separators were lost in the paste "
            f"(`{' '.join(lines[header.line_index].split())[:40]}...`); read as {' '.join(header.columns)}")

    index = header.line_index + 1
    skipped = 0
    short_rows: list[tuple] = []  # rows with fewer trailing values than labels, placed once all are read
    trailing_starts: list[int] = []  # where the first trailing value of each full row starts
    while index < len(lines):
        line = lines[index]
        tokens = line.split()
        if not tokens:
            index += 1
            continue
        if tokens[0].startswith("Legend") or tokens[0] == "NIC" or _LEGEND_ENTRY_RE.match(line):
            break
        if parse_header_line(line) is not None:
            break  # a second output pasted right after this one
        if not _ENDPOINT_RE.match(tokens[0]):
            skipped += 1
            if skipped > MAX_SKIPPED_LINES:
                break  # the matrix ended without a legend; what follows is something else
            result.warnings.append(f"line {section.first_line + index}: not a matrix row, skipped: {line.strip()[:60]!r}")
            index += 1
            continue
        _parse_row(tokens, index, result, ref, section.first_line, (line, short_rows, trailing_starts))
        index += 1
    _place_short_rows(result, short_rows, trailing_starts, lines[header.line_index])
    _parse_legends(lines, index, result, ref)
    _check_completeness(result)
    result.pcie_only = _pcie_only(section.command, lines, result)
    return result


_MP_COMMAND_RE = lazy(r"\btopo\s+(?:-mp\b|--matrix_pci\b|-m\s+-p\b)")


def _pcie_only(command: str | None, lines: list[str], result: TopoMatrixResult) -> bool | None:
    said = command or bare_command(lines) or ""
    if _MP_COMMAND_RE.search(said) or any(_MP_COMMAND_RE.search(line) for line in lines[:3]):
        return True
    if re.search(r"\btopo\s+(?:-m|--matrix)\b", said):
        return False
    if any(code.startswith("NV") for code in result.legend) or any(
            (cell.value or "").startswith("NV") for cell in result.cells):
        return False
    if result.legend_style == "bridges" and "PIX" in result.legend:
        return True
    return None


def _parse_row(tokens: list[str], index: int, result: TopoMatrixResult, ref, first_line: int,
               placing: tuple[str, list, list] | None = None) -> None:
    name = intern(tokens[0])
    line_no = first_line + index
    source = ref(index)
    values = tokens[1:]
    cells: list[str] = []
    while values and len(cells) < len(result.columns) and is_cell_token(values[0]):
        token = values.pop(0)
        parts = _GLUED_CELL_PART_RE.findall(token) if _GLUED_CELLS_RE.match(token) else []
        if len(parts) > 1 and len(cells) + len(parts) <= len(result.columns):
            result.warnings.append(
                f"line {line_no}: {token!r} in the {name} row read as {' '.join(parts)} (the separator between "
                "two cells was lost in the paste)")
            cells.extend(parts)
            continue
        cells.append(token)
    if len(cells) < len(result.columns):
        missing = [col for col in result.columns[len(cells):] if col != name]  # its own diagonal is X, not unknown
        result.warnings.append(
            f"line {line_no}: the {name} row has {len(cells)} of {len(result.columns)} cells (the line looks cut); "
            f"{', '.join(missing)} unknown"
        )
    if name in result.rows:
        result.warnings.append(f"line {line_no}: a second {name} row; the first one is kept")
        return
    row = EndpointRow(name=name, source=source)
    result.rows[name] = row
    for col, value in zip(result.columns, cells + [None] * (len(result.columns) - len(cells))):
        if col == name:
            if value not in (None, "X"):
                result.warnings.append(f"line {line_no}: {name} against itself reads {value!r}, not X")
            continue
        cleaned = None if value in (None, "N/A") else intern(value)
        if cleaned is not None and not (cleaned in TOPOLOGY_CODES or _NV_RE.match(cleaned)):
            if cleaned == "X":
                result.warnings.append(f"line {line_no}: X (self) where {name} meets {col}; taken as unknown")
                cleaned = None
            else:
                result.warnings.append(f"line {line_no}: unknown path code {cleaned!r} between {name} and {col}")
        result.cells.append(MatrixCell(row=name, col=col, value=cleaned, source=source))
    labels = list(result.trailing_labels) or (list(TRAILING_LABELS) if values else [])
    if placing is not None and values and len(result.trailing_labels) > 1:
        line, short_rows, trailing_starts = placing
        words = list(re.finditer(r"\S+", line.expandtabs()))[-len(values):]
        start = words[0].start() if [word.group() for word in words] == values else None
        if len(values) < len(labels):
            short_rows.append((row, values, start, line_no, line))
            return
        if start is not None:
            trailing_starts.append(start)
    _assign_trailing(row, values, labels, result, line_no)


def _place_short_rows(result: TopoMatrixResult, short_rows: list[tuple], trailing_starts: list[int],
                      header_line: str) -> None:
    """Rows with fewer values after their cells than the header has trailing columns. A cell can be empty:
    under a cpuset (a Slurm job given `-c32`, the Kubernetes CPU manager) nvidia-smi prints no CPU Affinity
    for the GPUs on a NUMA node the job has no CPU of, and read left to right the NUMA node would land under
    CPU Affinity. nvidia-smi separates the columns with tabs, so the empty cell pushes the next value a tab
    stop further than in the rows that have all their values: then the values are the columns after CPU
    Affinity. With no full row to compare with (every GPU outside the job's NUMA nodes, or a paste of those
    rows only), a row whose cells stand under the header's names (`_header_cpu_column`) is compared with
    where the header's `CPU Affinity` starts. Otherwise (no such shift, or a paste whose spacing was
    lost) they are read left to right, as a line cut at its end is."""
    labels = list(result.trailing_labels)
    usual = min(trailing_starts) if trailing_starts else None
    without_cpus = []
    for row, values, start, line_no, line in short_rows:
        at = usual if usual is not None or labels[0] != "CPU Affinity" else _header_cpu_column(header_line, line)
        empty_cpu = labels[0] == "CPU Affinity" and at is not None and start is not None and start >= at + 4
        _assign_trailing(row, values, labels[1:] if empty_cpu else labels, result, line_no)
        if empty_cpu:
            without_cpus.append(row.name)
    if without_cpus:
        result.warnings.append(
            f"{', '.join(without_cpus)} {'shows' if len(without_cpus) == 1 else 'show'} no CPU affinity: nvidia-smi "
            "ran under a CPU set (a Slurm job, a container) with no CPU on "
            f"{'its' if len(without_cpus) == 1 else 'their'} NUMA node, so threads feeding "
            f"{'it' if len(without_cpus) == 1 else 'them'} run on another socket; run `nvidia-smi topo -m` outside "
            "the job to see the host's affinities")


def _header_cpu_column(header_line: str, row_line: str) -> int | None:
    """Where the header's `CPU Affinity` starts (tabs expanded), if the row's cells stand under the header's
    column names as nvidia-smi's tabs put them (each cell starts within two characters of its name: ` X `
    and `NV12` under `GPU1`); None when the paste lost that alignment (spaces squeezed, a reflowed
    e-mail), where a position says nothing."""
    header = header_line.expandtabs()
    cpu_at = header.find("CPU Affinity")
    if cpu_at < 0:
        return None
    names = [match.start() for match in re.finditer(r"\S+", header[:cpu_at])]
    cells = [match.start() for match in re.finditer(r"\S+", row_line.expandtabs())][1:1 + len(names)]
    if len(names) < 2 or len(cells) < len(names) or any(abs(cell - name) > 2 for cell, name in zip(cells, names)):
        return None
    return cpu_at


def _assign_trailing(row: EndpointRow, values: list[str], labels: list[str], result: TopoMatrixResult,
                     line_no: int) -> None:
    for label, value in zip(labels, values):
        if label == "CPU Affinity":
            row.cpu_affinity = None if value == "N/A" else value
            if row.cpu_affinity is not None and not looks_like_cpulist(value):
                result.warnings.append(
                    f"line {line_no}: CPU affinity {value!r} of {row.name} is not a CPU list (cut or glued in the paste?)"
                )
        elif label == "NUMA Affinity":
            row.numa_affinity = value
            if value.isascii() and value.isdigit():  # "²".isdigit() is true, int("²") is not
                row.numa_node = int(value)
            elif value != "N/A" and not looks_like_cpulist(value):
                result.warnings.append(f"line {line_no}: NUMA affinity {value!r} of {row.name} is not a node number")
        elif label == "GPU NUMA ID":
            if value.isascii() and value.isdigit():
                row.gpu_numa_id = int(value)
            elif value != "N/A":
                result.warnings.append(f"line {line_no}: GPU NUMA ID {value!r} of {row.name} is not a number")
    _numa_node_of_coherent_gpu(row)
    if len(values) > len(labels):
        result.warnings.append(
            f"line {line_no}: {counted(len(values) - len(labels), 'value')} after the {row.name} row that no column "
            f"{'names' if len(values) - len(labels) == 1 else 'name'}: "
            f"{' '.join(values[len(labels):])[:60]!r}"
        )


def _numa_node_of_coherent_gpu(row: EndpointRow) -> None:
    """The CPU's NUMA node of a GPU whose memory is a NUMA node itself (Grace Hopper, Grace Blackwell:
    `GPU NUMA ID` is a number). There `NUMA Affinity` lists the CPU's node and the nodes Linux keeps for
    the GPUs' memory (`0,3-9,11-17` on a GB200 tray, `GPU NUMA ID` 2); those nodes have no CPUs and are
    numbered after the CPUs' nodes, so the lowest node listed is the CPU's. Without a GPU NUMA ID a list
    stays unread: a guest's `0-1` says nothing about where the GPU sits."""
    if row.numa_node is not None or row.gpu_numa_id is None or not row.numa_affinity:
        return
    if not looks_like_cpulist(row.numa_affinity):
        return
    row.numa_node = min(int(part.split("-")[0]) for part in row.numa_affinity.split(","))


def _parse_legends(lines: list[str], start: int, result: TopoMatrixResult, ref) -> None:
    in_legend = in_nic_legend = False
    last_code: str | None = None
    for index in range(start, len(lines)):
        line = lines[index]
        stripped = line.strip()
        if stripped.startswith("NIC Legend"):
            in_nic_legend, in_legend = True, False
            continue
        if stripped.startswith("Legend"):
            in_legend, in_nic_legend = True, False
            continue
        nic = _NIC_LEGEND_RE.match(line)
        if nic and (in_nic_legend or not in_legend):
            result.nic_legend[nic.group(1)] = nic.group(2)
            continue
        entry = _LEGEND_ENTRY_RE.match(line)
        if entry:
            # A lone legend line with no `Legend:` above it still says which codes were meant.
            last_code = intern(entry.group(1))
            result.legend[last_code] = intern(entry.group(2))  # the same words in every output: one string
            in_legend = True
            continue
        if not stripped:
            if last_code is not None:
                last_code = None  # wrapped lines never span a blank line
            continue
        if in_legend and last_code and not _SHELLISH_RE.match(line) and parse_header_line(line) is None:
            result.legend[last_code] = f"{result.legend[last_code]} {stripped}"
            continue
        if parse_header_line(line) is not None:
            break
    result.legend_style = _legend_style(result.legend)


def _legend_style(legend: dict[str, str]) -> str | None:
    if not legend:
        return None
    text = " ".join(legend.values())
    if "SOC" in legend or "Path traverses" in text:
        return "old"
    if "switch" in text:
        return "switches"
    return "bridges"


def _check_completeness(result: TopoMatrixResult) -> None:
    missing = [col for col in result.columns if col not in result.rows]
    if missing and result.rows:
        result.warnings.append(
            f"no row for {', '.join(missing)} (the output looks cut); their affinities are unknown"
        )
    if not result.rows:
        result.warnings.append("the matrix header has no rows under it")
    seen: dict[tuple[str, str], MatrixCell] = {(c.row, c.col): c for c in result.cells}
    for (row, col), cell in seen.items():
        other = seen.get((col, row))
        if other is not None and row < col and other.value != cell.value and None not in (cell.value, other.value):
            result.warnings.append(
                f"{row}->{col} reads {cell.value} but {col}->{row} reads {other.value} (line {cell.source.line} "
                f"and {other.source.line}); the matrix should be symmetric"
            )
    if result.nic_legend:
        unnamed = [name for name in result.endpoints if _NIC_RE.match(name) and name not in result.nic_legend]
        if unnamed:
            result.warnings.append(f"the NIC legend does not name {', '.join(unnamed)}")
