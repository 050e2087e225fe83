"""Fabric facts into the `Machine`: NVLink per link, GPU fabric registration, Fabric Manager, RDMA ports.

GPUs are found by UUID first (`nvidia-smi nvlink` prints it), then by bus id, then by nvidia-smi's index. RDMA
devices join the NIC an earlier input named (`NIC0` whose legend says `mlx5_0`, or `mlx5_0` itself), else
they become a NIC of their own name. A value another input already gave is kept; a different one is a warning.
"""

from __future__ import annotations

from typing import Any

from k3diag.model.fabric import GpuFabricState, IbPort
from k3diag.model.machine import InputRecord, Machine
from k3diag.model.source import SourceRef, keep_source
from k3diag.model.topology import Gpu, Nic
from k3diag.model.ids import normalize_bdf


def _gpu(machine: Machine, index: int, uuid: str | None = None, bus_id: str | None = None) -> Gpu:
    if uuid:
        for gpu in machine.gpus.values():
            if gpu.uuid and gpu.uuid.lower() == uuid.lower():
                return gpu
    if bus_id:
        known = machine.gpu_by_bus_id(bus_id)
        if known is not None:
            return known
    gpu = machine.gpu(index)
    gpu.vendor = gpu.vendor or "NVIDIA"
    if uuid and gpu.uuid is None and "..." not in uuid:
        gpu.uuid = uuid
    if bus_id and gpu.bus_id is None:
        gpu.bus_id = normalize_bdf(bus_id)
    return gpu


def merge_nvlink(result: Any, machine: Machine, record: InputRecord) -> None:
    """`nvidia-smi nvlink -s`, `-c` and `-R`."""
    placed: dict[int, int] = {}
    for item in result.gpus:
        gpu = _gpu(machine, item.index, item.uuid)
        placed[item.index] = gpu.index
        if item.name and gpu.name is None:
            gpu.name = item.name
        keep_source(gpu.sources, item.source)
    for reading in result.links:
        reading.gpu = placed.get(reading.gpu, reading.gpu)
        machine.fabric.add_nvlink(reading)
    for index, ref in result.all_inactive.items():
        machine.fabric.nvlinks_all_inactive[placed.get(index, index)] = ref


def put_gpu_fabric(machine: Machine, gpu_index: int, state: GpuFabricState, record: InputRecord) -> None:
    state.gpu = gpu_index
    held = machine.fabric.gpu_fabric.get(gpu_index)
    if held is None:
        machine.fabric.gpu_fabric[gpu_index] = state
        return
    for name in ("state", "status", "clique_id", "cluster_uuid", "health_summary"):
        mine, theirs = getattr(held, name), getattr(state, name)
        if mine is None and theirs is not None:
            setattr(held, name, theirs)
            if name in state.sources:
                held.sources[name] = state.sources[name]
        elif theirs is not None and mine != theirs:
            record.warnings.append(f"GPU{gpu_index} fabric {name.replace('_', ' ')}: {theirs!r} here, {mine!r} "
                                   f"elsewhere; kept {mine!r}")
    for key, value in state.health.items():
        held.health.setdefault(key, value)


def merge_query_fabric(result: Any, machine: Machine, record: InputRecord) -> None:
    """`nvidia-smi -q -d FABRIC` or a pasted Fabric block."""
    for block in result.blocks:
        if block.bus_id:
            gpu = _gpu(machine, block.index if block.index is not None else len(machine.gpus), bus_id=block.bus_id)
        elif block.index is not None:
            gpu = _gpu(machine, block.index)
        else:
            continue
        put_gpu_fabric(machine, gpu.index, block.state, record)
    if result.driver_version and machine.host.driver_version is None:
        machine.host.driver_version = result.driver_version


def merge_fabricmanager(result: Any, machine: Machine, record: InputRecord) -> None:
    fm = machine.fabric.fabric_manager
    if result.running is not None:
        # A log showing it failed and a later status showing it running: the running one is the newer fact
        # only if it came later in the input list; keep the first reading and warn on a contradiction.
        if fm.running is None:
            fm.running = result.running
        elif fm.running != result.running:
            record.warnings.append("Fabric Manager is running in one input and not in another; the first is kept")
    for name in ("version", "driver_interface_version", "driver_version_seen"):
        if getattr(fm, name) is None and getattr(result, name) is not None:
            setattr(fm, name, getattr(result, name))
    for event in result.events:
        if event.kind == "system-not-ready":
            machine.fabric.system_not_ready.append(event.source)
        elif event.kind == "imex-not-permitted":
            machine.fabric.imex_missing.append(event.source)
        else:
            fm.events.append(event)
    fm.sources.extend(result.sources)


def nic_for_device(machine: Machine, device: str) -> Nic:
    """The NIC an earlier input named for this RDMA device, or a new one named after it."""
    for nic in machine.nics.values():
        if nic.name == device or nic.device == device:
            return nic
    return machine.nic(device)


