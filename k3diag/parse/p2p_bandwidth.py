"""CUDA samples' p2pBandwidthLatencyTest output.

    [P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
    Device: 0, NVIDIA GeForce RTX 4090, pciBusID: 2, pciDeviceID: 0, pciDomainID:0
    Device=0 CAN Access Peer Device=1
    P2P Connectivity Matrix
         D\\D     0     1
         0\t     1     1
    Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
       D\\D     0      1
         0 1008.06   6.34
    P2P=Disabled Latency Matrix (us)
       GPU     0      1
         0   1.59  15.33
       CPU     0      1
         0   2.67   6.78

The sample prints each cell with `%6.02f ` (cuda-samples, p2pBandwidthLatencyTest.cu), so every
value has exactly two decimals; builds and pastes that lost the separating space
(`0 1534.171091.36`, a diagonal over 1000 touching its neighbour) are split on that shape rather
than on whitespace. Row labels are integers before the first value, which also survives pastes
with editor line numbers in front.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.bench_records import P2PBandwidthBenchmark, P2PGpu
from k3diag.model.source import SourceRef
from k3diag.model.words import counted, shown_number
from k3diag.parse.matrix_labels import damaged_index_warning, gpu_index

START_RE = re.compile(r"^\s*\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\]")
_DEVICE_RE = re.compile(
    r"Device:\s*(?P<idx>\d+),\s*(?P<name>.*?),\s*pciBusID:\s*(?P<bus>[0-9a-fA-F]+),\s*pciDeviceID:\s*"
    r"(?P<dev>[0-9a-fA-F]+),\s*pciDomainID:\s*(?P<dom>[0-9a-fA-F]+)"
)
_ACCESS_RE = re.compile(r"Device=(?P<a>\d+)\s+(?P<state>CAN|CANNOT)\s+Access Peer Device=(?P<b>\d+)")
_TITLE_RE = re.compile(r"(?P<title>(?:(?:Uni|Bi)directional )?P2P=(?:Disabled|Enabled)\b.*?Matrix \((?:GB/s|us)\))")
_CONNECTIVITY_RE = re.compile(r"P2P Connectivity Matrix")
_HEADER_RE = re.compile(r"(?P<label>D\\D|GPU|CPU)(?P<cols>(?:\s+\d+)+)\s*$")
# A value's digits start where a run of digits does, or right after the two decimals of a value they touch
# (`1534.171091.36`): searched from inside a long run of digits, `\d+` ran to its end from every digit
# (quadratic: 20,000 digits took a second).
_CELL_RE = re.compile(r"-?(?:(?<!\d)|(?<=\.\d\d))\d+\.\d\d|N/A|-?nan|-?inf", re.IGNORECASE)


@dataclass
class P2PBandwidthResult:
    benchmarks: list[P2PBandwidthBenchmark] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    head = text[:200_000]
    if "P2P (Peer-to-Peer) GPU Bandwidth Latency Test" in head:
        return 0.95
    hits = 0
    if _ACCESS_RE.search(head):
        hits += 1
    if "P2P Connectivity Matrix" in head:
        hits += 1
    if re.search(r"P2P=(?:Disabled|Enabled).*Matrix \((?:GB/s|us)\)", head):
        hits += 1
    return {0: 0.0, 1: 0.75}.get(hits, 0.9)


def parse(section, input_name: str) -> P2PBandwidthResult:
    result = P2PBandwidthResult()
    bench = P2PBandwidthBenchmark(input=input_name)
    access: dict[tuple[int, int], bool] = {}
    connectivity: dict[int, list[int | None]] = {}
    current: str | None = None  # matrix name being filled, or "connectivity"
    title: str | None = None
    rows: dict[int, list[float | None]] = {}
    width: int | None = None
    problems: list[str] = []
    damaged: list[str] = []  # lines whose GPU index is no GPU index (`matrix_labels`)
    bad_addresses: list[str] = []  # device lines whose PCI bus or device number is out of range
    listed: set[int] = set()  # device indices already listed
    relisted: list[int] = []  # lines that list a device index again

    def close() -> None:
        nonlocal rows, current
        if current and current != "connectivity" and rows:
            n = max(rows) + 1
            matrix = [rows.get(i, [None] * (width or n)) for i in range(n)]
            bench.matrices[current] = matrix
        rows = {}
        current = None

    for offset, raw in enumerate(section.text.split("\n")):
        lineno = section.first_line + offset
        line = raw.rstrip()
        if not line.strip():
            continue
        match = _DEVICE_RE.search(line)
        if match:
            idx = gpu_index(match.group("idx"))
            if idx is None:
                damaged.append(f"line {lineno}: device index {shown_number(match.group('idx'))}")
                continue
            if idx in listed:
                # a second run pasted after the first without its banner, or a line repeated: each index is one
                # GPU (a device list of thousands of lines made a matrix of millions of cells)
                relisted.append(lineno)
                continue
            listed.add(idx)
            bus_id = _bus_id(match.group("dom"), match.group("bus"), match.group("dev"))
            if bus_id is None:
                bad_addresses.append(f"line {lineno}")
            bench.gpus.append(P2PGpu(idx, match.group("name").strip() or None, bus_id))
            # the line that names the device: the inventory and the identity check cite it
            bench.sources.setdefault(f"device:{idx}", SourceRef(input_name, lineno, line))
            continue
        match = _ACCESS_RE.search(line)
        if match:
            a, b = gpu_index(match.group("a")), gpu_index(match.group("b"))
            if a is None or b is None:
                damaged.append(f"line {lineno}: peer access between devices {shown_number(match.group('a'))} and {shown_number(match.group('b'))}")
                continue
            access[(a, b)] = match.group("state") == "CAN"
            bench.sources.setdefault(f"access:{a}:{b}", SourceRef(input_name, lineno, line))
            continue
        if _CONNECTIVITY_RE.search(line):
            close()
            current = "connectivity"
            width = None
            continue
        match = _TITLE_RE.search(line)
        if match:
            close()
            title = match.group("title")
            current = title
            width = None
            bench.sources.setdefault(title, SourceRef(input_name, lineno, line))
            continue
        match = _HEADER_RE.search(line)
        if match:
            label = match.group("label")
            width = len(match.group("cols").split())
            if label == "CPU" and title:
                # the latency section's second table: CPU-measured latency
                close()
                current = f"{title} CPU"
                bench.sources.setdefault(current, SourceRef(input_name, lineno, line))
            elif current is None and title is None:
                current = "unnamed matrix"
            continue
        if current is None:
            continue
        if current == "connectivity":
            tokens = line.split()
            if not tokens or not all(t.isdigit() for t in tokens):
                continue
            if width is not None and len(tokens) > width + 1:
                tokens = tokens[len(tokens) - width - 1 :]  # editor line numbers in front
            row = gpu_index(tokens[0])
            if row is None:
                damaged.append(f"line {lineno}: connectivity row {shown_number(tokens[0])}")
                continue
            connectivity[row] = [_connectivity_cell(v) for v in tokens[1:]]
            continue
        first_cell = _CELL_RE.search(line)
        if not first_cell:
            continue
        # the row label is the last integer before the first value (editor line numbers may precede it)
        labels = re.findall(r"\d+", line[: first_cell.start()])
        if not labels:
            continue
        label = gpu_index(labels[-1])
        if label is None:
            damaged.append(f"line {lineno}: row {shown_number(labels[-1])} of '{current}'")
            continue
        cells = [_cell(c) for c in _CELL_RE.findall(line[first_cell.start():])]
        if width is not None and len(cells) != width:
            problems.append(f"line {lineno}: {len(cells)} values for {width} columns in '{current}'")
            cells = (cells + [None] * width)[:width]
        rows[label] = cells
    close()

    n = max([len(bench.gpus)] + [max(a, b) + 1 for a, b in access] + [len(m) for m in bench.matrices.values()]
            + ([max(connectivity) + 1] if connectivity else []))
    if access:
        bench.can_access = [[None if i == j else access.get((i, j)) for j in range(n)] for i in range(n)]
    if connectivity:
        bench.connectivity = [connectivity.get(i, [None] * n) for i in range(max(connectivity) + 1)]
    if bench.gpus or access or bench.matrices or connectivity:
        result.benchmarks.append(bench)
    else:
        result.warnings.append("no p2pBandwidthLatencyTest matrix or device line found")
    for problem in problems[:10]:
        result.warnings.append(f"misaligned matrix row ({problem}); its missing cells are left unknown")
    warning = damaged_index_warning(damaged)
    if warning:
        result.warnings.append(warning)
    if relisted:
        lines = ", ".join(map(str, relisted[:5])) + (f" and {len(relisted) - 5:,} more" if len(relisted) > 5 else "")
        one = len(relisted) == 1
        result.warnings.append(f"{counted(len(relisted), 'device line')} {'lists' if one else 'list'} a device index "
                               f"listed before (line{'' if one else 's'} {lines}): a second run pasted without its "
                               "banner? Each device is read from its first line")
    if bad_addresses:
        result.warnings.append(f"damaged PCI address (a bus above ff or a device above 1f) on {', '.join(bad_addresses[:10])}: "
                               "those GPUs are listed without one")
    return result


def _bus_id(domain: str, bus: str, device: str) -> str | None:
    """The device's PCI address from the fields the sample prints in hex (`%x`), None when one is out of range."""
    dom, bus_number, dev = int(domain, 16), int(bus, 16), int(device, 16)
    if dom > 0xFFFFFFFF or bus_number > 0xFF or dev > 0x1F:
        return None
    return f"{dom:04x}:{bus_number:02x}:{dev:02x}.0"


def _connectivity_cell(token: str) -> int | None:
    # the sample prints 1 or 0 for each pair; anything else is a damaged cell, unknown
    return int(token) if token in ("0", "1") else None


def _cell(token: str) -> float | None:
    if token.upper() == "N/A" or "nan" in token.lower() or "inf" in token.lower():
        return None
    try:
        return float(token)
    except ValueError:
        return None
