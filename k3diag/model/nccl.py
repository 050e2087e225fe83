"""What NCCL/RCCL said about a job: ranks, where they ran, which transport each connection used.

One `NcclRun` per communicator (a job's world communicator, a TP subgroup, a second job in the
same file). The core needs only that a run serializes per the report contract; everything else
here (rank table, rings, trees, GRAPH lines, NET devices, messages) is extra detail the NCCL
rules and renderers read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.nccl_init import NcclInitState, NcclInitTimings
from k3diag.model.source import SourceRef

TRANSPORTS = ("P2P", "SHM", "NET")


def transport_of(via: str) -> str | None:
    """The transport family of the text after `via` (P2P, SHM or NET), None when unknown.

    NCCL 2.4-2.6 printed host-memory transfers as `direct shared memory`; later `SHM/direct/direct`,
    `SHM/CE/...`. Network transports are `NET/<plugin>/<dev>[/GDRDMA]`, plugin names include IB,
    Socket, IBext, IBext_v8, AWS Libfabric, ...
    """
    head = via.lstrip()
    if head.startswith("P2P/") or head.startswith("P2P "):
        return "P2P"
    if head.startswith("SHM") or "shared memory" in head:
        return "SHM"
    if head.startswith("NET/") or head.startswith("NET "):
        return "NET"
    return None


@dataclass
class NcclConnection:
    """Every connection line of one communicator for one (src, dst, via, direction), folded.

    A 32-channel ring prints the same pair 32 times; it is one record here, with the channels it
    covered (`channel` is the first of them, as the report contract names it) and the first line
    as evidence. `lines` counts distinct (channel, connIndex) lines: what `transport_counts` sums.
    """

    channel: int | None
    src_rank: int
    dst_rank: int
    via: str  # text after "via", e.g. "P2P/IPC/read", "NET/IB/0/GDRDMA"
    transport: str  # P2P | SHM | NET
    direction: str | None = None  # send | receive | None
    source: SourceRef | None = None
    channels: list[int] = field(default_factory=list)
    lines: int = 1

    @property
    def channel_count(self) -> int:
        return len(self.channels) or (1 if self.channel is not None else 0)

    def to_json(self) -> dict:
        return {
            "channel": self.channel,
            "src_rank": self.src_rank,
            "dst_rank": self.dst_rank,
            "via": self.via,
            "transport": self.transport,
            "direction": self.direction,
            "channels": list(self.channels),
            "channel_count": self.channel_count,
            "lines": self.lines,
            "first": self.source.to_json() if self.source else None,
        }

    @property
    def gdrdma(self) -> bool:
        return self.transport == "NET" and "GDRDMA" in self.via

    @property
    def net_name(self) -> str | None:
        """`IB`, `Socket`, `IBext_v8`... for NET connections."""
        if self.transport != "NET":
            return None
        parts = self.via.split("/")
        return parts[1] if len(parts) > 1 else None


@dataclass
class NcclRank:
    """Where one rank of a communicator ran."""

    rank: int
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None  # normalized BDF (0000:1b:00.0)
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "cuda_dev": self.cuda_dev,
            "nvml_dev": self.nvml_dev,
            "bus_id": self.bus_id,
        }


@dataclass
class NcclRing:
    """One channel's ring order (`Channel 00/16 :    0   7   6 ...`, `Ring 00 : 0 1 2 3`)."""

    channel: int
    order: list[int]
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"channel": self.channel, "order": list(self.order)}


@dataclass
class NcclTree:
    """One rank's tree neighbours on one channel (`Trees [0] 1/-1/-1->0->-1`)."""

    channel: int
    rank: int
    up: int | None
    down: list[int]
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"channel": self.channel, "rank": self.rank, "up": self.up, "down": list(self.down)}


@dataclass
class NcclGraph:
    """A GRAPH search result: `Pattern 4, crossNic 0, nChannels 16, bw 40.0/40.0, type NVL/PIX, sameChannels 1`."""

    pattern: int | None
    cross_nic: int | None
    n_channels: int | None
    bw_intra: float | None
    bw_inter: float | None
    type_intra: str | None  # NCCL path type: LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET DIS
    type_inter: str | None
    same_channels: int | None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "pattern": self.pattern,
            "cross_nic": self.cross_nic,
            "n_channels": self.n_channels,
            "bw_intra": self.bw_intra,
            "bw_inter": self.bw_inter,
            "type_intra": self.type_intra,
            "type_inter": self.type_inter,
            "same_channels": self.same_channels,
        }


