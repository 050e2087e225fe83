"""Everything k3diag gathers from a live host, as evidence.

Each source is optional: a missing tool or library becomes evidence with an `error`
sentence, and the rest is still collected. The same evidence goes into bundles.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from typing import Callable

from k3diag.collect.host import collect_host
from k3diag.collect.runner import Deadline, run_command
from k3diag.evidence import Evidence

# (file name in a bundle, argv, format) for each command worth running when its tool exists.
NVIDIA_COMMANDS: tuple[tuple[str, list[str], str], ...] = (
    ("nvidia-smi-topo-m.txt", ["nvidia-smi", "topo", "-m"], "nvidia-smi-topo-matrix"),
    ("nvidia-smi-topo-p2p-r.txt", ["nvidia-smi", "topo", "-p2p", "r"], "nvidia-smi-topo-p2p"),
    ("nvidia-smi-topo-p2p-w.txt", ["nvidia-smi", "topo", "-p2p", "w"], "nvidia-smi-topo-p2p"),
    ("nvidia-smi-topo-p2p-n.txt", ["nvidia-smi", "topo", "-p2p", "n"], "nvidia-smi-topo-p2p"),
    ("nvidia-smi-topo-p2p-a.txt", ["nvidia-smi", "topo", "-p2p", "a"], "nvidia-smi-topo-p2p"),
    ("nvidia-smi-topo-p2p-p.txt", ["nvidia-smi", "topo", "-p2p", "p"], "nvidia-smi-topo-p2p"),
    ("nvidia-smi-q.txt", ["nvidia-smi", "-q"], "nvidia-smi-query"),
    # NVLink per link (speed or <inactive>), its far ends (NVSwitch or GPU), and the fabric registration.
    ("nvidia-smi-nvlink-s.txt", ["nvidia-smi", "nvlink", "-s"], "nvidia-smi-nvlink-status"),
    ("nvidia-smi-nvlink-r.txt", ["nvidia-smi", "nvlink", "-R"], "nvidia-smi-nvlink-remote"),
    ("nvidia-smi-q-fabric.txt", ["nvidia-smi", "-q", "-d", "FABRIC"], "nvidia-smi-query-fabric"),
    (
        "nvidia-smi-query-gpu.csv",
        [
            "nvidia-smi",
            "--query-gpu=index,name,pci.bus_id,uuid,pstate,memory.total,pcie.link.gen.current,pcie.link.gen.max,"
            "pcie.link.width.current,pcie.link.width.max",
            "--format=csv",
        ],
        "nvidia-smi-query-gpu-csv",
    ),
)
PCI_COMMANDS: tuple[tuple[str, list[str], str], ...] = (
    ("lspci-vv.txt", ["lspci", "-vv"], "lspci-vv"),
    ("lspci-tv.txt", ["lspci", "-tv"], "lspci-tv"),
)
# RDMA ports as the verbs tools show them (the sysfs snapshot records the same from /sys/class/infiniband).
RDMA_COMMANDS: tuple[tuple[str, list[str], str], ...] = (
    ("ibstat.txt", ["ibstat"], "ibstat"),
    ("ibv_devinfo.txt", ["ibv_devinfo", "-v"], "ibv-devinfo"),
)
AMD_COMMANDS: tuple[tuple[str, list[str], str], ...] = (
    ("amd-smi-topology.json", ["amd-smi", "topology", "--json"], "amd-smi-topology"),
    ("rocm-smi-showtopo.txt", ["rocm-smi", "--showtopo"], "rocm-smi-showtopo"),
)


def _optional(module: str, function: str) -> Callable | None:
    """A collector another layer provides, or None if that layer is not installed."""
    try:
        return getattr(importlib.import_module(module), function)
    except ModuleNotFoundError:
        return None


# Drivers of NICs that GPUDirect RDMA can use. NVML gives GPU-GPU paths but no GPU-NIC path, so
# with such a NIC present the live report still runs `nvidia-smi topo -m` (its NIC columns).
RDMA_NIC_DRIVERS = frozenset({"mlx5_core", "mlx4_core", "bnxt_en", "irdma", "ice", "efa", "ionic", "qede", "cxgb4"})


def _snapshot_has_rdma_nic(item: Evidence | None) -> bool:
    if item is None or item.error or not item.data:
        return False
    try:
        doc = json.loads(item.data)
    except ValueError:
        return False
    devices = doc.get("devices") if isinstance(doc, dict) else None
    return any(isinstance(d, dict) and d.get("driver") in RDMA_NIC_DRIVERS for d in devices or [])


def _readings_hold_gpus(item: Evidence) -> bool:
    """NVML/amdsmi readings that list at least one GPU: the report needs no nvidia-smi text then."""
    if item.error or not item.data:
        return False
    try:
        doc = json.loads(item.data)
    except ValueError:
        return False
    return bool(isinstance(doc, dict) and doc.get("devices"))


def link_class_evidence() -> list[Evidence]:
    """In-process GPU readings (NVML, amdsmi): names, bus ids and PCIe link state, in milliseconds."""
    evidence: list[Evidence] = []
    for module, function, name in (("k3diag.collect.nvml", "collect_nvml", "nvml-readings.json"),
                                   ("k3diag.collect.amdsmi", "collect_amdsmi", "amdsmi-readings.json")):
        collector = _optional(module, function)
        if collector is None:
            continue
        try:
            evidence.append(collector())
        except Exception as exc:  # a collector bug must not cost the probe its report
            evidence.append(Evidence(name=name, kind="reading", error=f"{function} failed: {exc}"))
    return evidence


def collect_live(
    root: Path = Path("/"),
    timeout_s: float = 20.0,
    progress: Callable[[str], None] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    texts: str = "all",
    deadline: Deadline | None = None,
) -> list[Evidence]:
    """Every source of this host. `texts="all"` (collect) also saves every tool's text output;
    `texts="missing"` (a live report) runs a tool only for facts the in-process readings lack:
    every `nvidia-smi` text when NVML listed no GPU, else only `nvidia-smi topo -m` and only when an
    RDMA NIC is present (its GPU-NIC columns); `lspci` when sysfs gave no PCI snapshot. So `k3diag
    topo` answers in the time NVML takes instead of eight nvidia-smi runs (seconds each on a big box).
    `timeout_s` bounds each command, `deadline` the whole collection: commands asked for after it are
    not started, and their evidence says so."""
    deadline = deadline or Deadline(None)

    def step(message: str) -> None:
        if progress is not None:
            progress(message)

    evidence: list[Evidence] = []
    step("host layout (CPU packages, NUMA nodes)")
    evidence.append(collect_host(root))

    collect_platform = _optional("k3diag.collect.sysfs", "collect_platform")
    if collect_platform is not None:
        step("PCIe devices, IOMMU and kernel settings from sysfs")
        try:
            evidence.extend(collect_platform(root=root, run_dmesg=root == Path("/")))
        except Exception as exc:  # a collector bug must not cost the whole report
            evidence.append(Evidence(name="sysfs-snapshot.json", kind="reading", error=f"sysfs collection failed: {exc}"))

    collect_nvml = _optional("k3diag.collect.nvml", "collect_nvml")
    if collect_nvml is not None:
        step("NVIDIA GPUs through NVML")
        try:
            evidence.append(collect_nvml())
        except Exception as exc:
            evidence.append(Evidence(name="nvml-readings.json", kind="reading", error=f"NVML collection failed: {exc}"))

    collect_amdsmi = _optional("k3diag.collect.amdsmi", "collect_amdsmi")
    if collect_amdsmi is not None:
        step("AMD GPUs through amdsmi")
        try:
            evidence.append(collect_amdsmi())
        except Exception as exc:
            evidence.append(Evidence(name="amdsmi-readings.json", kind="reading", error=f"amdsmi collection failed: {exc}"))

    groups = [(NVIDIA_COMMANDS, "nvidia-smi"), (PCI_COMMANDS, "lspci"), (RDMA_COMMANDS, None), (AMD_COMMANDS, None)]
    if texts == "missing":
        by_name = {item.name: item for item in evidence}
        nvml_read = any(_readings_hold_gpus(item) for item in evidence if item.name == "nvml-readings.json")
        amd_read = any(_readings_hold_gpus(item) for item in evidence if item.name == "amdsmi-readings.json")
        sysfs = by_name.get("sysfs-snapshot.json")
        if nvml_read:
            groups[0] = (NVIDIA_COMMANDS[:1] if _snapshot_has_rdma_nic(sysfs) else (), "nvidia-smi")
        groups = [(group, tool) for group, tool in groups
                  if group
                  and not (tool == "lspci" and sysfs is not None and sysfs.error is None)
                  and not (group is RDMA_COMMANDS and sysfs is not None and sysfs.error is None)
                  and not (group is AMD_COMMANDS and amd_read)]
    for group, tool in groups:
        for name, argv, fmt in group:
            if which(argv[0]) is None:
                if tool is not None and argv is group[0][1]:
                    evidence.append(Evidence(name=name, kind="command", command=" ".join(argv),
                                             error=f"`{argv[0]}` is not installed or not on PATH"))
                continue
            step(" ".join(argv))
            evidence.append(run_command(argv, name=name, timeout_s=timeout_s, format_hint=None, deadline=deadline))
            if evidence[-1].timed_out and argv[0] == "nvidia-smi":
                # One hung nvidia-smi means they all will hang: stop asking.
                break
    return evidence
