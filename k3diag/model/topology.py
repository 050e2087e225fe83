"""The GPU-level topology model: GPUs, NICs, links between endpoints, P2P status per pair.

Modelled after hwloc: endpoints are objects with attributes, pairwise facts are kept
as records keyed by endpoint names ("GPU0", "NIC1", "mlx5_0"), and each record says
where it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from k3diag.model.source import SourceRef

# Quality order of `nvidia-smi topo -m` path codes, best first. NV# is handled by
# nvlink count (more links is better) and always ranks above every PCIe path.
# PSB (old drivers: single on-board switch) behaves like PIX. SOC is what drivers before
# SYS/NODE existed printed for a path across the CPU sockets: as bad as SYS.
PCIE_PATH_ORDER: tuple[str, ...] = ("PIX", "PSB", "PXB", "PHB", "NODE", "SYS", "SOC")
AMD_PATH_ORDER: tuple[str, ...] = ("XGMI", "PCIE")
_NV_RE = re.compile(r"^NV(\d+)$")


def nvlink_count(path: str | None) -> int | None:
    if path is None:
        return None
    match = _NV_RE.match(path)
    return int(match.group(1)) if match else None


def path_rank(path: str | None) -> int:
    """Smaller is better. Unknown paths sort last so they never look attractive."""
    if path is None:
        return 100
    links = nvlink_count(path)
    if links is not None:
        # NV18 beats NV1; every NVLink beats PCIe.
        return -links
    if path == "XGMI":
        return -1
    if path in PCIE_PATH_ORDER:
        return PCIE_PATH_ORDER.index(path)
    if path == "PCIE":
        return PCIE_PATH_ORDER.index("PHB")
    return 50


@dataclass
class PcieLinkState:
    """A GPU's PCIe generation and width, current and maximum, as `nvidia-smi -q` or NVML reports them."""

    gen_current: int | None = None
    gen_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None
    # `nvidia-smi -q` splits max into what the device and what the host (slot) can do.
    gen_device_max: int | None = None
    gen_host_max: int | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "gen_current": self.gen_current,
            "gen_max": self.gen_max,
            "width_current": self.width_current,
            "width_max": self.width_max,
            "gen_device_max": self.gen_device_max,
            "gen_host_max": self.gen_host_max,
        }


@dataclass
class Gpu:
    """One GPU, by its index on this machine, with what the inputs say about it."""

    index: int
    name: str | None = None
    vendor: str | None = None  # "NVIDIA" | "AMD"
    bus_id: str | None = None  # normalized: 0000:1b:00.0, lower case
    uuid: str | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None
    performance_state: str | None = None
    pcie: PcieLinkState = field(default_factory=PcieLinkState)
    memory_total_mib: int | None = None
    sources: list[SourceRef] = field(default_factory=list)
    # The GPU's own NUMA node where the GPU memory is one (Grace Hopper); `GPU NUMA ID` in topo -m.
    gpu_numa_id: int | None = None

    @property
    def label(self) -> str:
        return f"GPU{self.index}"

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "vendor": self.vendor,
            "bus_id": self.bus_id,
            "uuid": self.uuid,
            "numa_node": self.numa_node,
            "gpu_numa_id": self.gpu_numa_id,
            "cpu_affinity": self.cpu_affinity,
            "performance_state": self.performance_state,
            "memory_total_mib": self.memory_total_mib,
            "pcie": self.pcie.to_json(),
        }


