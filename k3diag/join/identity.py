"""What one input says about its machine, read from the model that input alone builds.

Every merger already puts what its source prints (GPU names, UUIDs, bus ids, host names, driver
versions) into the model's records, each with its `SourceRef`; reading the keys back from a
machine built from one input covers every format the same way, including formats added later.
A parser can add keys its records do not hold by setting `identity` on its result.
"""

from __future__ import annotations

from k3diag.model.identity import InputIdentity
from k3diag.model.machine import InputRecord, Machine
from k3diag.model.source import SourceRef

# Formats that list every GPU the machine shows, so their GPU count is the machine's. A benchmark
# or a log may run on some of the GPUs (CUDA_VISIBLE_DEVICES, -g 2), so their count is only a floor.
FULL_INVENTORY_FORMATS = frozenset({
    "nvidia-smi-topo-matrix",
    "nvidia-smi-topo-p2p",
    "nvidia-smi-query",
    "nvidia-smi-query-gpu-csv",
    "nvml-readings",
    "rocm-smi-showtopo",
    "amd-smi-topology",
    "amdsmi-readings",
})

# Formats printed by a tool that runs on one vendor's GPUs only, so the GPUs they list are that vendor's.
# Other inputs (NCCL/RCCL logs, nccl-tests/rccl-tests, lspci) may be of either, and a merger's default
# vendor for them is a guess, not a key.
TOOL_VENDORS = {
    **dict.fromkeys(("nvidia-smi-topo-matrix", "nvidia-smi-topo-p2p", "nvidia-smi-query", "nvidia-smi-query-gpu-csv",
                     "nvidia-smi-query-fabric", "nvidia-smi-nvlink-status", "nvidia-smi-nvlink-capabilities",
                     "nvidia-smi-nvlink-remote", "nvml-readings", "nvbandwidth", "p2p-bandwidth-latency-test"),
                    "NVIDIA"),
    **dict.fromkeys(("rocm-smi-showtopo", "amd-smi-topology", "amd-smi-static-bus", "rocm-bandwidth-test",
                     "amdsmi-readings"), "AMD"),
}


def identity_of(machine: Machine, record: InputRecord) -> InputIdentity:
    """The keys of the one input `machine` was built from (its record's own keys included)."""
    identity = InputIdentity()
    identity.update(record.identity)
    host = machine.host
    host_source = host.sources[0] if getattr(host, "sources", None) else None
    identity.add_hostname(host.hostname, host_source)
    identity.set_driver(host.driver_version, _first(host, "driver_version"))
    identity.set_cuda(host.cuda_version, _first(host, "cuda_version"))
    for gpu in machine.sorted_gpus():
        source = gpu.sources[0] if gpu.sources else None
        identity.add_name(gpu.name, source)
        identity.add_uuid(gpu.uuid, source)
        identity.add_bus_id(gpu.bus_id, source)
        identity.add_serial(getattr(gpu, "serial", None), source)
    if record.format == "nvidia-smi-topo-matrix":
        # Only the matrix's own columns: other sources read NUMA nodes from sysfs, which a VM or a
        # container may report differently from the host's `topo -m` of the same machine.
        for gpu in machine.sorted_gpus():
            row = gpu.sources[0] if gpu.sources else None
            identity.add_affinity(f"GPU{gpu.index}", gpu.cpu_affinity, gpu.numa_node, row)
    for run in machine.nccl:
        vendor = _library_vendor(run)
        if vendor is not None:
            identity.add_vendor(vendor, run.version_source)
        for rank in run.ranks:
            identity.add_hostname(rank.host, rank.source)
            identity.add_bus_id(rank.bus_id, rank.source)
        for name in run.hosts:
            identity.add_hostname(name, run.version_source)
    for bench in machine.benchmarks:
        _benchmark_keys(bench, identity)
    if not machine.gpus:
        _pci_gpu_keys(machine, identity)
    vendor = TOOL_VENDORS.get(record.format or "")
    if vendor is not None and (machine.gpus or machine.benchmarks):
        identity.add_vendor(vendor, _count_source(machine) or _bench_source(machine))
    seen = _gpus_seen(machine, identity)
    # a header cut short (`GPU0  GPU1  GPU2  ...`) lists some of the GPUs: their number is a floor, not a count
    if record.format in FULL_INVENTORY_FORMATS and machine.gpus and not machine.gpu_list_cuts:
        identity.set_count(len(machine.gpus), _count_source(machine))
    identity.gpus_seen = seen
    return identity


def _first(host, field_name: str) -> SourceRef | None:
    # HostInfo keeps its sources in a list without saying which field each backs; the first
    # one is the line the host facts were read from, which is what a reader needs to check.
    sources = getattr(host, "sources", None) or []
    return sources[0] if sources else None


def _benchmark_keys(bench, identity: InputIdentity) -> None:
    """Devices a benchmark names: nccl-tests' "Using devices" lines (host, bus id, name), nvbandwidth's
    and rocm-bandwidth-test's device lists, p2pBandwidthLatencyTest's `Device: N, NAME, pciBusID` lines."""
    header = getattr(bench, "header_source", None)
    sources = getattr(bench, "sources", None)
    for device in (getattr(bench, "devices", None) or []) + (getattr(bench, "gpus", None) or []):
        def value(name: str):
            return device.get(name) if isinstance(device, dict) else getattr(device, name, None)

        if value("type") == "cpu":
            continue
        own = sources.get(f"device:{value('index')}") if isinstance(sources, dict) else None
        source = value("source") if isinstance(value("source"), SourceRef) else (own or header)
        identity.add_hostname(value("host"), source)
        identity.add_bus_id(value("bus_id"), source)
        identity.add_name(value("name"), source)
        identity.add_uuid(value("uuid"), source)


def _pci_gpu_keys(machine: Machine, identity: InputIdentity) -> None:
    """An lspci or sysfs reading names no GPU model, but its accelerators' bus ids are keys."""
    if not machine.pci:
        return
    from k3diag.model.pcie_tree import is_gpu_device

    for device in machine.pci:
        if is_gpu_device(device):
            identity.add_bus_id(device.bdf, device.sources[0] if getattr(device, "sources", None) else None)


def _gpus_seen(machine: Machine, identity: InputIdentity) -> int:
    """How many GPUs this input shows at least; 0 when it spans several hosts (a count per host is unknown)."""
    if len(identity.hostnames) > 1:
        return 0
    return max(len(machine.gpus), len(identity.gpu_bus_ids), len(identity.gpu_uuids))


def _library_vendor(run) -> str | None:
    """RCCL runs on AMD GPUs; NCCL on NVIDIA's only when its version line says it was built with CUDA
    (`2.18.5+cuda12.0`): a log without an RCCL sign is taken for NCCL, which is no proof of whose GPUs."""
    if run.library == "RCCL":
        return "AMD"
    version = (run.version or "").lower()
    if run.library == "NCCL" and "+cuda" in version:
        return "NVIDIA"
    return None


def _bench_source(machine: Machine) -> SourceRef | None:
    for bench in machine.benchmarks:
        header = getattr(bench, "header_source", None)
        if isinstance(header, SourceRef):
            return header
    return None


def _count_source(machine: Machine) -> SourceRef | None:
    for gpu in machine.sorted_gpus():
        if gpu.sources:
            return gpu.sources[0]
    return None
