"""Fabric facts beyond PCIe: NVLink per link, the NVLink fabric (Fabric Manager, GB200 cliques), InfiniBand/RoCE
ports, and GPUDirect RDMA prerequisites (peer-memory module, DMA-BUF).

Pure data. Parsers of `nvidia-smi nvlink`, `nvidia-smi -q` (Fabric block), Fabric Manager logs, `ibstat`,
`ibv_devinfo`, the recorded `/sys/class/infiniband` tree and NVML readings produce these records; the fabric
merger keeps them on `Machine.fabric`, and the NIC side also lands on `Machine.nics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef

# Port states as ibstat, ibv_devinfo and sysfs spell them, reduced to one word.
PORT_STATES = ("active", "down", "init", "armed", "unknown")


@dataclass
class NvLinkReading:
    """One NVLink of one GPU as a source shows it."""

    gpu: int
    link: int
    active: bool | None  # None: the source did not say (a capabilities listing)
    speed_gbs: float | None = None  # per direction, as `nvlink -s` prints it
    remote_type: str | None = None  # "GPU" | "NVSwitch" | "CPU" (NVML remote device type, `nvlink -R`)
    remote_bus_id: str | None = None
    remote_link: int | None = None
    p2p_supported: bool | None = None  # `nvlink -c`
    origin: str = "nvidia-smi-nvlink-status"
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "gpu": self.gpu,
            "link": self.link,
            "active": self.active,
            "speed_gbs": self.speed_gbs,
            "remote_type": self.remote_type,
            "remote_bus_id": self.remote_bus_id,
            "remote_link": self.remote_link,
            "p2p_supported": self.p2p_supported,
            "origin": self.origin,
        }


@dataclass
class GpuFabricState:
    """The NVLink fabric registration of one GPU (`nvidia-smi -q` Fabric block, nvmlDeviceGetGpuFabricInfo[V])."""

    gpu: int
    state: str | None = None  # "Completed" | "In Progress" | "Not Started" | "Not Supported"; None: N/A
    status: str | None = None  # "Success" | "Insufficient Resources" | ...; None: N/A
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health_summary: str | None = None  # "Healthy" | "Unhealthy" | "Limited Capacity"...
    health: dict[str, str] = field(default_factory=dict)  # Bandwidth, Route Unhealthy... as printed
    origin: str = "nvidia-smi-query-fabric"
    sources: dict[str, SourceRef] = field(default_factory=dict)  # field -> the line that says it

    @property
    def cluster_uuid_zero(self) -> bool:
        return bool(self.cluster_uuid) and set(self.cluster_uuid.replace("-", "")) == {"0"}

    def to_json(self) -> dict:
        return {
            "gpu": self.gpu,
            "state": self.state,
            "status": self.status,
            "clique_id": self.clique_id,
            "cluster_uuid": self.cluster_uuid,
            "health_summary": self.health_summary,
            "health": dict(self.health),
            "origin": self.origin,
        }


@dataclass
class FabricManagerEvent:
    """One line a Fabric Manager log or `systemctl status nvidia-fabricmanager` printed that matters."""

    kind: str  # see k3diag.parse.fabricmanager.EVENT_KINDS
    detail: str | None
    source: SourceRef

    def to_json(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "source": self.source.to_json()}


@dataclass
class FabricManagerFacts:
    """What the NVIDIA Fabric Manager's status and log say: whether it runs, its versions, its events."""

    running: bool | None = None  # systemctl Active: line; None when no status was given
    version: str | None = None  # fabric manager's own version when a line says it
    driver_interface_version: str | None = None  # from the version-mismatch line
    driver_version_seen: str | None = None  # the driver version that line names
    events: list[FabricManagerEvent] = field(default_factory=list)
    sources: list[SourceRef] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "running": self.running,
            "version": self.version,
            "driver_interface_version": self.driver_interface_version,
            "driver_version_seen": self.driver_version_seen,
            "events": [event.to_json() for event in self.events],
        }


