"""Put what NCCL said into the machine: one `NcclRun` per communicator, and NCCL's own
topology XML as facts about GPUs, NICs and NVLink pairs (never overriding a direct reading)."""

from __future__ import annotations

from k3diag.model.machine import InputRecord, Machine
from k3diag.model.source import keep_source
from k3diag.model.topology import Link
from k3diag.model.words import counted


NCCL_LOG_ORIGIN = "nccl-log"
# NCCL's GPU path types as `nvidia-smi topo -m` codes. NCCL's PHB covers both PHB and NODE (one
# socket, across host bridges); NVB (NVLink through another GPU), C2C, P2C, PXN are not a direct link.
_PATH_CODES = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "SYS": "SYS"}
_NVLINK_GBPS = 20.0  # NCCL's per-link NVLink bandwidth for SM80/SM90 (`ncclTopoGetNvbGpus`, `SM80_NVLINK_BW`)


def merge_nccl_log(result, machine: Machine, record: InputRecord | None = None) -> None:
    runs = getattr(result, "runs", None) or []
    for run in runs:
        if record is not None:
            run.input = record.path
        machine.nccl.append(run)
    summary = getattr(result, "summary", None)
    if summary is not None and (summary.runs_summarized or summary.not_kept):
        machine.extras.setdefault("nccl_summaries", []).append((record.path if record else None, summary))
    host = local_host(machine, runs)
    if host is None:
        return
    _gpus_from_ranks(machine, runs, host)
    _links_from_paths(machine, runs, host)


def local_host(machine: Machine, runs: list) -> str | None:
    """The host of the log that is this machine: the machine's own name, else the log's only host."""
    own = _short(machine.host.hostname)
    hosts = {h for run in runs for h in run.hosts} | {p.host for run in runs for p in run.paths if p.host}
    if own:
        return next((h for h in sorted(hosts) if _short(h) == own), None)
    if len(hosts) == 1:
        return next(iter(hosts))
    if not hosts and any(run.paths for run in runs):
        return ""  # a path dump without host prefixes: one machine's
    return None


def _short(host: str | None) -> str | None:
    return host.split(".")[0].lower() if host else None


def _gpu_for_bus(machine: Machine, bus_id: str, nvml_dev: int | None, order: list[str]):
    """The GPU with this bus id; created from NCCL's init line when no other input named it, at its
    NVML index (`nvmlDev`, nvidia-smi's numbering) or else its place in PCI bus order."""
    gpu = machine.gpu_by_bus_id(bus_id)
    if gpu is not None:
        return gpu
    for index in ([nvml_dev] if nvml_dev is not None else []) + [order.index(bus_id) if bus_id in order else None]:
        if index is None:
            continue
        candidate = machine.gpus.get(index)
        if candidate is None or candidate.bus_id is None:
            gpu = machine.gpu(index)
            gpu.bus_id = bus_id
            gpu.vendor = gpu.vendor or "NVIDIA"
            return gpu
    return None


def _gpus_from_ranks(machine: Machine, runs: list, host: str) -> None:
    seen: dict[str, tuple] = {}
    for run in runs:
        for info in run.ranks:
            if info.bus_id and (info.host == host or (not info.host and not host)) and info.bus_id not in seen:
                seen[info.bus_id] = (info.nvml_dev, info.source)
        for path in run.paths:
            if path.host == host or (not host and not path.host):
                for bus in (path.src_bus_id, path.dst_bus_id):
                    if bus and bus not in seen:
                        seen[bus] = (None, path.source)
    order = sorted(seen)
    for bus_id, (nvml_dev, source) in seen.items():
        gpu = _gpu_for_bus(machine, bus_id, nvml_dev, order)
        if gpu is not None:
            keep_source(gpu.sources, source)


def _links_from_paths(machine: Machine, runs: list, host: str) -> None:
    """NCCL's own GPU-to-GPU path classification (`NCCL_DEBUG_SUBSYS=GRAPH`) as links: a log alone then
    tells which pairs share a switch, a socket or NVLink."""
    for run in runs:
        for path in run.paths:
            if not (path.src_bus_id and path.dst_bus_id) or not (path.host == host or (not host and not path.host)):
                continue
            code = _PATH_CODES.get(path.path_type)
            if code is None and path.path_type == "NVL":
                code = f"NV{max(1, round((path.bw or _NVLINK_GBPS) / _NVLINK_GBPS))}"
            a, b = machine.gpu_by_bus_id(path.src_bus_id), machine.gpu_by_bus_id(path.dst_bus_id)
            if code is None or a is None or b is None or a.index == b.index:
                continue
            machine.add_link(Link(a=f"GPU{a.index}", b=f"GPU{b.index}", path=code, hops=path.hops,
                                  origin=NCCL_LOG_ORIGIN, source=path.source))


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
        keep_source(gpu.sources, gpu_info.source)
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
    _xml_paths(result, machine, by_bus, seen, origin)
    _xml_virtual_signs(result, machine)
    for nic_info in getattr(result, "nics", []) or []:
        if not nic_info.name:
            continue
        nic = machine.nic(nic_info.name)
        if nic.numa_node is None and nic_info.numa is not None:
            nic.numa_node = nic_info.numa
        if nic.bus_id is None and nic_info.bus_id:
            nic.bus_id = nic_info.bus_id
        keep_source(nic.sources, nic_info.source)


def _xml_paths(result, machine: Machine, by_bus: dict[str, int], nvlinked: set, origin: str) -> None:
    """PCIe path classes from where NCCL placed each GPU: under different CPUs SYS, under one CPU with no
    PCI bridge in common PHB (through the host bridge), behind one bridge PIX, behind several PXB. Pairs
    joined by NVLink keep only their NVLink reading; GPUs whose CPU has no NUMA id are left unknown."""
    placed = [g for g in getattr(result, "gpus", []) or [] if g.bus_id in by_bus]
    for i, first in enumerate(placed):
        for second in placed[i + 1:]:
            a, b = f"GPU{by_bus[first.bus_id]}", f"GPU{by_bus[second.bus_id]}"
            if a == b or tuple(sorted((a, b))) in nvlinked:
                continue
            path = _pcie_path(first, second)
            if path is not None:
                machine.add_link(Link(a=a, b=b, path=path, origin=origin, source=first.source))


def _pcie_path(first, second) -> str | None:
    if first.numa is None or second.numa is None or first.numa < 0 or second.numa < 0:
        return None
    if first.numa != second.numa:
        return "SYS"
    common = 0
    for x, y in zip(getattr(first, "pci_path", []), getattr(second, "pci_path", [])):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB"
    if common == len(first.pci_path) == len(second.pci_path) and common == 1:
        return "PIX"
    return "PXB"


def _xml_virtual_signs(result, machine: Machine) -> None:
    from k3diag.model.virtual import VM, add_virtual_sign

    gpus = getattr(result, "gpus", []) or []
    hidden = [g for g in gpus if getattr(g, "hidden_link", False)]
    if hidden:
        add_virtual_sign(machine, VM, f"link_width 0 for {counted(len(hidden), 'GPU')} in NCCL's topology XML "
                                      "(the hypervisor hides the PCIe link)",
                         getattr(hidden[0], "link_source", None) or hidden[0].source)
    unknown = [g for g in gpus if getattr(g, "numa_unknown", False)]
    if unknown:
        add_virtual_sign(machine, VM, f"numaid -1 above {counted(len(unknown), 'GPU')} in NCCL's topology XML "
                                      "(no NUMA placement is visible)", unknown[0].source)
