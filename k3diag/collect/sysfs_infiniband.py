"""RDMA devices and GPUDirect RDMA prerequisites as the kernel shows them, for the sysfs snapshot.

    /sys/class/infiniband/<dev>/{hca_type,fw_ver,board_id}
    /sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer}   ("4: ACTIVE", "400 Gb/sec (4X NDR)")
    /sys/class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i>                  ("RoCE v2"; first few only)
    /sys/class/infiniband/<dev>/device -> the PCI function: numa_node, current_link_width/speed, vpd
    /sys/module/nvidia_peermem/version, /sys/kernel/mm/memory_peers/nv_mem{,_nc}/version   (NCCL's gdr.cc checks)

The VPD is binary; only whether it holds `SW_MNG` (an HGX B200 NVSwitch management port) is recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

_SMALL = 4096
_VPD_MAX = 64 * 1024
_MAX_DEVICES = 256
_MAX_GIDS = 16
PEER_MEMORY_FILES = {
    "nvidia_peermem": "sys/module/nvidia_peermem/version",
    "nv_peer_mem": "sys/kernel/mm/memory_peers/nv_mem/version",
    "nv_peer_mem_nc": "sys/kernel/mm/memory_peers/nv_mem_nc/version",
}


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            return handle.read(_SMALL).decode("utf-8", errors="replace").strip()
    except OSError:
        return None


def _pci_function(root: Path, device_link: Path) -> str | None:
    """The PCI address the `device` link points at, resolved inside `root` so a fixture never reads the host."""
    try:
        target = os.readlink(device_link)
    except OSError:
        return None
    name = os.path.basename(os.path.normpath(target))
    return name.lower() if name.count(":") == 2 else None


def read_infiniband(root: Path) -> dict:
    """{devices: [...], notes: []}; `devices` is None when /sys/class/infiniband is absent."""
    base = root / "sys/class/infiniband"
    out: dict = {"devices": None, "notes": []}
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)[:_MAX_DEVICES]
    except FileNotFoundError:
        return out
    except OSError as exc:
        out["notes"].append(f"{base} could not be listed ({exc.strerror or exc}); RDMA devices are unknown")
        return out
    devices = []
    for entry in entries:
        record: dict = {"name": entry.name}
        for name in ("hca_type", "fw_ver", "board_id", "node_guid"):
            value = _read(entry / name)
            if value is not None:
                record[name] = value
        device_dir = entry / "device"
        record["bdf"] = _pci_function(root, device_dir)
        for name in ("numa_node", "current_link_width", "current_link_speed", "local_cpulist"):
            value = _read(device_dir / name)
            if value is not None:
                record[name] = value
        try:
            with (device_dir / "vpd").open("rb") as handle:
                record["vpd_sw_mng"] = b"SW_MNG" in handle.read(_VPD_MAX)
        except FileNotFoundError:
            record["vpd_sw_mng"] = None
        except OSError:
            record["vpd_sw_mng"] = None  # root-only on some kernels
        ports = []
        try:
            port_dirs = sorted((entry / "ports").iterdir(), key=lambda p: (len(p.name), p.name))
        except OSError:
            port_dirs = []
        for port_dir in port_dirs:
            if not port_dir.name.isdigit():
                continue
            port: dict = {"port": int(port_dir.name)}
            for name in ("state", "phys_state", "rate", "link_layer"):
                value = _read(port_dir / name)
                if value is not None:
                    port[name] = value
            types: list[str] = []
            try:
                gid_files = sorted((port_dir / "gid_attrs/types").iterdir(), key=lambda p: (len(p.name), p.name))
            except OSError:
                gid_files = []
            for gid in gid_files[:_MAX_GIDS]:
                value = _read(gid)  # EINVAL for unset GID slots: skipped
                if value and value not in types:
                    types.append(value)
            if types:
                port["gid_types"] = types
            ports.append(port)
        record["ports"] = ports
        devices.append(record)
    out["devices"] = devices
    return out


def read_peer_memory(root: Path) -> dict | None:
    """The peer-memory module versions NCCL looks for; null where the file is absent. None when the tree has no
    /sys/module at all (a partial copy): absence then proves nothing."""
    if not (root / "sys/module").is_dir():
        return None
    return {name: _read(root / relative) for name, relative in PEER_MEMORY_FILES.items()}
