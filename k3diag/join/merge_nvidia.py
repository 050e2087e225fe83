"""Put what the NVIDIA parsers read into the `Machine`.

GPU identity: nvidia-smi numbers GPUs in PCI bus-id order, and `topo -m`, `-q`, the CSV and
NVML all use that numbering. A GPU that another input already placed is found by its bus id
first (a `-q -i 3` block, or a CSV with rows left out, cannot be trusted for its position),
then by index. A value already known is kept; a different one is reported, not hidden.
"""

from __future__ import annotations

import re
from typing import Any

from k3diag.model.machine import InputRecord, Machine
from k3diag.model.source import SourceRef, keep_source
from k3diag.model.topology import Gpu, Link, P2PStatus, PcieLinkState, pair_key
from k3diag.model.ids import normalize_bdf

_GPU_RE = re.compile(r"^GPU(\d+)$")
_NEAR_PATHS = {"PIX", "PXB", "PSB", "PHB", "NODE"}  # all stay inside one NUMA node


def merge_topo_matrix(result: Any, machine: Machine, record: InputRecord) -> None:
    # `topo -mp` hides NVLink: its paths say nothing about whether an NVLink joins a pair.
    origin = "nvidia-smi-topo-mp" if getattr(result, "pcie_only", None) else "nvidia-smi-topo-matrix"
    _note_numa_spans(result, machine)
    _note_gpu_list_cut(result, machine)
    for name, row in result.rows.items():
        index = row.gpu_index
        if index is not None:
            gpu = machine.gpu(index)
            gpu.vendor = gpu.vendor or "NVIDIA"
            _fill(gpu, "cpu_affinity", row.cpu_affinity, record, row.source)
            _fill(gpu, "numa_node", row.numa_node, record, row.source)
            _fill(gpu, "gpu_numa_id", row.gpu_numa_id, record, row.source)
            keep_source(gpu.sources, row.source)
    for name in result.endpoints:
        match = _GPU_RE.match(name)
        if match:
            gpu = machine.gpu(int(match.group(1)))
            gpu.vendor = gpu.vendor or "NVIDIA"
            continue
        nic = machine.nic(name)
        if name in result.nic_legend:
            nic.device = result.nic_legend[name]
        row = result.rows.get(name)
        if row is not None:
            keep_source(nic.sources, row.source)
    seen: dict[tuple[str, str], Any] = {}
    for cell in result.cells:
        key = pair_key(cell.row, cell.col)
        if key in seen:
            continue
        seen[key] = cell
        machine.add_link(Link(a=key[0], b=key[1], path=cell.value, origin=origin, source=cell.source))
    _infer_nic_numa(machine, result)


def _note_gpu_list_cut(result: Any, machine: Machine) -> None:
    if getattr(result, "gpu_list_cut", False) and result.header_source is not None:
        machine.gpu_list_cuts.append(result.header_source)


def _infer_nic_numa(machine: Machine, result: Any) -> None:
    """A NIC on a PIX/PXB/PHB/NODE path to a GPU shares that GPU's NUMA node (the legend says so)."""
    for cell in result.cells:
        for nic_name, gpu_name in ((cell.row, cell.col), (cell.col, cell.row)):
            gpu_match = _GPU_RE.match(gpu_name)
            if nic_name not in machine.nics or gpu_match is None or cell.value not in _NEAR_PATHS:
                continue
            gpu = machine.gpus.get(int(gpu_match.group(1)))
            nic = machine.nics[nic_name]
            if gpu is not None and gpu.numa_node is not None and nic.numa_node is None:
                nic.numa_node = gpu.numa_node


def merge_topo_p2p(result: Any, machine: Machine, record: InputRecord) -> None:
    _note_gpu_list_cut(result, machine)
    for cell in result.cells:
        for name in (cell.src, cell.dst):
            match = _GPU_RE.match(name)
            if match:
                gpu = machine.gpu(int(match.group(1)))
                gpu.vendor = gpu.vendor or "NVIDIA"
        machine.p2p.append(
            P2PStatus(
                src=cell.src,
                dst=cell.dst,
                capability=result.capability,
                status=cell.status,
                origin="nvidia-smi-topo-p2p",
                source=cell.source,
            )
        )


