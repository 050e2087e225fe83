"""What `nvidia-smi nvlink -s`, `-c` and `-R` share: one block per GPU under a `GPU N: NAME (UUID: ...)` line,
then indented `Link N...` lines (nine spaces on current drivers, a tab and a space on others).

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5269b708-...)
             Link 0: 25 GB/s                               (-s; `<inactive>` when down)
             Link 0, P2P is supported: true                (-c)
             Link 0: Remote Device 00000000:07:00.0: Link 46   (-R)
    NVML: Unable to retrieve NVLink information as all links are inActive   (-s, B200 with the fabric down)

Pastes lose the indentation, cut the output (`...`, `......`), or put the command above it. The three
format modules (`nvidia_nvlink_status`, `_capabilities`, `_remote`) use these helpers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from k3diag.model.fabric import NvLinkReading
from k3diag.model.source import SourceRef
from k3diag.parse.text import Section, normalize

GPU_LINE_RE = re.compile(r"^\s*GPU\s+(?P<index>\d+):\s*(?P<name>.*?)\s*(?:\(UUID:\s*(?P<uuid>[^)]*)\))?\s*$")
LINK_STATUS_RE = re.compile(r"^\s*Link\s+(?P<link>\d+)\s*:\s*(?P<value><inactive>|[\d.]+\s*GB/s|(?:.*\S)?)\s*$", re.I)
LINK_CAPABILITY_RE = re.compile(r"^\s*Link\s+(?P<link>\d+)\s*,\s*(?P<what>[^:\s](?:[^:]*[^:\s])?)\s*:\s*(?P<value>true|false)\s*$", re.I)
LINK_REMOTE_RE = re.compile(
    r"^\s*Link\s+(?P<link>\d+)\s*:\s*Remote\s+Device\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
    r"(?:\s*:\s*Link\s+(?P<remote_link>\d+))?\s*$",
    re.I,
)
ALL_INACTIVE_RE = re.compile(r"all links are inactive", re.I)
_CUT_RE = re.compile(r"^\s*\.{3,}\s*$")


@dataclass
class NvLinkGpu:
    index: int
    name: str | None
    uuid: str | None
    source: SourceRef


@dataclass
class NvLinkResult:
    kind: str  # "status" | "capabilities" | "remote"
    gpus: list[NvLinkGpu] = field(default_factory=list)
    links: list[NvLinkReading] = field(default_factory=list)
    all_inactive: dict[int, SourceRef] = field(default_factory=dict)
    truncated: bool = False
    warnings: list[str] = field(default_factory=list)


def count_lines(text: str, pattern: "re.Pattern[str]") -> int:
    return sum(1 for line in text.split("\n")[:2000] if pattern.match(line))


def has_gpu_line(text: str) -> bool:
    return any(GPU_LINE_RE.match(line) and "UUID" in line for line in text.split("\n")[:2000])


def parse_blocks(
    section: Section,
    input_name: str,
    kind: str,
    read_link: Callable[[str, int, SourceRef], NvLinkReading | None],
) -> NvLinkResult:
    """Walk GPU blocks; `read_link(line, gpu, ref)` turns a link line into a reading (None: not one)."""
    result = NvLinkResult(kind=kind)
    lines = normalize(section.text).split("\n")
    current: int | None = None
    for offset, raw in enumerate(lines):
        line = raw.rstrip()
        if not line.strip():
            continue
        ref = SourceRef(input_name, section.first_line + offset, line)
        gpu = GPU_LINE_RE.match(line)
        if gpu and not line.lstrip().lower().startswith("gpu direct"):
            current = int(gpu.group("index"))
            name = gpu.group("name") or None
            uuid = (gpu.group("uuid") or "").strip() or None
            if uuid in ("...", "…"):
                uuid = None
            result.gpus.append(NvLinkGpu(current, name, uuid, ref))
            continue
        if _CUT_RE.match(line):
            result.truncated = True
            continue
        if ALL_INACTIVE_RE.search(line):
            if current is None:
                result.warnings.append(f"line {ref.line}: `all links are inActive` before any GPU line; skipped")
            else:
                result.all_inactive[current] = ref
            continue
        if current is None:
            continue
        reading = read_link(line, current, ref)
        if reading is not None:
            result.links.append(reading)
    if not result.gpus:
        result.warnings.append(f"{input_name}: no `GPU N: NAME (UUID: ...)` line in this nvidia-smi nvlink output")
    if result.truncated:
        result.warnings.append("the output was cut (`...`): GPUs and links after the cut are unknown")
    return result
