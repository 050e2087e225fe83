"""GPUs that benchmarks name: nccl-tests' "Using devices" lines and p2pBandwidthLatencyTest's Device lines.

Run once all inputs of a machine are merged, so the order the files came in does not matter. A
device is matched to a GPU of the machine by bus id and fills what the inventory lacks (the model
name: a GeForce name in an nccl-tests header explains refused P2P in another file). A benchmark
never creates GPUs: it may run on some of them, and its device numbers are CUDA's, not nvidia-smi's.
Devices spread over several hosts (a multi-node run) name no GPU of this machine in particular and
are left alone.
"""

from __future__ import annotations

from k3diag.model.ids import normalize_bdf
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef, keep_source


def fill_inventory(machine: Machine) -> None:
    devices: dict[str, tuple[str, str | None, str | None, SourceRef | None]] = {}
    for bench in machine.benchmarks:
        listed = _devices(bench)
        if len({host for _, _, host, _ in listed if host}) > 1:
            continue
        for device in listed:
            known = devices.get(device[0])
            if known is None or (known[1] is None and device[1]):
                devices[device[0]] = device
    if not devices:
        return
    for bus_id, name, _, source in devices.values():
        gpu = machine.gpu_by_bus_id(bus_id)
        if gpu is None or gpu.name is not None or not name:
            continue
        gpu.name = name
        if gpu.vendor is None:
            gpu.vendor = _vendor(name)
        keep_source(gpu.sources, source)


def _devices(bench) -> list[tuple[str, str | None, str | None, SourceRef | None]]:
    """(bus id, name, host, source) of every device the benchmark names with a bus id."""
    found = []
    header = getattr(bench, "header_source", None)
    sources = getattr(bench, "sources", None)
    device_source = sources.get("devices") if isinstance(sources, dict) else None
    for device in (getattr(bench, "devices", None) or []) + (getattr(bench, "gpus", None) or []):
        if isinstance(device, dict):  # nvbandwidth's device list: no bus ids worth trusting for a join
            continue
        bus = getattr(device, "bus_id", None)
        if not bus:
            continue
        index = getattr(device, "index", None)
        own = sources.get(f"device:{index}") if isinstance(sources, dict) and index is not None else None
        source = getattr(device, "source", None) or own or device_source or header
        found.append((normalize_bdf(bus), getattr(device, "name", None), getattr(device, "host", None), source))
    return found


def _vendor(name: str | None) -> str | None:
    if not name:
        return None
    lowered = name.lower()
    if "nvidia" in lowered or "geforce" in lowered or "tesla" in lowered or "quadro" in lowered:
        return "NVIDIA"
    if "amd" in lowered or "instinct" in lowered or "radeon" in lowered:
        return "AMD"
    return None