def merge_query(result: Any, machine: Machine, record: InputRecord) -> None:
    _host_versions(machine, record, result.driver_version, result.cuda_version, result.sources)
    for item in result.gpus:
        gpu = _place(machine, record, item.bus_id or item.block_bus_id, item.index, item.sources.get("block"))
        if gpu is None:
            continue
        sources = item.sources
        _fill(gpu, "name", item.name, record, sources.get("name"))
        _fill(gpu, "uuid", item.uuid, record, sources.get("uuid"))
        _fill(gpu, "performance_state", item.performance_state, record, sources.get("performance_state"))
        _fill(gpu, "memory_total_mib", item.memory_total_mib, record, sources.get("memory_total_mib"))
        _merge_pcie(
            gpu,
            record,
            _pcie_values(item),
            sources.get("width_current") or sources.get("gen_current"),
        )
        gpu.sources.extend(ref for ref in (sources.get("block"), sources.get("width_current")) if ref is not None)
        if item.fabric is not None:
            from k3diag.join.merge_fabric import put_gpu_fabric

            put_gpu_fabric(machine, gpu.index, item.fabric, record)


def _pcie_values(item: Any) -> dict[str, int | None]:
    """The PCIe link fields `nvidia-smi -q` and `--query-gpu` records share, by the model's names."""
    return {key: getattr(item, key) for key in
            ("gen_current", "gen_max", "gen_device_max", "gen_host_max", "width_current", "width_max")}


def merge_query_csv(result: Any, machine: Machine, record: InputRecord) -> None:
    for item in result.gpus:
        gpu = _place(machine, record, item.bus_id, item.index, item.source)
        if gpu is None:
            continue
        for attribute in ("name", "uuid", "performance_state", "memory_total_mib"):
            _fill(gpu, attribute, getattr(item, attribute), record, item.source)
        _merge_pcie(
            gpu,
            record,
            _pcie_values(item),
            item.source,
        )
        if item.driver_version:
            _host_versions(machine, record, item.driver_version, None, {"driver_version": item.source})
        keep_source(gpu.sources, item.source)


def merge_nvml(result: Any, machine: Machine, record: InputRecord) -> None:
    if result.error:
        machine.note("nvml", result.error)
    _host_versions(machine, record, result.driver_version, result.cuda_version, {})
    for device in result.devices:
        gpu = _place(machine, record, device.bus_id, device.index, device.source)
        if gpu is None:
            continue
        for attribute in ("name", "uuid", "numa_node", "gpu_numa_id", "cpu_affinity", "performance_state", "memory_total_mib"):
            _fill(gpu, attribute, getattr(device, attribute), record, device.source)
        _merge_pcie(
            gpu,
            record,
            {
                "gen_current": device.gen_current,
                "gen_max": device.gen_max,
                "gen_device_max": device.gen_device_max,
                "width_current": device.width_current,
                "width_max": device.width_max,
            },
            device.pcie_source,
        )
        keep_source(gpu.sources, device.source)
    for pair in result.pairs:
        a, b = pair_key(f"GPU{pair.a}", f"GPU{pair.b}")
        machine.add_link(Link(a=a, b=b, path=pair.path, origin="nvml", source=pair.source))
    from k3diag.join.merge_fabric import merge_nvml_fabric

    merge_nvml_fabric(result, machine, record)
    for reading in result.p2p:
        machine.p2p.append(
            P2PStatus(
                src=f"GPU{reading.src}",
                dst=f"GPU{reading.dst}",
                capability=reading.capability,
                status=reading.status,
                origin="nvml",
                source=reading.source,
            )
        )


