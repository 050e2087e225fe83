"""What NCCL/RCCL said about a job: ranks, where they ran, which transport each connection used.

Owned by the NCCL work; the core needs only that a run serializes per the report contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef


@dataclass
class NcclConnection:
    channel: int | None
    src_rank: int
    dst_rank: int
    via: str  # text after "via", e.g. "P2P/IPC/read", "NET/IB/0/GDRDMA"
    transport: str  # P2P | SHM | NET
    direction: str | None = None  # send | receive | None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "channel": self.channel,
            "src_rank": self.src_rank,
            "dst_rank": self.dst_rank,
            "via": self.via,
            "transport": self.transport,
            "direction": self.direction,
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

    def transport_counts(self) -> dict[str, int]:
        counts = {"P2P": 0, "SHM": 0, "NET": 0}
        for conn in self.connections:
            counts[conn.transport] = counts.get(conn.transport, 0) + 1
        return counts

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
        }
