"""`nvidia-smi topo -p2p r|w|n|a|p`: the peer-to-peer status of every ordered GPU pair.

The output never names the capability it shows, so it comes from the command line that
printed it (a prompt line above the paste, or the command k3diag itself ran), else from
text a script wrapped around it ("P2P Read"), else it is "unknown". Rows start with a
space; cells are `X OK CNS GNS TNS NS U DR`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef
from k3diag.parse.lazy_re import lazy
from k3diag.parse.nvidia_topo_matrix import START_RE as _MATRIX_START_RE
from k3diag.parse.nvidia_topo_matrix import (
    MAX_SKIPPED_LINES,
    P2P_CODES,
    TOPOLOGY_CODES,
    bare_command,
    elided_header,
    find_header,
    parse_header_line,
    unquote_reply,
)
from k3diag.parse.text import Section, normalize

# The same header as `topo -m`, plus the lone "GPU0" header of a one-GPU host.
START_RE = lazy(rf"{_MATRIX_START_RE.pattern}|^\s*GPU0\s*$")

_GPU_RE = lazy(r"^GPU\d+$")
_CELL_RE = lazy(r"^(?:X|[A-Z]{1,4}|N/A)$")
# `-p2p r`, `-p2p=r`, `--p2pstatus w`, `-p2p read`; letters as nvidia-smi documents them.
_COMMAND_RE = lazy(r"(?:-p2p|--p2pstatus)(?:\s*=\s*|\s+)([A-Za-z]+)\b")
_CAPABILITY_BY_ARG = {
    "r": "read",
    "read": "read",
    "w": "write",
    "write": "write",
    "n": "nvlink",
    "nvlink": "nvlink",
    "a": "atomics",
    "atomics": "atomics",
    "p": "pcie",
    "pcie": "pcie",
    "pci": "pcie",
    "prop": "pcie",  # older drivers' name for the same NVML index (PROP == PCI)
}
_CAPABILITY_IN_TEXT = (
    (re.compile(r"\bp2p\s+read\b|\(P2P Read\)", re.I), "read"),
    (re.compile(r"\bp2p\s+write\b|\(P2P Write\)", re.I), "write"),
    (re.compile(r"\bp2p\s+nvlink\b|\(P2P NVLink\)", re.I), "nvlink"),
    (re.compile(r"\bp2p\s+atomics\b|\(P2P Atomics\)", re.I), "atomics"),
    (re.compile(r"\bp2p\s+pcie?\b|\(P2P PCIe\)", re.I), "pcie"),
)


@dataclass
class P2PCell:
    src: str
    dst: str
    status: str | None  # as printed; None when the cell is missing
    source: SourceRef


@dataclass
class TopoP2PResult:
    columns: list[str] = field(default_factory=list)
    cells: list[P2PCell] = field(default_factory=list)
    capability: str = "unknown"  # read | write | nvlink | atomics | pcie | unknown
    capability_from: str | None = None  # "command" | "text" | None
    legend: dict[str, str] = field(default_factory=dict)
    header_source: SourceRef | None = None
    # The header lists the GPUs cut short in the paste (`GPU0  GPU1  GPU2  ...`): the machine has at least
    # these GPUs, and how many more is unknown.
    gpu_list_cut: bool = False
    warnings: list[str] = field(default_factory=list)

    def status(self, src: str, dst: str) -> str | None:
        for cell in self.cells:
            if cell.src == src and cell.dst == dst:
                return cell.status
        return None


def capability_from_command(command: str | None) -> str | None:
    """read/write/... from `nvidia-smi topo -p2p r`; None when the command does not say."""
    if not command:
        return None
    match = _COMMAND_RE.search(command)
    if not match:
        return None
    return _CAPABILITY_BY_ARG.get(match.group(1).lower())


def sniff(text: str) -> float:
    lines, _ = unquote_reply(normalize(text[:50_000]).split("\n")[:200])
    header = find_header(lines)
    if header is None:
        header_index = next((i for i, line in enumerate(lines) if re.match(r"^\s*GPU0\s*$", line)), None)
        if header_index is None:
            return 0.0
    else:
        header_index = header.line_index
        if header.trailing_labels:
            return 0.05  # CPU Affinity columns belong to topo -m
    p2p = topology = rows = 0
    for line in lines[header_index + 1 :]:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].startswith("Legend"):
            break
        if not _GPU_RE.match(tokens[0]):
            continue
        rows += 1
        for token in tokens[1:]:
            if token in P2P_CODES:
                p2p += 1
            elif token in TOPOLOGY_CODES or re.match(r"^NV\d+$", token):
                topology += 1
    joined = "\n".join(lines)
    if topology > p2p:
        return 0.05
    score = 0.0
    if rows:
        score += 0.3
    if p2p:
        score += 0.4
    if "Status Ok" in joined or "Chipset not supported" in joined:
        score += 0.3
    return min(score, 1.0)


def parse(section: Section, input_name: str) -> TopoP2PResult:
    result = TopoP2PResult()
    raw_lines = normalize(section.text).split("\n")
    lines, quoted = unquote_reply(raw_lines)
    if quoted:
        result.warnings.append("the output was quoted in a reply (`> ` before each line); read without the marks")

    def ref(index: int) -> SourceRef:
        return SourceRef(input_name, section.first_line + index, raw_lines[index].rstrip())

    _find_capability(section, lines, result)

    header_index: int | None = None
    for index, line in enumerate(lines):
        parsed = parse_header_line(line)
        if parsed is not None or re.match(r"^\s*GPU0\s*$", line):
            header_index = index
            result.columns = parsed[0] if parsed is not None else ["GPU0"]
            if parsed is not None and elided_header(line):
                result.gpu_list_cut = True
                result.warnings.append(
                    f"line {section.first_line + index}: the header was cut short in the paste (`...` after "
                    f"{parsed[0][-1]}); the statuses of the GPUs left out are unknown")
            if parsed is not None and parsed[1]:
                result.warnings.append(
                    f"line {section.first_line + index}: this header has {', '.join(parsed[1])} columns, "
                    "which `topo -p2p` does not print"
                )
            break
    if header_index is None:
        result.warnings.append(f"{input_name}: no `nvidia-smi topo -p2p` header (GPU0 GPU1 ...) was found")
        return result
    result.header_source = ref(header_index)
    others = [name for name in result.columns if not _GPU_RE.match(name)]
    if others:
        result.warnings.append(f"columns {', '.join(others)} are not GPUs; `topo -p2p` compares GPUs only")

    index = header_index + 1
    skipped = 0
    seen_rows: set[str] = set()
    while index < len(lines):
        tokens = lines[index].split()
        if not tokens:
            index += 1
            continue
        if tokens[0].startswith("Legend") or parse_header_line(lines[index]) is not None:
            break
        if not _GPU_RE.match(tokens[0]):
            skipped += 1
            if skipped > MAX_SKIPPED_LINES:
                break
            result.warnings.append(
                f"line {section.first_line + index}: not a P2P row, skipped: {lines[index].strip()[:60]!r}"
            )
            index += 1
            continue
        _parse_row(tokens, index, result, ref, section.first_line, seen_rows)
        index += 1
    for index in range(index, len(lines)):
        match = re.match(r"^\s*(X|[A-Z]{1,4})\s*=\s*((?:.*\S)?)\s*$", lines[index])
        if match:
            result.legend[match.group(1)] = match.group(2)
    missing = [name for name in result.columns if name not in seen_rows]
    if missing and seen_rows:
        result.warnings.append(f"no row for {', '.join(missing)} (the output looks cut)")
    if not seen_rows:
        result.warnings.append("the P2P header has no rows under it")
    return result


def _parse_row(tokens: list[str], index: int, result: TopoP2PResult, ref, first_line: int, seen: set[str]) -> None:
    name = tokens[0]
    line_no = first_line + index
    if name in seen:
        result.warnings.append(f"line {line_no}: a second {name} row; the first one is kept")
        return
    seen.add(name)
    values = [token for token in tokens[1:] if _CELL_RE.match(token)]
    if len(values) != len(tokens) - 1:
        result.warnings.append(f"line {line_no}: {name} row has values that are not P2P codes; they were skipped")
    if len(values) < len(result.columns):
        result.warnings.append(
            f"line {line_no}: the {name} row has {len(values)} of {len(result.columns)} cells (the line looks cut); "
            "the rest are unknown"
        )
    source = ref(index)
    for position, col in enumerate(result.columns):
        value = values[position] if position < len(values) else None
        if col == name:
            if value not in (None, "X"):
                result.warnings.append(f"line {line_no}: {name} against itself reads {value!r}, not X")
            continue
        if value == "N/A":
            value = None
        if value is not None and value not in P2P_CODES:
            result.warnings.append(f"line {line_no}: unknown P2P status {value!r} from {name} to {col}")
        result.cells.append(P2PCell(src=name, dst=col, status=value, source=source))


def _find_capability(section: Section, lines: list[str], result: TopoP2PResult) -> None:
    for command in (section.command, bare_command(lines)):
        capability = capability_from_command(command)
        if capability is not None:
            result.capability, result.capability_from = capability, "command"
            return
        if command and _COMMAND_RE.search(command):
            result.warnings.append(f"`{command}`: the capability argument is not one nvidia-smi documents")
    head = "\n".join(lines[:5])
    for pattern, capability in _CAPABILITY_IN_TEXT:
        if pattern.search(head):
            result.capability, result.capability_from = capability, "text"
            return
    result.warnings.append(
        "which capability this P2P matrix shows is unknown (no `nvidia-smi topo -p2p r|w|n|a|p` command line "
        "above it); its statuses are recorded under capability 'unknown'"
    )