# --------------------------------------------------------------------------- helpers
def _place(
    machine: Machine, record: InputRecord, bus_id: str | None, index: int | None, source: SourceRef | None
) -> Gpu | None:
    """The GPU this reading is about: by bus id when known, else by index; None when neither says."""
    normalized = normalize_bdf(bus_id) if bus_id else None
    gpu = machine.gpu_by_bus_id(normalized) if normalized else None
    if gpu is not None:
        if index is not None and gpu.index != index:
            record.warnings.append(
                f"the GPU at {normalized} is GPU{gpu.index} in another input but GPU{index} here; "
                f"GPU{gpu.index} is kept (matched by bus id)"
            )
        return gpu
    if index is None:
        record.warnings.append(
            f"a GPU{' at ' + normalized if normalized else ''} could not be placed: neither its index nor its bus id "
            "is known from this input"
        )
        return None
    existing = machine.gpus.get(index)
    if existing is not None and existing.bus_id and normalized and existing.bus_id != normalized:
        record.warnings.append(
            f"GPU{index} is at {existing.bus_id} in another input but this one puts {normalized} there; "
            "the inputs may come from different hosts"
        )
        return None
    gpu = machine.gpu(index)
    gpu.vendor = gpu.vendor or "NVIDIA"
    if normalized and gpu.bus_id is None:
        gpu.bus_id = normalized
    return gpu


def _fill(target: Any, attribute: str, value: Any, record: InputRecord, source: SourceRef | None) -> None:
    if value is None:
        return
    current = getattr(target, attribute, None)
    if current is None:
        setattr(target, attribute, value)
        return
    if current != value and attribute not in ("performance_state",):
        label = getattr(target, "label", "")
        where = f" ({source.cite()})" if source is not None else ""
        record.warnings.append(f"{label} {attribute.replace('_', ' ')}: {value!r} here, {current!r} elsewhere; kept {current!r}{where}")


def _merge_pcie(gpu: Gpu, record: InputRecord, values: dict[str, int | None], source: SourceRef | None) -> None:
    if all(value is None for value in values.values()):
        return
    state = gpu.pcie
    if state.source is None:
        # The first reading that has a link state owns it, so current/max come from one moment.
        gpu.pcie = PcieLinkState(**{key: value for key, value in values.items()}, source=source)
        # Keep whatever an earlier partial source left that this one lacks.
        for key in values:
            if getattr(gpu.pcie, key) is None and getattr(state, key) is not None:
                setattr(gpu.pcie, key, getattr(state, key))
        return
    for key, value in values.items():
        if value is not None and getattr(state, key) is None:
            setattr(state, key, value)


def _host_versions(
    machine: Machine, record: InputRecord, driver: str | None, cuda: str | None, sources: dict[str, SourceRef]
) -> None:
    host = machine.host
    if driver:
        if host.driver_version is None:
            host.driver_version = driver
            keep_source(host.sources, sources.get("driver_version"))
        elif host.driver_version != driver:
            record.warnings.append(
                f"driver version {driver} here, {host.driver_version} in another input: are these from one host?"
            )
    if cuda and host.cuda_version is None:
        host.cuda_version = cuda
        keep_source(host.sources, sources.get("cuda_version"))


def _note_numa_spans(result: Any, machine: Machine) -> None:
    """`NUMA Affinity` `0-1` on every GPU: a VM whose guest NUMA layout hides where each GPU sits
    (bare metal prints one node per GPU). Not a Grace board (GB200, GH200, GB10): there each GPU's list holds
    its CPU's node and the nodes of GPU memory, and the `GPU NUMA ID` column names the GPU's own node."""
    from k3diag.model.virtual import VM, add_virtual_sign

    rows = [row for row in result.rows.values() if row.gpu_index is not None]
    spans = [row for row in rows if row.numa_affinity and any(sep in row.numa_affinity for sep in "-,")
             and row.gpu_numa_id is None]
    if rows and len(spans) == len(rows) and len(rows) > 1:
        add_virtual_sign(machine, VM, f"NUMA affinity {spans[0].numa_affinity} on every GPU (nvidia-smi topo -m)",
                         spans[0].source)
