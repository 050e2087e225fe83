"""`nvidia-smi nvlink -R`: the PCI bus id of the device at the far end of each link, and its port there.

    Link 0: Remote Device 00000000:07:00.0: Link 46

On an HGX board the far ends are NVSwitches (bus ids that are not GPUs); on NVLink-bridged pairs they are the
peer GPU. The merger decides which by matching the bus id against the GPUs it knows. A link listed here is up.
"""

from __future__ import annotations

from k3diag.model.fabric import NvLinkReading
from k3diag.model.source import SourceRef
from k3diag.parse.ids import normalize_bdf
from k3diag.parse.nvidia_nvlink import LINK_REMOTE_RE, NvLinkResult, count_lines, has_gpu_line, parse_blocks
from k3diag.parse.text import Section, normalize

FORMAT = "nvidia-smi-nvlink-remote"


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    found = count_lines(head, LINK_REMOTE_RE)
    if found and has_gpu_line(head):
        return 0.95
    return 0.6 if found >= 2 else 0.0


def _read(line: str, gpu: int, ref: SourceRef) -> NvLinkReading | None:
    match = LINK_REMOTE_RE.match(line)
    if match is None:
        return None
    remote_link = match.group("remote_link")
    return NvLinkReading(gpu=gpu, link=int(match.group("link")), active=True,
                         remote_bus_id=normalize_bdf(match.group("bus")),
                         remote_link=int(remote_link) if remote_link else None, origin=FORMAT, source=ref)


def parse(section: Section, input_name: str) -> NvLinkResult:
    return parse_blocks(section, input_name, "remote", _read)
