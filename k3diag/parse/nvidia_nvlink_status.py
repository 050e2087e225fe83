"""`nvidia-smi nvlink -s` / `--status`: each NVLink's speed per direction, or `<inactive>`.

Driver outputs in the fixtures: `Link 0: 25 GB/s` (A100, 12 links), `25.781 GB/s` (V100, 6), `26.562 GB/s`
(H100, 18), `53.125 GB/s` (GB200/B200, 18), `<inactive>`, and the B200 line `NVML: Unable to retrieve NVLink
information as all links are inActive` under a GPU whose fabric is down.
"""

from __future__ import annotations

import re

from k3diag.model.fabric import NvLinkReading
from k3diag.model.source import SourceRef
from k3diag.parse.nvidia_nvlink import (
    ALL_INACTIVE_RE,
    LINK_CAPABILITY_RE,
    LINK_REMOTE_RE,
    LINK_STATUS_RE,
    NvLinkResult,
    count_lines,
    has_gpu_line,
    parse_blocks,
)
from k3diag.parse.text import Section, normalize

FORMAT = "nvidia-smi-nvlink-status"
_SPEED_RE = re.compile(r"^([\d.]+)\s*GB/s$", re.I)


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    if count_lines(head, LINK_REMOTE_RE) or count_lines(head, LINK_CAPABILITY_RE):
        return 0.0
    speeds = sum(1 for line in head.split("\n")[:2000]
                 if (m := LINK_STATUS_RE.match(line)) and (_SPEED_RE.match(m.group("value")) or "inactive" in m.group("value").lower()))
    gpu = has_gpu_line(head) or re.search(r"(?m)^[^\S\n]*GPU\s+\d+:", head) is not None
    if speeds and gpu:
        return 0.95
    if ALL_INACTIVE_RE.search(head) and gpu:
        return 0.9
    if speeds >= 2:
        return 0.55
    return 0.0


def _read(line: str, gpu: int, ref: SourceRef) -> NvLinkReading | None:
    match = LINK_STATUS_RE.match(line)
    if match is None or LINK_REMOTE_RE.match(line):
        return None
    value = match.group("value")
    speed = _SPEED_RE.match(value)
    if speed:
        return NvLinkReading(gpu=gpu, link=int(match.group("link")), active=True, speed_gbs=float(speed.group(1)),
                             origin=FORMAT, source=ref)
    if "inactive" in value.lower():
        return NvLinkReading(gpu=gpu, link=int(match.group("link")), active=False, origin=FORMAT, source=ref)
    return None


def parse(section: Section, input_name: str) -> NvLinkResult:
    return parse_blocks(section, input_name, "status", _read)
