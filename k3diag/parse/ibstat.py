"""`ibstat` (infiniband-diags): one `CA 'mlx5_0'` block per RDMA device, then its ports.

    CA 'mlx5_0'
            CA type: MT4129
            Number of ports: 1
            Firmware version: 28.39.1002
            ...
            Port 1:
                    State: Active               (Down, Initializing, Armed)
                    Physical state: LinkUp      (Disabled, Polling, LinkErrorRecovery)
                    Rate: 200                   (Gb/s; 400 for NDR)
                    ...
                    Link layer: Ethernet        (InfiniBand)

Tabs (older rdma-core) or eight spaces; pastes with `ibwarn:` debug lines between blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

from k3diag.model.fabric import IbPort
from k3diag.model.source import SourceRef
from k3diag.parse.lazy_re import lazy
from k3diag.parse.text import Section, normalize

FORMAT = "ibstat"
_CA_RE = re.compile(r"^\s*CA\s+'(?P<name>[^']+)'\s*$")
# A device block's first line, as ibstat prints it (`printf("CA '%s'\n", ...)`): where an ibstat output
# pasted after another one begins (the registry's `repeats` keeps its own blocks together).
START_RE = lazy(r"^\s*CA '[^']+'\s*$")
_PORT_RE = re.compile(r"^\s*Port\s+(?P<port>\d+):\s*$")
_KV_RE = re.compile(r"^\s*(?P<key>[A-Za-z](?:[A-Za-z ]*[A-Za-z])?)\s*:\s*(?P<value>(?:.*\S)?)\s*$")
STATE_WORDS = {"active": "active", "down": "down", "initializing": "init", "init": "init", "armed": "armed",
               "port_active": "active", "port_down": "down", "port_init": "init", "port_armed": "armed"}


@dataclass
class RdmaDevice:
    name: str
    hca_type: str | None = None  # "MT4129"
    firmware: str | None = None
    board_id: str | None = None
    ports: list[IbPort] = field(default_factory=list)
    source: SourceRef | None = None
    # From the sysfs tree only: the PCI function, its NUMA node and link, and whether its VPD says SW_MNG.
    bus_id: str | None = None
    numa_node: int | None = None
    pcie_width: int | None = None
    pcie_speed: str | None = None
    management_port: bool | None = None


@dataclass
class RdmaResult:
    tool: str
    devices: list[RdmaDevice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def port_state(text: str | None) -> str | None:
    """`Active`, `PORT_ACTIVE (4)`, `4: ACTIVE` -> "active"."""
    if not text:
        return None
    for token in re.findall(r"[A-Za-z_]+", text):
        word = STATE_WORDS.get(token.lower())
        if word:
            return word
    return "unknown"


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    if not re.search(r"(?m)^[^\S\n]*CA\s+'[^']+'\s*$", head):
        return 0.0
    score = 0.5
    for marker in ("CA type:", "Physical state:", "Link layer:", "Port GUID:"):
        if marker in head:
            score += 0.15
    return min(score, 1.0)


def filled_lines(section: Section, input_name: str) -> Iterator[tuple[str, SourceRef]]:
    """The non-blank lines of a section (trailing blanks trimmed), each with its reference."""
    for offset, raw in enumerate(normalize(section.text).split("\n")):
        line = raw.rstrip()
        if line.strip():
            yield line, SourceRef(input_name, section.first_line + offset, line)


def read_port_value(port: IbPort, key: str, value: str, ref: SourceRef) -> None:
    """One port line's value into the port, by ibstat's name for it (`state`, `physical state`, `rate`,
    `link layer`; other keys are left alone); ibstatus maps its own names to these."""
    if key == "state":
        port.state = port_state(value)
        port.source = ref
    elif key == "physical state":
        port.physical_state = value or None
    elif key == "rate":
        port.rate_text = value or None
        number = re.match(r"^([\d.]+)", value)
        port.rate_gbps = float(number.group(1)) if number else None
    elif key == "link layer":
        port.link_layer = value or None


def device_port_lines(section: Section, input_name: str, device_re: re.Pattern[str], port_re: re.Pattern[str],
                      result: RdmaResult) -> Iterator[tuple[RdmaDevice, IbPort | None, str, SourceRef]]:
    """The lines inside each device block with the device and port they belong to (ibstat and ibv_devinfo
    share this layout: a device header, its own lines, then a header and lines per port). Devices and
    ports are created, in `result`, as their headers appear; lines before the first device are skipped."""
    device: RdmaDevice | None = None
    port: IbPort | None = None
    for line, ref in filled_lines(section, input_name):
        header = device_re.match(line)
        if header:
            device = RdmaDevice(name=header.group("name"), source=ref)
            result.devices.append(device)
            port = None
            continue
        if device is None:
            continue
        port_match = port_re.match(line)
        if port_match:
            port = IbPort(device=device.name, port=int(port_match.group("port")), origin=result.tool, source=ref)
            device.ports.append(port)
            continue
        yield device, port, line, ref


def parse(section: Section, input_name: str) -> RdmaResult:
    result = RdmaResult(tool=FORMAT)
    for device, port, line, ref in device_port_lines(section, input_name, _CA_RE, _PORT_RE, result):
        kv = _KV_RE.match(line)
        if kv is None:
            continue
        key, value = kv.group("key").lower(), kv.group("value")
        if port is None:
            if key == "ca type":
                device.hca_type = value or None
            elif key == "firmware version":
                device.firmware = value or None
            continue
        read_port_value(port, key, value, ref)
    if not result.devices:
        result.warnings.append(f"{input_name}: no `CA 'name'` block in this ibstat output")
    return result
