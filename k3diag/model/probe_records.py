"""Results of `k3diag probe`: measured host<->GPU and GPU<->GPU copy bandwidth, with the data check.

A benchmark record like the others (`tool`, `to_json()`); it also answers `matrix()`,
`can_access` and `sources` the way a p2pBandwidthLatencyTest record does, so the rules that
compare peer-enabled with peer-disabled copies judge both tools' measurements with one piece of code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef

PROBE_TOOL = "k3diag-probe"
ENABLED_MATRIX = "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)"
DISABLED_MATRIX = "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"


@dataclass
class ProbeGpu:
    index: int
    name: str | None
    bus_id: str | None  # normalized BDF
    host_to_device_gbps: float | None  # best of the repeats, pinned memory
    device_to_host_gbps: float | None
    host_to_device_median_gbps: float | None = None
    device_to_host_median_gbps: float | None = None
    data_ok: bool | None = None  # the bytes written to the GPU came back intact
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"index": self.index, "name": self.name, "bus_id": self.bus_id,
                "host_to_device_gbps": self.host_to_device_gbps, "device_to_host_gbps": self.device_to_host_gbps,
                "host_to_device_median_gbps": self.host_to_device_median_gbps,
                "device_to_host_median_gbps": self.device_to_host_median_gbps, "data_ok": self.data_ok,
                "memory_total_bytes": self.memory_total_bytes, "memory_free_bytes": self.memory_free_bytes}


@dataclass
class ProbePair:
    src: int
    dst: int
    can_access_peer: bool | None
    peer_disabled_gbps: float | None  # the driver stages the copy through host memory
    peer_enabled_gbps: float | None  # direct peer copy (NVLink or PCIe P2P)
    data_ok_peer_disabled: bool | None = None
    data_ok_peer_enabled: bool | None = None
    errors: list[str] = field(default_factory=list)
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {"src": self.src, "dst": self.dst, "can_access_peer": self.can_access_peer,
                "peer_disabled_gbps": self.peer_disabled_gbps, "peer_enabled_gbps": self.peer_enabled_gbps,
                "data_ok_peer_disabled": self.data_ok_peer_disabled, "data_ok_peer_enabled": self.data_ok_peer_enabled,
                "errors": list(self.errors)}


@dataclass
class ProbeBenchmark:
    tool: str = PROBE_TOOL
    vendor: str | None = None
    library: str | None = None
    driver_version: str | None = None
    size_bytes: int | None = None
    repeats: int | None = None
    gpus: list[ProbeGpu] = field(default_factory=list)
    pairs: list[ProbePair] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "GPU3: 92% of its memory is in use ..."
    errors: list[str] = field(default_factory=list)
    deadline_reached: bool = False
    elapsed_s: float | None = None
    input: str | None = None

    # -- the p2pBandwidthLatencyTest-shaped view --------------------------------------------

    def _size(self) -> int:
        indices = [g.index for g in self.gpus] + [p.src for p in self.pairs] + [p.dst for p in self.pairs]
        return max(indices) + 1 if indices else 0

    @property
    def can_access(self) -> list[list[bool | None]]:
        grid: list[list[bool | None]] = [[None] * self._size() for _ in range(self._size())]
        for pair in self.pairs:
            grid[pair.src][pair.dst] = pair.can_access_peer
        return grid

    @property
    def matrices(self) -> dict[str, list[list[float | None]]]:
        n = self._size()
        enabled: list[list[float | None]] = [[None] * n for _ in range(n)]
        disabled: list[list[float | None]] = [[None] * n for _ in range(n)]
        for pair in self.pairs:
            enabled[pair.src][pair.dst] = pair.peer_enabled_gbps
            disabled[pair.src][pair.dst] = pair.peer_disabled_gbps
        return {ENABLED_MATRIX: enabled, DISABLED_MATRIX: disabled}

    def matrix(self, *words: str) -> tuple[str, list[list[float | None]]] | None:
        for name, values in self.matrices.items():
            if all(word in name for word in words):
                return name, values
        return None

    @property
    def sources(self) -> dict[str, SourceRef]:
        refs: dict[str, SourceRef] = {}
        for pair in self.pairs:
            if pair.source is not None:
                refs.setdefault(ENABLED_MATRIX, pair.source)
                refs.setdefault(DISABLED_MATRIX, pair.source)
                refs[f"access:{pair.src}:{pair.dst}"] = pair.source
        return refs

    def gpu(self, index: int) -> ProbeGpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def to_json(self) -> dict:
        return {"tool": self.tool, "vendor": self.vendor, "library": self.library,
                "driver_version": self.driver_version, "size_bytes": self.size_bytes, "repeats": self.repeats,
                "gpus": [g.to_json() for g in self.gpus], "pairs": [p.to_json() for p in self.pairs],
                "skipped": list(self.skipped), "errors": list(self.errors),
                "deadline_reached": self.deadline_reached, "elapsed_s": self.elapsed_s, "input": self.input}