@dataclass
class NcclPath:
    """How NCCL itself classified the path between two topology nodes (GRAPH `printNodePaths`)."""

    src: str  # "GPU/1B000", "GPU/0-1b000", "NET/3"
    dst: str
    hops: int | None
    bw: float | None
    path_type: str  # LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET DIS
    src_bus_id: str | None = None  # normalized BDF when the node id is a GPU bus id
    dst_bus_id: str | None = None
    host: str | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "src": self.src,
            "dst": self.dst,
            "hops": self.hops,
            "bw": self.bw,
            "type": self.path_type,
            "src_bus_id": self.src_bus_id,
            "dst_bus_id": self.dst_bus_id,
            "host": self.host,
        }


@dataclass
class NcclP2PDisabled:
    """`P2P is disabled between [NVLINK ]connected GPUs a and b` (a, b are NVML device indices)."""

    gpu_a: int
    gpu_b: int
    nvlink: bool
    host: str | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"gpu_a": self.gpu_a, "gpu_b": self.gpu_b, "nvlink": self.nvlink, "host": self.host}


@dataclass
class NcclGdr:
    """`GPU Direct RDMA Enabled/Disabled for GPU <busid> / HCA <n> (distance d <= | > l)` or per-HCA lines."""

    enabled: bool
    gpu_bus_id: str | None
    hca: str | None
    reason: str | None  # "distance 5 > 4", "no module"
    host: str | None = None
    source: SourceRef | None = None
    # per-HCA lines (`GPU Direct RDMA Enabled for HCA 0 'mlx5_0'`): NCCL's HCA index; `hca` is its name
    hca_index: int | None = None

    @property
    def per_hca(self) -> bool:
        """A per-HCA verdict (`... for HCA n 'name'`), not one for a GPU/HCA pair."""
        return self.gpu_bus_id is None and self.hca_index is not None

    def to_json(self) -> dict:
        return {
            "enabled": self.enabled,
            "gpu_bus_id": self.gpu_bus_id,
            "hca": self.hca,
            "hca_index": self.hca_index,
            "reason": self.reason,
            "host": self.host,
        }


@dataclass
class NcclDmaBuf:
    """NCCL's DMA-BUF verdicts (`DMA-BUF is available on GPU device 0`, `... DMA-BUF enabled for HCA 0 'mlx5_0'`)."""

    enabled: bool
    hca: str | None = None  # HCA name when the line names one
    gpu: int | None = None  # CUDA device when the line names one
    host: str | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"enabled": self.enabled, "hca": self.hca, "gpu": self.gpu, "host": self.host}


@dataclass
class NcclChannelCounts:
    """`16 coll channels, 0 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer`."""

    coll: int
    collnet: int | None
    nvls: int | None
    p2p: int
    host: str | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"coll": self.coll, "collnet": self.collnet, "nvls": self.nvls, "p2p": self.p2p, "host": self.host}


@dataclass
class NcclMnnvlHealth:
    """A multi-node NVLink fabric health mask NCCL printed (`healthMask 0xaa`); 0x0 is healthy."""

    mask: str
    host: str | None = None
    source: SourceRef | None = None

    def problems(self) -> list[str]:
        """NVML's `nvmlGpuFabricInfo` health mask decoded (2-bit fields: 0 not supported, 1 true, 2 false;
        the configuration field: 0 not supported, 1 none, 2+ a named problem). 0x0 and 0xaa are healthy."""
        try:
            mask = int(self.mask, 16)
        except ValueError:
            return []
        found = [text for shift, text in _HEALTH_FLAGS if (mask >> shift) & 0x3 == 1]
        config = (mask >> 8) & 0xF
        if config >= 2:
            found.append(_HEALTH_CONFIG.get(config, f"incorrect fabric configuration (code {config})"))
        if (mask >> 12) & 0x3 == 2:
            found.append("no fabric partition assigned to the GPU")
        return found

    @property
    def healthy(self) -> bool:
        return not self.problems()

    def to_json(self) -> dict:
        return {"mask": self.mask, "healthy": self.healthy, "problems": self.problems(), "host": self.host}


_HEALTH_FLAGS = ((0, "fabric bandwidth degraded"), (2, "route recovery in progress"), (4, "a route is unhealthy"),
                 (6, "access-timeout recovery in progress"))
_HEALTH_CONFIG = {2: "incorrect system GUID", 3: "incorrect chassis serial number", 4: "no partition",
                  5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location",
                  8: "GPU state invalid"}


@dataclass
class NcclNvlsSupport:
    """`NVLS multicast support is [not ]available on dev N`."""

    available: bool
    gpu: int | None = None
    host: str | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"available": self.available, "gpu": self.gpu, "host": self.host}


