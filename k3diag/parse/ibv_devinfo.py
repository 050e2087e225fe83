"""`ibv_devinfo` (and `ibv_devinfo -v`, whose extra capability lines are skipped): one `hca_id:` block per
RDMA device, then `port:` blocks.

    hca_id: mlx5_2
            transport:                      InfiniBand (0)
            fw_ver:                         28.42.1000
            vendor_part_id:                 4129
            board_id:                       MT_0000000838
            phys_port_cnt:                  1
                    port:   1
                            state:                  PORT_ACTIVE (4)
                            max_mtu:                4096 (5)
                            active_mtu:             4096 (5)
                            link_layer:             Ethernet

ibv_devinfo prints no rate; `ibstat` or `/sys/class/infiniband/*/ports/*/rate` do. `-v` adds GID lines
(`GID[  3]: ..., RoCE v2`), read as the port's GID types.
"""

from __future__ import annotations

import re

from k3diag.parse.ibstat import RdmaResult, device_port_lines, port_state
from k3diag.parse.text import Section, normalize

FORMAT = "ibv-devinfo"
_HCA_RE = re.compile(r"^\s*hca_id:\s*(?P<name>\S+)\s*$")
START_RE = _HCA_RE  # each device block's first line; where an ibv_devinfo output pasted after another begins
_PORT_RE = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_KV_RE = re.compile(r"^\s*(?P<key>[a-z_]+)\s*:\s*(?P<value>(?:.*\S)?)\s*$")
_GID_RE = re.compile(r"^\s*GID\[\s*\d+\]:\s*\S+(?:,\s*(?P<type>.+?))?\s*$")
_MTU_RE = re.compile(r"^(\d+)")


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    if not re.search(r"(?m)^[^\S\n]*hca_id:\s*\S+\s*$", head):
        return 0.0
    score = 0.5
    for marker in ("transport:", "phys_port_cnt:", "active_mtu:", "link_layer:", "PORT_"):
        if marker in head:
            score += 0.1
    return min(score, 1.0)


def parse(section: Section, input_name: str) -> RdmaResult:
    result = RdmaResult(tool=FORMAT)
    for device, port, line, ref in device_port_lines(section, input_name, _HCA_RE, _PORT_RE, result):
        gid = _GID_RE.match(line)
        if gid and port is not None:
            kind = (gid.group("type") or "").strip()
            if kind and kind not in port.gid_types:
                port.gid_types.append(kind)
            continue
        kv = _KV_RE.match(line)
        if kv is None:
            continue
        key, value = kv.group("key"), kv.group("value")
        if port is None:
            if key == "fw_ver":
                device.firmware = value or None
            elif key == "vendor_part_id" and value.isdigit():
                device.hca_type = f"MT{value}"
            elif key == "board_id":
                device.board_id = value or None
            continue
        if key == "state":
            port.state = port_state(value)
            port.source = ref
        elif key in ("active_mtu", "max_mtu"):
            number = _MTU_RE.match(value)
            setattr(port, key, int(number.group(1)) if number else None)
        elif key == "link_layer":
            port.link_layer = value or None
        elif key == "phys_state":
            port.physical_state = re.sub(r"\s*\(\d+\)$", "", value) or None
    if not result.devices:
        result.warnings.append(f"{input_name}: no `hca_id:` block in this ibv_devinfo output")
    return result
