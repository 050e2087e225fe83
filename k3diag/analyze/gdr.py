"""GPUDirect RDMA per GPU-NIC pair, computed the way NCCL decides it.

NCCL (`src/graph/paths.cc`, `ncclTopoCheckGdr`) uses GPUDirect RDMA between a GPU and a NIC when

1. the host can pin GPU memory for the NIC: the `nvidia-peermem` module (`/sys/module/nvidia_peermem/version`),
   the older `nv_peer_mem` (`/sys/kernel/mm/memory_peers/nv_mem/version`), or DMA-BUF (`src/transport/net_ib/gdr.cc`);
2. the PCIe path between them is no worse than `NCCL_NET_GDR_LEVEL` (default PXB: at most PCIe switches, never
   through the CPU). It logs only `GPU Direct RDMA Enabled|Disabled for HCA`; the per-pair `distance d > l` is
   TRACE level, so nobody sees why.

Paths come from `nvidia-smi topo -m` (GPU x NIC cells); topology legend codes map to NCCL's path types: PIX and
PSB -> PIX, PXB -> PXB, PHB and NODE -> PHB (NCCL has no NODE: both go through a CPU), SYS/SOC -> SYS. NVSwitch
management ports (VPD `SW_MNG`) are never network NICs and are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.machine import Machine
from k3diag.model.shared import shared
from k3diag.model.source import SourceRef
from k3diag.model.topology import Nic, gpu_index, path_rank

# NCCL's path order for the GDR check (LOC < PIX < PXB < PHB < SYS); NODE is PHB to NCCL.
NCCL_PATH: dict[str, str] = {"PIX": "PIX", "PSB": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS",
                             "SOC": "SYS"}
LEVELS: tuple[str, ...] = ("LOC", "PIX", "PXB", "PHB", "SYS")
DEFAULT_LEVEL = "PXB"
# NCCL_NET_GDR_LEVEL as a number (NCCL < 2.7 and still accepted): 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4+ SYS.
_NUMERIC_LEVELS = {"0": "LOC", "1": "PIX", "2": "PXB", "3": "PHB", "4": "SYS", "5": "SYS"}


@dataclass
class GdrPair:
    """One GPU and network NIC pair: whether GPUDirect RDMA can be used between them, and why."""

    gpu: int
    nic: str  # the endpoint name as the topology shows it ("NIC0", "mlx5_0")
    device: str  # the RDMA device name (mlx5_0) when known, else the endpoint name
    path: str | None  # the topo -m code
    eligible: bool | None  # None when the path, or whether GDR is possible at all, is unknown
    reason: str
    best: bool = False  # the NIC this GPU should use
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "nic": self.nic, "device": self.device, "path": self.path, "eligible": self.eligible,
                "reason": self.reason, "best": self.best}


@dataclass
class GdrReport:
    """GPUDirect RDMA for every GPU and network NIC pair of a machine, and whether it is possible at all."""

    possible: bool | None  # peer memory or DMA-BUF present (None: nobody looked)
    possible_reason: str
    level: str
    level_source: str  # "default" or "NCCL_NET_GDR_LEVEL=..."
    pairs: list[GdrPair]
    management_ports: list[Nic]
    _by_gpu: dict[int, list[GdrPair]] | None = field(default=None, init=False, repr=False, compare=False)

    def best_for(self, gpu: int) -> GdrPair | None:
        return next((pair for pair in self.pairs_of(gpu) if pair.best), None)

    def pairs_of(self, gpu: int) -> list[GdrPair]:
        """The GPU's pairs, NIC by NIC (indexed on first use: the rules ask for every GPU in turn)."""
        if self._by_gpu is None:
            self._by_gpu = {}
            for pair in self.pairs:
                self._by_gpu.setdefault(pair.gpu, []).append(pair)
        return self._by_gpu.get(gpu, [])

    def to_json(self) -> list[dict]:
        return [pair.to_json() for pair in self.pairs]


def gdr_level(machine: Machine) -> tuple[str, str]:
    for run in machine.nccl:
        value = (run.env or {}).get("NCCL_NET_GDR_LEVEL")
        if value:
            level = _NUMERIC_LEVELS.get(value.strip(), value.strip().upper())
            if level in LEVELS:
                return level, f"NCCL_NET_GDR_LEVEL={value}"
    return DEFAULT_LEVEL, "default"


def path_allowed(path: str | None, level: str) -> bool | None:
    nccl = NCCL_PATH.get(path or "")
    if nccl is None:
        return None
    return LEVELS.index(nccl) <= LEVELS.index(level)