@dataclass
class NcclCollNetConnection:
    """`CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA`: a rank's connection to the in-network reduction
    (SHARP) of one CollNet channel. NCCL prints it while it sets CollNet up, before it knows whether the set-up
    succeeds (`Cannot initialize CollNet` says it did not)."""

    channel: int
    rank: int
    direction: str  # "send" | "receive"
    via: str  # as printed: COLLNET/SHARP/1/GDRDMA
    host: str | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"channel": self.channel, "rank": self.rank, "direction": self.direction, "via": self.via,
                "gdr": self.via.endswith("/GDRDMA"), "host": self.host}


@dataclass
class NcclNet:
    """What NCCL found for the network: plugin, the transport it chose, devices, IB absence."""

    network: str | None = None  # "IB" | "Socket" | plugin name, from `Using network X`
    plugin: str | None = None  # external plugin library, None for the internal one
    ib_devices: list[str] = field(default_factory=list)  # ["mlx5_0:1/IB", "mlx5_3:1/RoCE"]
    socket_devices: list[str] = field(default_factory=list)  # ["eth0:10.0.0.1<0>"]
    ib_not_found: bool = False  # `NET/IB : No device found.`
    ibverbs_missing: bool = False  # `Failed to open libibverbs.so[.1]`
    sources: list[SourceRef] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "network": self.network,
            "plugin": self.plugin,
            "ib_devices": list(self.ib_devices),
            "socket_devices": list(self.socket_devices),
            "ib_not_found": self.ib_not_found,
            "ibverbs_missing": self.ibverbs_missing,
        }


@dataclass
class NcclMessage:
    """A NCCL WARN line or an error trace (`misc/socket.cc:567 -> 2`), with NCCL's source file:line.

    Identical messages are kept once with a count (a 1000-rank job prints each warning 1000 times).
    """

    level: str  # "WARN" | "ERROR"
    text: str
    file: str | None = None  # NCCL source file as printed: "misc/socket.cc", ".../init.cc"
    line_no: int | None = None  # the line in that source file
    count: int = 1
    source: SourceRef | None = None  # first occurrence

    def to_json(self) -> dict:
        return {
            "level": self.level,
            "text": self.text,
            "file": self.file,
            "line": self.line_no,
            "count": self.count,
            "first": self.source.to_json() if self.source else None,
        }


@dataclass
class NcclRun:
    library: str | None = None  # "NCCL" | "RCCL"
    version: str | None = None
    nranks: int | None = None
    nodes: int | None = None
    hosts: list[str] = field(default_factory=list)
    connections: list[NcclConnection] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    input: str | None = None
    comm_id: str | None = None
    # -- detail beyond the contract ------------------------------------------
    ranks: list[NcclRank] = field(default_factory=list)
    rings: list[NcclRing] = field(default_factory=list)
    trees: list[NcclTree] = field(default_factory=list)
    graphs: list[NcclGraph] = field(default_factory=list)
    paths: list[NcclPath] = field(default_factory=list)
    p2p_disabled: list[NcclP2PDisabled] = field(default_factory=list)
    gdr: list[NcclGdr] = field(default_factory=list)
    net: NcclNet = field(default_factory=NcclNet)
    messages: list[NcclMessage] = field(default_factory=list)
    env_sources: dict[str, SourceRef] = field(default_factory=dict)
    version_source: SourceRef | None = None
    nodes_reported: int | None = None  # `nNodes` from the comm line, when NCCL printed it
    # Connection lines seen but not kept: beyond the per-instance bound on distinct peers (counted).
    connections_dropped: int = 0
    # tree entries of this run beyond `MAX_TREES_PER_RUN` (a run of thousands of ranks): counted, not kept
    trees_not_kept: int = 0
    channel_counts: list[NcclChannelCounts] = field(default_factory=list)
    dmabuf: list[NcclDmaBuf] = field(default_factory=list)
    mnnvl_health: list[NcclMnnvlHealth] = field(default_factory=list)
    nvls_support: list[NcclNvlsSupport] = field(default_factory=list)
    collnet: list[NcclCollNetConnection] = field(default_factory=list)
    # where each env value came from: "log" (NCCL's `X set by environment to Y`) or "command-line"
    env_origin: dict[str, str] = field(default_factory=dict)
    # hosts named only on NCCL lines without a rank (Bootstrap, NET/IB, WARN...), with their first line
    hosts_unranked: list[str] = field(default_factory=list)
    hosts_sources: dict[str, SourceRef] = field(default_factory=dict)
    # how far init got (ranks started, completed, stuck, never seen) and the `Init timings` lines (2.23+)
    init: NcclInitState | None = None
    init_timings: NcclInitTimings | None = None

    def transport_counts(self) -> dict[str, int]:
        counts = {"P2P": 0, "SHM": 0, "NET": 0}
        for conn in self.connections:
            counts[conn.transport] = counts.get(conn.transport, 0) + conn.lines
        return counts

    def rank_info(self, rank: int) -> NcclRank | None:
        """The first entry of `ranks` for this rank. The rules ask it for both ends of every pair: an index
        (rebuilt when `ranks` is replaced or grows), not a scan of 256 ranks for each of 8,192 pairs."""
        memo = self.__dict__.get("_rank_index")
        if memo is None or memo[0] is not self.ranks or memo[1] != len(self.ranks):
            index = {info.rank: info for info in reversed(self.ranks)}  # reversed: the first entry wins
            memo = self.__dict__["_rank_index"] = (self.ranks, len(self.ranks), index)
        return memo[2].get(rank)

    def host_of(self, rank: int) -> str | None:
        info = self.rank_info(rank)
        return info.host if info else None

    def to_json(self) -> dict:
        return {
            "library": self.library,
            "version": self.version,
            "nranks": self.nranks,
            "nodes": self.nodes,
            "hosts": list(self.hosts),
            "connections": [c.to_json() for c in self.connections],
            "transport_counts": self.transport_counts(),
            "env": dict(self.env),
            "warnings": list(self.warnings),
            "input": self.input,
            "comm_id": self.comm_id,
            "ranks": [r.to_json() for r in self.ranks],
            "rings": [r.to_json() for r in self.rings],
            "trees": [t.to_json() for t in self.trees],
            "graphs": [g.to_json() for g in self.graphs],
            "paths": [p.to_json() for p in self.paths],
            "p2p_disabled": [p.to_json() for p in self.p2p_disabled],
            "gdr": [g.to_json() for g in self.gdr],
            "net": self.net.to_json(),
            "messages": [m.to_json() for m in self.messages],
            "nodes_reported": self.nodes_reported,
            "connections_dropped": self.connections_dropped,
            "trees_not_kept": self.trees_not_kept,
            "channel_counts": [c.to_json() for c in self.channel_counts],
            "dmabuf": [d.to_json() for d in self.dmabuf],
            "mnnvl_health": [h.to_json() for h in self.mnnvl_health],
            "nvls_support": [n.to_json() for n in self.nvls_support],
            "collnet": [c.to_json() for c in self.collnet],
            "env_origin": dict(self.env_origin),
            "hosts_unranked": list(self.hosts_unranked),
            "init": self.init.to_json() if self.init else None,
            "init_timings": self.init_timings.to_json() if self.init_timings else None,
        }


