"""`ibstatus` (the infiniband-diags script): one block per RDMA device port, read from sysfs.

    Infiniband device 'mlx5_0' port 1 status:
            default gid:     fe80:0000:0000:0000:1e34:daff:fe5a:1fec
            base lid:        0x0
            sm lid:          0x0
            state:           4: ACTIVE          (1: DOWN, 2: INIT, 3: ARMED)
            phys state:      5: LinkUp          (3: Disabled, 2: Polling)
            rate:            100 Gb/sec (4X EDR)
            link_layer:      Ethernet           (InfiniBand)

The script prints each key with a tab and the sysfs value (`state`, `phys_state`, `rate`, `link_layer` of
`/sys/class/infiniband/<dev>/ports/<n>/`); pastes turn the tabs into runs of spaces or four spaces.
"""

from __future__ import annotations

import re

from k3diag.model.fabric import IbPort
from k3diag.parse.ibstat import RdmaDevice, RdmaResult, filled_lines, read_port_value
from k3diag.parse.text import Section, normalize

FORMAT = "ibstatus"
# multi-line: `parse` matches it on each line, `sniff` searches a head with it
_HEADER_RE = re.compile(r"^[^\S\n]*Infiniband device '(?P<name>[^']+)' port (?P<port>\d+) status:\s*$", re.M)
START_RE = _HEADER_RE  # each port block's header; where an ibstatus output pasted after another begins
_KV_RE = re.compile(r"^\s+(?P<key>default gid|base lid|sm lid|state|phys state|rate|link_layer):\s*(?P<value>(?:.*\S)?)\s*$")
_PHYS_RE = re.compile(r"^\d+:\s*(?P<word>\S.*)$")  # `5: LinkUp` -> `LinkUp` (ibstat prints the word alone)


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    if _HEADER_RE.search(head) is None:
        return 0.0
    keys = sum(1 for marker in ("phys state:", "link_layer:", "rate:", "default gid:") if marker in head)
    return 0.95 if keys >= 2 else 0.6


def parse(section: Section, input_name: str) -> RdmaResult:
    result = RdmaResult(tool=FORMAT)
    devices: dict[str, RdmaDevice] = {}
    port: IbPort | None = None
    for line, ref in filled_lines(section, input_name):
        header = _HEADER_RE.match(line)
        if header:
            name = header.group("name")
            device = devices.get(name)
            if device is None:
                device = devices[name] = RdmaDevice(name=name, source=ref)
                result.devices.append(device)
            port = IbPort(device=name, port=int(header.group("port")), origin=FORMAT, source=ref)
            device.ports.append(port)
            continue
        kv = _KV_RE.match(line)
        if port is None or kv is None:
            continue
        key, value = kv.group("key"), kv.group("value")
        if key == "phys state":
            phys = _PHYS_RE.match(value)
            read_port_value(port, "physical state", phys.group("word") if phys else value, ref)
        else:
            read_port_value(port, "link layer" if key == "link_layer" else key, value, ref)
    if not result.devices:
        result.warnings.append(f"{input_name}: no `Infiniband device '...' port N status:` block in this ibstatus output")
    return result