@dataclass
class IbPort:
    """One port of an RDMA device (InfiniBand or RoCE)."""

    device: str  # "mlx5_0"
    port: int
    state: str | None = None  # one of PORT_STATES
    physical_state: str | None = None  # "LinkUp" | "Disabled" | "Polling"... as printed
    rate_gbps: float | None = None  # 400 for "400 Gb/sec (4X NDR)" and for ibstat "Rate: 400"
    rate_text: str | None = None
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    active_mtu: int | None = None  # bytes
    max_mtu: int | None = None
    gid_types: list[str] = field(default_factory=list)  # "RoCE v2", "IB/RoCE v1"
    origin: str = "ibstat"
    source: SourceRef | None = None

    @property
    def key(self) -> str:
        return f"{self.device}:{self.port}"

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "port": self.port,
            "state": self.state,
            "physical_state": self.physical_state,
            "rate_gbps": self.rate_gbps,
            "rate_text": self.rate_text,
            "link_layer": self.link_layer,
            "active_mtu": self.active_mtu,
            "max_mtu": self.max_mtu,
            "gid_types": list(self.gid_types),
            "origin": self.origin,
        }


@dataclass
class PeerMemory:
    """What makes GPUDirect RDMA possible on this host (NCCL `src/transport/net_ib/gdr.cc`)."""

    nv_peer_mem: str | None = None  # /sys/kernel/mm/memory_peers/nv_mem/version (or nv_mem_nc)
    nvidia_peermem: str | None = None  # /sys/module/nvidia_peermem/version
    # True/False when the snapshot looked for these files; None when no source looked.
    checked: bool = False
    dmabuf: bool | None = None  # NCCL "DMA-BUF is available" / recorded kernel support
    sources: list[SourceRef] = field(default_factory=list)

    @property
    def available(self) -> bool | None:
        if self.nv_peer_mem or self.nvidia_peermem or self.dmabuf:
            return True
        return False if self.checked else None

    def to_json(self) -> dict:
        return {
            "nv_peer_mem": self.nv_peer_mem,
            "nvidia_peermem": self.nvidia_peermem,
            "dmabuf": self.dmabuf,
            "checked": self.checked,
            "available": self.available,
        }


@dataclass
class FabricFacts:
    """The NVLink fabric and RDMA side of a machine: NVLink readings, GPU fabric states, Fabric Manager,
    InfiniBand ports, peer memory, and the errors that say the fabric was not ready."""

    nvlinks: list[NvLinkReading] = field(default_factory=list)
    # GPUs for which `nvlink -s` printed "all links are inActive" (B200 with the fabric down).
    nvlinks_all_inactive: dict[int, SourceRef] = field(default_factory=dict)
    gpu_fabric: dict[int, GpuFabricState] = field(default_factory=dict)
    fabric_manager: FabricManagerFacts = field(default_factory=FabricManagerFacts)
    ib_ports: dict[str, IbPort] = field(default_factory=dict)  # "mlx5_0:1" -> port
    peer_memory: PeerMemory = field(default_factory=PeerMemory)
    # CUDA error 802 / cudaErrorSystemNotReady seen in some input: the fabric was not ready.
    system_not_ready: list[SourceRef] = field(default_factory=list)
    imex_missing: list[SourceRef] = field(default_factory=list)

    def links_of(self, gpu: int) -> list[NvLinkReading]:
        return [reading for reading in self.nvlinks if reading.gpu == gpu]

    def add_nvlink(self, reading: NvLinkReading) -> None:
        """One reading per GPU, link and origin; a later source fills what an earlier one left unknown."""
        for held in self.nvlinks:
            if held.gpu == reading.gpu and held.link == reading.link:
                for name in ("active", "speed_gbs", "remote_type", "remote_bus_id", "remote_link", "p2p_supported"):
                    if getattr(held, name) is None and getattr(reading, name) is not None:
                        setattr(held, name, getattr(reading, name))
                if held.source is None:
                    held.source = reading.source
                return
        self.nvlinks.append(reading)

    @property
    def empty(self) -> bool:
        return not (self.nvlinks or self.nvlinks_all_inactive or self.gpu_fabric or self.ib_ports
                    or self.fabric_manager.events or self.fabric_manager.running is not None
                    or self.peer_memory.checked or self.peer_memory.available or self.system_not_ready
                    or self.imex_missing)

    def to_json(self) -> dict:
        return {
            "nvlinks": [reading.to_json() for reading in sorted(self.nvlinks, key=lambda r: (r.gpu, r.link))],
            "nvlinks_all_inactive": sorted(self.nvlinks_all_inactive),
            "gpu_fabric": [state.to_json() for _, state in sorted(self.gpu_fabric.items())],
            "fabric_manager": self.fabric_manager.to_json(),
            "ib_ports": [port.to_json() for _, port in sorted(self.ib_ports.items())],
            "peer_memory": self.peer_memory.to_json(),
        }
