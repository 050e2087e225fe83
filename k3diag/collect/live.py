"""Everything k3diag gathers from a live host, as evidence.

Each source is optional: a missing tool or library becomes evidence with an `error`
sentence, and the rest is still collected. The same evidence goes into bundles.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Callable

from k3diag.collect.host import collect_host
from k3diag.collect.runner import run_command
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


def collect_live(
    root: Path = Path("/"),
    timeout_s: float = 20.0,
    progress: Callable[[str], None] | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> list[Evidence]:
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

    for group, tool in ((NVIDIA_COMMANDS, "nvidia-smi"), (PCI_COMMANDS, "lspci"), (AMD_COMMANDS, None)):
        for name, argv, fmt in group:
            if which(argv[0]) is None:
                if tool is not None and argv is group[0][1]:
                    evidence.append(Evidence(name=name, kind="command", command=" ".join(argv),
                                             error=f"`{argv[0]}` is not installed or not on PATH"))
                continue
            step(" ".join(argv))
            evidence.append(run_command(argv, name=name, timeout_s=timeout_s, format_hint=None))
            if evidence[-1].timed_out and argv[0] == "nvidia-smi":
                # One hung nvidia-smi means they all will hang: stop asking.
                break
    return evidence
