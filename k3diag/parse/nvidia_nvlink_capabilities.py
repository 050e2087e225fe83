"""`nvidia-smi nvlink -c` / `--capabilities`: per link, `P2P is supported`, `Access to system memory supported`,
`P2P atomics supported`, `System memory atomics supported`, `SLI is supported`, `Link is supported`.

Only `P2P is supported` is kept on the link reading: it says whether the link can carry GPU peer traffic. The
listing does not say whether a link is up, so the readings leave `active` unknown.
"""

from __future__ import annotations

from k3diag.model.fabric import NvLinkReading
from k3diag.model.source import SourceRef
from k3diag.parse.nvidia_nvlink import LINK_CAPABILITY_RE, NvLinkResult, count_lines, has_gpu_line, parse_blocks
from k3diag.parse.text import Section, normalize

FORMAT = "nvidia-smi-nvlink-capabilities"


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    found = count_lines(head, LINK_CAPABILITY_RE)
    if found and has_gpu_line(head):
        return 0.95
    return 0.6 if found >= 3 else 0.0


def _read(line: str, gpu: int, ref: SourceRef) -> NvLinkReading | None:
    match = LINK_CAPABILITY_RE.match(line)
    if match is None or not match.group("what").lower().startswith("p2p is supported"):
        return None
    return NvLinkReading(gpu=gpu, link=int(match.group("link")), active=None,
                         p2p_supported=match.group("value").lower() == "true", origin=FORMAT, source=ref)


def parse(section: Section, input_name: str) -> NvLinkResult:
    return parse_blocks(section, input_name, "capabilities", _read)