@dataclass
class Nic:
    """One network device, by the name a source gives it (`mlx5_0`, or `NIC0` in `nvidia-smi topo -m`)."""

    name: str  # as the source names it: "mlx5_0" or "NIC0"
    device: str | None = None  # NIC legend: NIC0 -> mlx5_0
    numa_node: int | None = None
    bus_id: str | None = None
    sources: list[SourceRef] = field(default_factory=list)
    # RDMA facts (ibstat, ibv_devinfo, /sys/class/infiniband): the ports are the ones on Machine.fabric.
    ports: list = field(default_factory=list)  # list[k3diag.model.fabric.IbPort]
    hca_type: str | None = None  # "MT4129"
    firmware: str | None = None
    pcie_width: int | None = None  # the NIC's own link, from sysfs current_link_width
    pcie_speed: str | None = None  # "32.0 GT/s PCIe"
    # An HGX B200 NVSwitch management port (mlx5 with VPD SW_MNG) is not a network NIC.
    management_port: bool | None = None
    management_source: SourceRef | None = None

    @property
    def rdma_device(self) -> str:
        return self.device or self.name

    def to_json(self) -> dict:
        first = self.ports[0] if self.ports else None
        return {
            "name": self.name,
            "device": self.device,
            "numa_node": self.numa_node,
            "bus_id": self.bus_id,
            "state": first.state if first else None,
            "physical_state": first.physical_state if first else None,
            "rate_gbps": first.rate_gbps if first else None,
            "link_layer": first.link_layer if first else None,
            "active_mtu": first.active_mtu if first else None,
            "ports": [port.to_json() for port in self.ports],
            "hca_type": self.hca_type,
            "firmware": self.firmware,
            "pcie_width": self.pcie_width,
            "pcie_speed": self.pcie_speed,
            "management_port": self.management_port,
        }


@dataclass
class Link:
    """One unordered pair of endpoints as a source shows it."""

    a: str
    b: str
    path: str | None  # NV#, PIX, PXB, PHB, NODE, SYS, PSB, XGMI, PCIE; None when unknown
    hops: int | None = None
    weight: int | None = None
    origin: str = "nvidia-smi-topo-matrix"  # which kind of evidence said so
    source: SourceRef | None = None

    @property
    def nvlinks(self) -> int | None:
        return nvlink_count(self.path)

    def key(self) -> tuple[str, str]:
        return pair_key(self.a, self.b)

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "path": self.path,
            "nvlinks": self.nvlinks,
            "hops": self.hops,
            "weight": self.weight,
            "origin": self.origin,
        }


P2P_CAPABILITIES = ("read", "write", "nvlink", "atomics", "pcie", "unknown")

# What each `nvidia-smi topo -p2p` code means, in words a user can act on.
P2P_STATUS_MEANING: dict[str, str] = {
    "OK": "supported",
    "X": "self",
    "NS": "not supported",
    "CNS": "chipset not supported: the PCIe root complex or chipset does not allow peer-to-peer between these GPUs",
    "GNS": "GPU not supported: the driver disables P2P on this GPU (GeForce/consumer cards on stock drivers)",
    "TNS": "topology not supported: the path between the GPUs does not allow P2P (often a cross-socket SYS path)",
    "DR": "disabled by regkey: P2P was turned off in the driver's registry settings",
    "U": "unknown",
}


@dataclass
class P2PStatus:
    """One cell of `nvidia-smi topo -p2p`: whether `src` can reach `dst` with one P2P capability."""

    src: str
    dst: str
    capability: str  # one of P2P_CAPABILITIES
    status: str | None  # as printed; None when the cell was missing
    origin: str = "nvidia-smi-topo-p2p"
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "src": self.src,
            "dst": self.dst,
            "capability": self.capability,
            "status": self.status,
            "origin": self.origin,
        }


def pair_key(a: str, b: str) -> tuple[str, str]:
    """Order endpoint names so GPU2/GPU10 sort numerically and NICs after GPUs."""
    return tuple(sorted((a, b), key=endpoint_sort_key))  # type: ignore[return-value]


_ENDPOINT_NAME_RE = re.compile(r"^(GPU|NIC)(\d+)$")


@lru_cache(maxsize=4096)  # called for every pair lookup; the names are few
def endpoint_sort_key(name: str) -> tuple[int, str, int]:
    match = _ENDPOINT_NAME_RE.match(name)
    if match:
        return (0 if match.group(1) == "GPU" else 1, match.group(1), int(match.group(2)))
    return (2, name, 0)


@lru_cache(maxsize=4096)  # asked for every link of every GPU x NIC pair; the names are few
def gpu_index(name: str) -> int | None:
    match = re.match(r"^GPU(\d+)$", name)
    return int(match.group(1)) if match else None