def put_port(machine: Machine, port: IbPort, record: InputRecord) -> IbPort:
    """Keep one record per device:port; a later source fills fields the first left unknown."""
    held = machine.fabric.ib_ports.get(port.key)
    if held is None:
        machine.fabric.ib_ports[port.key] = port
        nic = nic_for_device(machine, port.device)
        nic.ports.append(port)
        keep_source(nic.sources, port.source)
        return port
    for name in ("state", "physical_state", "rate_gbps", "rate_text", "link_layer", "active_mtu", "max_mtu"):
        mine, theirs = getattr(held, name), getattr(port, name)
        if mine is None and theirs is not None:
            setattr(held, name, theirs)
        elif theirs is not None and mine != theirs and name in ("state", "link_layer"):
            record.warnings.append(f"{port.key} {name.replace('_', ' ')}: {theirs!r} here, {mine!r} elsewhere; "
                                   f"kept {mine!r}")
    for kind in port.gid_types:
        if kind not in held.gid_types:
            held.gid_types.append(kind)
    return held


def merge_rdma(result: Any, machine: Machine, record: InputRecord) -> None:
    """`ibstat`, `ibv_devinfo`, and the RDMA devices of the sysfs snapshot."""
    for device in result.devices:
        nic = nic_for_device(machine, device.name)
        nic.hca_type = nic.hca_type or device.hca_type
        nic.firmware = nic.firmware or device.firmware
        if device.bus_id and nic.bus_id is None:
            nic.bus_id = normalize_bdf(device.bus_id)
        if device.numa_node is not None and nic.numa_node is None:
            nic.numa_node = device.numa_node
        nic.pcie_width = nic.pcie_width if nic.pcie_width is not None else device.pcie_width
        nic.pcie_speed = nic.pcie_speed or device.pcie_speed
        if device.management_port is not None:
            nic.management_port = device.management_port
            if device.management_port and device.source is not None:
                nic.management_source = SourceRef(device.source.input, device.source.line,
                                                  f"/sys/class/infiniband/{device.name}/device/vpd: SW_MNG")
        keep_source(nic.sources, device.source)
        for port in device.ports:
            put_port(machine, port, record)


def merge_sysfs_fabric(result: Any, machine: Machine, record: InputRecord) -> None:
    """The snapshot's RDMA devices and peer-memory module versions."""
    if result.devices is not None:
        merge_rdma(result, machine, record)
    if result.peer_memory is not None:
        peer = machine.fabric.peer_memory
        peer.checked = True
        peer.nvidia_peermem = peer.nvidia_peermem or result.peer_memory.get("nvidia_peermem")
        peer.nv_peer_mem = peer.nv_peer_mem or result.peer_memory.get("nv_peer_mem") or \
            result.peer_memory.get("nv_peer_mem_nc")
        peer.sources.extend(result.peer_memory_sources)


_NVML_REMOTE = {"gpu": "GPU", "switch": "NVSwitch", "ibmnpu": "CPU"}


def merge_nvml_fabric(result: Any, machine: Machine, record: InputRecord) -> None:
    """NVML per-link state and remote device type, and the fabric registration (nvmlDeviceGetGpuFabricInfoV)."""
    from k3diag.model.fabric import NvLinkReading

    for device in result.devices:
        gpu = machine.gpu_by_bus_id(device.bus_id) if device.bus_id else machine.gpus.get(device.index)
        index = gpu.index if gpu is not None else device.index
        for link in device.nvlinks:
            number = link.get("link")
            active = link.get("active")
            remote = link.get("remote_bus_id")
            text = (f"nvmlDeviceGetNvLinkState(GPU{index}, link {number}) = "
                    f"{'NVML_FEATURE_ENABLED' if active else 'NVML_FEATURE_DISABLED'}"
                    + (f", remote {remote} ({link.get('remote_type')})" if remote else ""))
            ref = SourceRef(device.source.input if device.source else record.path, None, text)
            machine.fabric.add_nvlink(NvLinkReading(
                gpu=index, link=int(number), active=bool(active) if active is not None else None,
                remote_type=_NVML_REMOTE.get(str(link.get("remote_type"))), origin="nvml",
                remote_bus_id=normalize_bdf(remote) if isinstance(remote, str) else None, source=ref))
        if device.fabric:
            info = device.fabric
            text = ", ".join(f"{key}={info.get(key)}" for key in ("state", "status", "clique_id", "cluster_uuid",
                                                                   "health_summary") if info.get(key) is not None)
            ref = SourceRef(device.source.input if device.source else record.path, None,
                            f"nvmlDeviceGetGpuFabricInfoV(GPU{index}): {text}")
            clique = info.get("clique_id")
            state = GpuFabricState(
                gpu=index, state=info.get("state") if info.get("state") not in ("N/A", None) else None,
                status=info.get("status"), clique_id=clique if isinstance(clique, int) else None,
                cluster_uuid=info.get("cluster_uuid"), health_summary=info.get("health_summary"), origin="nvml")
            for key in ("state", "status", "clique_id", "cluster_uuid", "health_summary", "block"):
                state.sources[key] = ref
            put_gpu_fabric(machine, index, state, record)