@dataclass
class NcclRunSummary:
    """A communicator reported by counters only (beyond the `DETAIL_RUNS` kept in full): exact figures."""

    comm_id: str | None
    nranks: int | None
    nodes: int | None
    hosts: int
    transport_counts: dict[str, int]
    pairs: int  # distinct (src, dst, via, direction) records
    input: str | None = None

    def shape(self) -> tuple:
        return (self.nranks, self.nodes, self.hosts, tuple(sorted(self.transport_counts.items())), self.pairs)


@dataclass
class NcclSummary:
    """What a log held beyond the runs reported in full: how many, and their counters grouped by shape."""

    runs_total: int = 0
    runs_detailed: int = 0
    detail_limit: int = 0
    groups: list[tuple[NcclRunSummary, int, list[str]]] = field(default_factory=list)  # (shape, count, comm ids)
    # connection lines printed after a summarized run was built (lazy p2p connections): counted here
    late_lines: int = 0
    # what a memory bound left out of the whole log, by kind (`parse.nccl.patterns.NOT_KEPT`): counted
    not_kept: dict[str, int] = field(default_factory=dict)
    not_kept_lower_bounds: list[str] = field(default_factory=list)  # kinds whose count is a lower bound

    @property
    def runs_summarized(self) -> int:
        return sum(count for _, count, _ in self.groups)

    def to_json(self) -> dict:
        totals = {"P2P": 0, "SHM": 0, "NET": 0}
        rows = []
        for item, count, comm_ids in self.groups:
            for name, number in item.transport_counts.items():
                totals[name] = totals.get(name, 0) + number * count
            rows.append({"count": count, "nranks": item.nranks, "nodes": item.nodes, "hosts": item.hosts,
                         "transport_counts": dict(item.transport_counts), "pairs": item.pairs,
                         "comm_ids": list(comm_ids)})
        return {
            "runs_total": self.runs_total,
            "runs_detailed": self.runs_detailed,
            "runs_summarized": self.runs_summarized,
            "detail_limit": self.detail_limit,
            "summarized_transport_counts": totals,
            "summarized_late_connection_lines": self.late_lines,
            "not_kept": dict(sorted(self.not_kept.items())),
            "not_kept_lower_bounds": list(self.not_kept_lower_bounds),
            "summarized": sorted(rows, key=lambda g: (-g["count"], -(g["nranks"] or 0), str(g["comm_ids"]))),
        }
