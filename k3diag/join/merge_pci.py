"""Putting PCIe and platform facts into the machine: devices joined by bus id, GPUs and NICs
attached to their PCI functions, the IOMMU mode decided from the strongest evidence at hand.

Every merge leaves the machine consistent on its own, so inputs can arrive in any order
(an `nvidia-smi topo -m` before or after an `lspci -vv`, a sysfs snapshot with or without a
dmesg). Facts only fill what is unknown; they never overwrite another source silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3diag.model.host import HostInfo
from k3diag.model.machine import InputRecord, Machine
from k3diag.model.fabric import FabricManagerEvent
from k3diag.model.pci import (
    VENDOR_AMD,
    VENDOR_NVIDIA,
    DmesgEvent,
    PciDevice,
    PciLink,
    gen_from_speed,
    platform_state,
)
from k3diag.model.pcie_tree import is_gpu_device
from k3diag.model.source import SourceRef, keep_source
from k3diag.model.topology import Gpu
from k3diag.model.ids import normalize_bdf
from k3diag.parse.lspci import LspciResult, vendor_for

if TYPE_CHECKING:  # the other parsers' records: imported where they are used, not for an lspci input
    from k3diag.parse.dmesg import DmesgResult
    from k3diag.parse.kernel_cmdline import KernelCmdline
    from k3diag.parse.lspci_tree import LspciTreeResult
    from k3diag.parse.sysfs_snapshot import SysfsResult

GPUS_FROM_PCI = "pcie_gpus_from_bus_order"
_VENDOR_NAMES = {VENDOR_NVIDIA: "NVIDIA", VENDOR_AMD: "AMD"}


# -- the five mergers the registry names ------------------------------------------------


def merge_lspci(result: LspciResult, machine: Machine, record: InputRecord) -> None:
    if machine.pci:
        for device in result.devices:
            upsert_device(machine, device)
    else:
        _add_to_empty(machine, result.devices)
    if result.denied:
        platform_state(machine).privileged = False
    attach_endpoints(machine)


def merge_lspci_tree(result: LspciTreeResult, machine: Machine, record: InputRecord) -> None:
    for node in result.nodes:
        device = PciDevice(
            bdf=node.bdf,
            description=node.name,
            vendor_id=vendor_for(node.name),
            parent=node.parent,
            secondary_bus=node.secondary_bus,
            subordinate_bus=node.subordinate_bus,
            is_bridge=node.is_bridge,
            origin="lspci-tv",
            source=node.source,
            host_bridge=node.root_bus if node.parent is None else None,
        )
        device.add_source(node.source)
        upsert_device(machine, device)
    attach_endpoints(machine)


def merge_sysfs(result: SysfsResult, machine: Machine, record: InputRecord) -> None:
    for device in result.devices:
        upsert_device(machine, device)
    if getattr(result, "fabric", None) is not None:
        from k3diag.join.merge_fabric import merge_sysfs_fabric

        merge_sysfs_fabric(result.fabric, machine, record)
    state = platform_state(machine)
    if result.privileged is not None:
        state.privileged = result.privileged
    for note in result.notes:
        record.warnings.append(note)
        machine.note("pcie", note, level="warn" if "root" in note or "container" in note else "info")
    iommu = state.iommu
    if result.iommu_units is not None:
        iommu.units = list(result.iommu_units)
        iommu.enabled = bool(result.iommu_units)
    if result.iommu_groups is not None:
        counts: dict[str, int] = {}
        for kind in result.iommu_groups.values():
            counts[kind or "unknown"] = counts.get(kind or "unknown", 0) + 1
        iommu.group_types = counts
        base = "/sys/kernel/iommu_groups" if result.live or result.root in (None, "/") else \
            f"{result.root}/sys/kernel/iommu_groups"
        for device in result.devices:
            if not is_gpu_device(device) or device.iommu_group is None:
                continue
            kind = result.iommu_groups.get(str(device.iommu_group))
            if kind:
                iommu.gpu_group_types[device.bdf] = kind  # type: ignore[index]
                ref = SourceRef(record.path, None, f"{base}/{device.iommu_group}/type: {kind}  (GPU {device.bdf})")
                keep_source(iommu.sources, ref)
        if not iommu.gpu_group_types and counts:
            ref = SourceRef(record.path, None, f"{base}/*/type: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
            keep_source(iommu.sources, ref)
    update_iommu_mode(machine)
    attach_endpoints(machine)


def merge_cmdline(result: KernelCmdline, machine: Machine, record: InputRecord) -> None:
    _apply_cmdline(machine, result)
    update_iommu_mode(machine)


def merge_dmesg(result: DmesgResult, machine: Machine, record: InputRecord) -> None:
    state = platform_state(machine)
    # The same boot's log given twice (dmesg and journalctl -k) repeats lines: drop those another input already
    # gave. Identical lines inside one log are real repeats (a journal stamps to the second) and all count.
    known = {(e.kind, e.bdf, e.code, e.source.text) for e in state.events}
    for event in result.events:
        if (event.kind, event.bdf, event.code, event.source.text) not in known:
            state.events.append(event)
            if event.kind == "sxid":
                _sxid_to_fabric(event, machine)
    if result.default_domain:
        state.iommu.default_domain = result.default_domain
        for ref in result.iommu_lines:
            keep_source(state.iommu.sources, ref)
    if result.iommu_enabled is not None and state.iommu.enabled is None:
        state.iommu.enabled = result.iommu_enabled
    if result.cmdline and machine.host.kernel_cmdline is None:
        from k3diag.parse.kernel_cmdline import KernelCmdline, interpret

        parsed = interpret(result.cmdline, KernelCmdline(raw=result.cmdline, source=result.cmdline_source))
        _apply_cmdline(machine, parsed)
    update_iommu_mode(machine)


def _sxid_to_fabric(event: DmesgEvent, machine: Machine) -> None:
    """An NVSwitch SXid in the kernel log is the same fact as Fabric Manager's `detected NVSwitch ... error`
    line: the fabric rules judge both. Without its `Fatal,`/`Non-fatal,` line its severity is not known."""
    kind = {"fatal": "nvswitch-fatal", "non-fatal": "nvswitch-non-fatal"}.get(event.severity or "", "nvswitch-error")
    machine.fabric.fabric_manager.events.append(
        FabricManagerEvent(kind=kind, detail=str(event.code), source=event.source))


# -- devices ------------------------------------------------------------------------------


def upsert_device(machine: Machine, device: PciDevice) -> PciDevice:
    """Add a device, or fill the unknowns of the one already known by this bus id."""
    if device.bdf is None:
        machine.pci.append(device)
        return device
    device.bdf = normalize_bdf(device.bdf)
    existing = machine.pci_device(device.bdf)
    if existing is None:
        machine.pci.append(device)
        return device
    for name in ("description", "class_name", "class_code", "vendor_id", "device_id", "numa_node", "physical_slot",
                 "driver", "parent", "secondary_bus", "subordinate_bus", "primary_bus", "iommu_group", "port_type",
                 "host_bridge"):
        if getattr(existing, name) is None and getattr(device, name) is not None:
            setattr(existing, name, getattr(device, name))
    existing.is_bridge = existing.is_bridge or device.is_bridge
    if not existing.net_names and device.net_names:
        existing.net_names = list(device.net_names)
    existing.link = _merge_link(existing.link, device.link)
    if existing.acs is None and device.acs is not None:
        existing.acs = device.acs
    if device.capabilities_read is True or existing.capabilities_read is True:
        existing.capabilities_read = True
        existing.access_denied = False
    elif existing.capabilities_read is None:
        existing.capabilities_read = device.capabilities_read
        existing.access_denied = existing.access_denied or device.access_denied
    for ref in device.sources:
        existing.add_source(ref)
    if existing.source is None:
        existing.source = device.source
    return existing


def _add_to_empty(machine: Machine, devices: list[PciDevice]) -> None:
    """`upsert_device` of each of `devices`, in order, into a machine that holds no PCI device yet.

    When no two of them share a bus id, each would be new and appended as it is, its bus id normalized:
    that is done in one step (a 5,000-device `lspci -vv` merged ~3x faster, each device looked up
    and indexed once, by the machine's index, when a rule asks). Otherwise one by one, as ever."""
    bus_ids = []
    for device in devices:
        if device.bdf is not None:
            device.bdf = normalize_bdf(device.bdf)
            bus_ids.append(device.bdf)
    if len(set(bus_ids)) == len(bus_ids):
        machine.pci.extend(devices)
        return
    for device in devices:
        upsert_device(machine, device)


def _merge_link(old: PciLink | None, new: PciLink | None) -> PciLink | None:
    if old is None:
        return new
    if new is None:
        return old
    for name in ("cap_speed_gts", "cap_width", "sta_speed_gts", "sta_width", "target_speed_gts",
                 "supported_max_speed_gts", "port_number", "source", "cap_source"):
        if getattr(old, name) is None and getattr(new, name) is not None:
            setattr(old, name, getattr(new, name))
    for name in ("speed_downgraded", "width_downgraded"):
        if getattr(old, name) is None:
            setattr(old, name, getattr(new, name))
    old.recompute_downgrades()
    return old


# -- GPUs and NICs --------------------------------------------------------------------------


def attach_endpoints(machine: Machine) -> None:
    """Join GPUs and NICs to their PCI functions; know GPUs that only lspci/sysfs showed."""
    gpu_devices = sorted((d for d in machine.pci if is_gpu_device(d)), key=lambda d: d.bdf or "")
    if any(d.vendor_id == VENDOR_NVIDIA for d in gpu_devices):
        # A workstation's AMD integrated graphics next to NVIDIA GPUs is not one of "the GPUs".
        gpu_devices = [d for d in gpu_devices if d.vendor_id == VENDOR_NVIDIA]
    derived = bool(machine.extras.get(GPUS_FROM_PCI))
    if gpu_devices and (not machine.gpus or derived):
        known = {normalize_bdf(g.bus_id) for g in machine.gpus.values() if g.bus_id}
        wanted = [d.bdf for d in gpu_devices]
        if not machine.gpus or (derived and known != set(wanted) and known <= set(wanted)):
            machine.gpus.clear()
            for index, device in enumerate(gpu_devices):
                machine.gpus[index] = Gpu(index=index, bus_id=device.bdf)
            if not derived:
                machine.note(
                    "pcie",
                    "GPU indices here follow PCI bus order (the GPUs were known only from lspci/sysfs); nvidia-smi "
                    "numbers GPUs the same way, CUDA does only with CUDA_DEVICE_ORDER=PCI_BUS_ID",
                    level="info")
            machine.extras[GPUS_FROM_PCI] = True
    _assume_bus_order(machine, gpu_devices)
    for gpu in machine.gpus.values():
        device = machine.pci_device(gpu.bus_id) if gpu.bus_id else None
        if device is None:
            continue
        _fill_gpu(machine, gpu, device)
    for nic in machine.nics.values():
        device = machine.pci_device(nic.bus_id) if nic.bus_id else _device_named(machine, nic.device or nic.name)
        if device is None:
            continue
        if nic.bus_id is None:
            nic.bus_id = device.bdf
        if nic.numa_node is None:
            nic.numa_node = _numa_of(machine, device)


def _assume_bus_order(machine: Machine, gpu_devices: list[PciDevice]) -> None:
    """GPUs known by index only (`topo -m` gives no bus ids) meet their PCI functions in bus order:
    nvidia-smi numbers NVIDIA GPUs by PCI bus id, so GPU i is the i-th NVIDIA GPU on the bus."""
    gpus = machine.sorted_gpus()
    if not gpus or any(gpu.bus_id for gpu in gpus) or len(gpus) != len(gpu_devices):
        return
    if not all(device.vendor_id == VENDOR_NVIDIA for device in gpu_devices):
        return  # rocm-smi/amd-smi order is not bus order
    for gpu, device in zip(gpus, gpu_devices):
        gpu.bus_id = device.bdf
    machine.note("pcie", "the GPUs had no bus ids in the evidence; GPU i was matched to the i-th NVIDIA GPU in PCI "
                 "bus order, which is nvidia-smi's numbering (add `nvidia-smi -q` to confirm)", level="info")


def _fill_gpu(machine: Machine, gpu: Gpu, device: PciDevice) -> None:
    if gpu.vendor is None and device.vendor_id in _VENDOR_NAMES:
        gpu.vendor = _VENDOR_NAMES[device.vendor_id]  # type: ignore[index]
    if gpu.name is None and device.description and device.origin != "sysfs-snapshot":
        gpu.name = device.description
    if gpu.numa_node is None:
        gpu.numa_node = _numa_of(machine, device)
    link = device.link
    if link is not None:
        pcie = gpu.pcie
        if pcie.gen_current is None:
            pcie.gen_current = gen_from_speed(link.sta_speed_gts)
        if pcie.gen_max is None:
            pcie.gen_max = gen_from_speed(link.cap_speed_gts)
        if pcie.width_current is None and link.sta_width:
            pcie.width_current = link.sta_width
        if pcie.width_max is None and link.cap_width:
            pcie.width_max = link.cap_width
        if pcie.source is None:
            pcie.source = link.source
    keep_source(gpu.sources, device.source)


def _numa_of(machine: Machine, device: PciDevice) -> int | None:
    seen: set[str] = set()
    current: PciDevice | None = device
    while current is not None and current.bdf not in seen:
        if current.numa_node is not None:
            return current.numa_node
        seen.add(current.bdf or "")
        current = machine.pci_device(current.parent) if current.parent else None
    return None


def _device_named(machine: Machine, name: str | None) -> PciDevice | None:
    if not name:
        return None
    for device in machine.pci:
        if name in device.net_names:
            return device
    return None


# -- IOMMU and the kernel command line ---------------------------------------------------


def _apply_cmdline(machine: Machine, result: KernelCmdline) -> None:
    host: HostInfo = machine.host
    if result.raw and host.kernel_cmdline is None:
        host.kernel_cmdline = result.raw
    state = platform_state(machine)
    state.iommu.cmdline.update(result.iommu)
    if result.pci_noacs:
        state.iommu.pci_noacs = True
    if result.mode is not None:
        state.iommu.cmdline_mode = result.mode
    if result.iommu:
        keep_source(state.iommu.sources, result.source)
    keep_source(host.sources, result.source)


def update_iommu_mode(machine: Machine) -> None:
    """The IOMMU mode from the strongest evidence: the GPUs' own IOMMU groups, then all groups,
    then the kernel's boot message, then what the command line forces."""
    iommu = platform_state(machine).iommu
    mode: str | None = None
    gpu_types = set(iommu.gpu_group_types.values())
    all_types = set(iommu.group_types)
    if gpu_types or all_types:
        from k3diag.parse.sysfs_snapshot import PASSTHROUGH_TYPES, TRANSLATED_TYPES
    if gpu_types:
        mode = "translated" if gpu_types & set(TRANSLATED_TYPES) else (
            "passthrough" if gpu_types <= set(PASSTHROUGH_TYPES) else None)
    elif all_types - {"unknown"}:
        mode = "translated" if all_types & set(TRANSLATED_TYPES) else (
            "passthrough" if (all_types - {"unknown"}) <= set(PASSTHROUGH_TYPES) else None)
    elif iommu.enabled is False and not iommu.group_types:
        mode = "off"
    elif iommu.default_domain:
        mode = iommu.default_domain
    elif iommu.cmdline_mode:
        mode = iommu.cmdline_mode
    iommu.mode = mode
    if mode is not None:
        machine.host.iommu_mode = mode
