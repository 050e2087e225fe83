"""Put what NCCL said into the machine: one `NcclRun` per communicator, and NCCL's own
topology XML as facts about GPUs, NICs and NVLink pairs (never overriding a direct reading)."""

from __future__ import annotations

from k3diag.model.machine import InputRecord, Machine
from k3diag.model.topology import Link


def merge_nccl_log(result, machine: Machine, record: InputRecord | None = None) -> None:
    runs = getattr(result, "runs", None) or []
    for run in runs:
        if record is not None:
            run.input = record.path
        machine.nccl.append(run)


def merge_topo_xml(result, machine: Machine, record: InputRecord | None = None) -> None:
    origin = "nccl-topo-xml"
    by_bus: dict[str, int] = {}
    for gpu_info in getattr(result, "gpus", []) or []:
        gpu = None
        if gpu_info.bus_id:
            gpu = machine.gpu_by_bus_id(gpu_info.bus_id)
        if gpu is None and gpu_info.dev is not None:
            candidate = machine.gpus.get(gpu_info.dev)
            # the XML's dev is NCCL's CUDA device; only trust it when nothing contradicts it
            if candidate is None or candidate.bus_id is None or candidate.bus_id == gpu_info.bus_id:
                gpu = machine.gpu(gpu_info.dev)
        if gpu is None:
            continue
        if gpu.bus_id is None and gpu_info.bus_id:
            gpu.bus_id = gpu_info.bus_id
        if gpu.numa_node is None and gpu_info.numa is not None:
            gpu.numa_node = gpu_info.numa
        if gpu.pcie.gen_max is None and gpu_info.link_gen:
            gpu.pcie.gen_max = gpu_info.link_gen
        if gpu.pcie.width_max is None and gpu_info.link_width:
            gpu.pcie.width_max = gpu_info.link_width
        if gpu_info.source is not None:
            gpu.sources.append(gpu_info.source)
        if gpu.bus_id:
            by_bus[gpu.bus_id] = gpu.index
    seen: set[tuple[str, str]] = set()
    for gpu_info in getattr(result, "gpus", []) or []:
        if not gpu_info.bus_id or gpu_info.bus_id not in by_bus:
            continue
        a = f"GPU{by_bus[gpu_info.bus_id]}"
        for target, count in gpu_info.nvlinks:
            if target not in by_bus or count <= 0:
                continue  # NVSwitch targets are not GPUs
            b = f"GPU{by_bus[target]}"
            key = tuple(sorted((a, b)))
            if a == b or key in seen:
                continue
            seen.add(key)
            machine.add_link(Link(a=a, b=b, path=f"NV{count}", origin=origin, source=gpu_info.source))
    for nic_info in getattr(result, "nics", []) or []:
        if not nic_info.name:
            continue
        nic = machine.nic(nic_info.name)
        if nic.numa_node is None and nic_info.numa is not None:
            nic.numa_node = nic_info.numa
        if nic.bus_id is None and nic_info.bus_id:
            nic.bus_id = nic_info.bus_id
        if nic_info.source is not None:
            nic.sources.append(nic_info.source)