def gdr_possible(machine: Machine) -> tuple[bool | None, str]:
    peer = machine.fabric.peer_memory
    if peer.nvidia_peermem:
        return True, f"nvidia_peermem {peer.nvidia_peermem} is loaded"
    if peer.nv_peer_mem:
        return True, f"nv_peer_mem {peer.nv_peer_mem} is loaded"
    if peer.dmabuf:
        return True, "DMA-BUF is available"
    for run in machine.nccl:
        if any(g.enabled for g in run.gdr):
            return True, "NCCL reported GPU Direct RDMA Enabled"
        # `DMA-BUF is available on GPU device N` / `DMA-BUF enabled for HCA` (NcclRun.dmabuf, nccl parser).
        if any(getattr(d, "enabled", False) for d in getattr(run, "dmabuf", None) or []):
            return True, "NCCL reported DMA-BUF available"
    for run in machine.nccl:
        if any(not g.enabled and g.reason and "module" in g.reason for g in run.gdr):
            return False, "NCCL found no peer-memory module"
    if peer.checked:
        kernel = _kernel_version(machine.host.kernel)
        if kernel is not None and kernel < (5, 12):
            return False, (f"no peer-memory module is loaded (neither /sys/module/nvidia_peermem nor "
                           f"/sys/kernel/mm/memory_peers/nv_mem exists) and kernel {machine.host.kernel} predates "
                           "DMA-BUF (5.12)")
        return None, ("no peer-memory module is loaded (neither /sys/module/nvidia_peermem nor "
                      "/sys/kernel/mm/memory_peers/nv_mem exists): only DMA-BUF (kernel 5.12+, NCCL 2.13+) can "
                      "provide GPUDirect RDMA, and whether it does is not shown")
    return None, "whether nvidia-peermem or DMA-BUF is available is unknown"


def _kernel_version(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def network_nics(machine: Machine) -> tuple[list[str], list[Nic]]:
    """Endpoint names of NICs that carry network traffic, and the management ports left out."""
    management = [nic for nic in machine.nics.values() if nic.management_port]
    excluded = {nic.name for nic in management}
    names = {link.b if gpu_index(link.a) is not None else link.a
             for link in machine.links if (gpu_index(link.a) is None) != (gpu_index(link.b) is None)}
    names |= set(machine.nics)
    return sorted(name for name in names if name not in excluded and gpu_index(name) is None), management


def gdr_report(machine: Machine) -> GdrReport | None:
    """Every GPU x network NIC pair with a path, or None when the inputs name no NIC. Computed once per
    analysis (`model.shared.reading`): four rules read it, and 144 GPUs x 36 NICs take a tenth of a second."""
    guard = (len(machine.gpus), len(machine.links), len(machine.nics), len(machine.nccl))
    return shared(machine, "gdr-report", lambda: _gdr_report(machine), guard=guard)


def _gdr_report(machine: Machine) -> GdrReport | None:
    nics, management = network_nics(machine)
    if not nics:
        return None
    possible, why = gdr_possible(machine)
    level, level_source = gdr_level(machine)
    pairs: list[GdrPair] = []
    gpus = sorted(machine.gpus) or sorted({gpu_index(n) for l in machine.links for n in (l.a, l.b)
                                          if gpu_index(n) is not None})  # type: ignore[type-var]
    for gpu in gpus:
        row: list[GdrPair] = []
        for nic_name in nics:
            link = machine.link(f"GPU{gpu}", nic_name)
            path = link.path if link is not None else None
            nic = machine.nics.get(nic_name)
            device = nic.rdma_device if nic is not None else nic_name
            allowed = path_allowed(path, level)
            port_down = nic is not None and nic.ports and all(p.state == "down" for p in nic.ports)
            if path is None:
                eligible, reason = None, "no path between them is known"
            elif allowed is False:
                eligible, reason = False, f"path {path} is worse than NCCL_NET_GDR_LEVEL {level}"
            elif possible is False:
                eligible, reason = False, f"path {path} is close enough, but {why}"
            elif port_down:
                eligible, reason = False, f"path {path} is close enough, but every port of {device} is down"
            elif possible is None:
                eligible, reason = None, f"path {path} is within {level}; {why}"
            else:
                eligible, reason = True, f"path {path} is within {level} and {why}"
            row.append(GdrPair(gpu, nic_name, device, path, eligible, reason,
                               source=link.source if link is not None else None))
        usable = [pair for pair in row if pair.path is not None and not (
            machine.nics.get(pair.nic) and machine.nics[pair.nic].ports
            and all(p.state == "down" for p in machine.nics[pair.nic].ports))]
        if usable:
            min(usable, key=lambda pair: (path_rank(pair.path), pair.nic)).best = True
        pairs.extend(row)
    return GdrReport(possible, why, level, level_source, pairs, management)
