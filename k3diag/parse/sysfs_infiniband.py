"""The `infiniband` and `peer_memory` parts of the sysfs snapshot (`k3diag.collect.sysfs_infiniband`) as RDMA
device records and peer-memory facts. Pure: the snapshot's JSON values in, records out.

sysfs spells port state `4: ACTIVE` / `1: DOWN`, physical state `5: LinkUp` / `3: Disabled`, rate
`400 Gb/sec (4X NDR)`, link layer `InfiniBand` / `Ethernet`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.fabric import IbPort
from k3diag.model.source import SourceRef
from k3diag.parse.ibstat import RdmaDevice, port_state

FORMAT = "sysfs-snapshot"
_RATE_RE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")
_PHYS_RE = re.compile(r"^\s*\d+:\s*(.+?)\s*$")


@dataclass
class SnapshotFabric:
    devices: list[RdmaDevice] | None = None  # None: the snapshot has no infiniband part (older collector)
    peer_memory: dict[str, str | None] | None = None
    peer_memory_sources: list[SourceRef] = field(default_factory=list)


def _int(value) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number


def read(data: dict, input_name: str, root: str | None) -> SnapshotFabric:
    result = SnapshotFabric()
    prefix = "" if root in (None, "/") else str(root).rstrip("/")
    devices = data.get("infiniband")
    if isinstance(devices, list):
        result.devices = []
        for record in devices:
            if not isinstance(record, dict) or not isinstance(record.get("name"), str):
                continue
            name = record["name"]
            where = f"{prefix}/sys/class/infiniband/{name}"
            device = RdmaDevice(name=name, hca_type=record.get("hca_type"), firmware=record.get("fw_ver"),
                                board_id=record.get("board_id"),
                                source=SourceRef(input_name, None, f"{where}/hca_type: {record.get('hca_type')}"))
            device.bus_id = record.get("bdf") if isinstance(record.get("bdf"), str) else None
            numa = _int(record.get("numa_node"))
            device.numa_node = numa if numa is not None and numa >= 0 else None
            device.pcie_width = _int(record.get("current_link_width"))
            device.pcie_speed = record.get("current_link_speed") if isinstance(record.get("current_link_speed"), str) else None
            if isinstance(record.get("vpd_sw_mng"), bool):
                device.management_port = record["vpd_sw_mng"]
            for port_record in record.get("ports") or []:
                if not isinstance(port_record, dict) or _int(port_record.get("port")) is None:
                    continue
                number = _int(port_record.get("port"))
                state_text = port_record.get("state")
                port = IbPort(device=name, port=number, origin=FORMAT,
                              source=SourceRef(input_name, None, f"{where}/ports/{number}/state: {state_text}"))
                port.state = port_state(state_text) if isinstance(state_text, str) else None
                phys = port_record.get("phys_state")
                if isinstance(phys, str):
                    match = _PHYS_RE.match(phys)
                    port.physical_state = match.group(1) if match else phys.strip() or None
                rate = port_record.get("rate")
                if isinstance(rate, str):
                    port.rate_text = rate
                    match = _RATE_RE.match(rate)
                    port.rate_gbps = float(match.group(1)) if match else None
                if isinstance(port_record.get("link_layer"), str):
                    port.link_layer = port_record["link_layer"] or None
                port.gid_types = [t for t in port_record.get("gid_types") or [] if isinstance(t, str)]
                device.ports.append(port)
            result.devices.append(device)
    peer = data.get("peer_memory")
    if isinstance(peer, dict):
        result.peer_memory = {str(k): (str(v) if v is not None else None) for k, v in peer.items()}
        for key, relative in (("nvidia_peermem", "sys/module/nvidia_peermem/version"),
                              ("nv_peer_mem", "sys/kernel/mm/memory_peers/nv_mem/version"),
                              ("nv_peer_mem_nc", "sys/kernel/mm/memory_peers/nv_mem_nc/version")):
            value = result.peer_memory.get(key)
            text = f"{prefix}/{relative}: {value}" if value else f"{prefix}/{relative}: (absent)"
            result.peer_memory_sources.append(SourceRef(input_name, None, text))
    return result
