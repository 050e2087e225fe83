"""Benchmark results: nccl-tests / rccl-tests, p2pBandwidthLatencyTest, nvbandwidth.

Each record has `tool` and `to_json()` in the report contract's `benchmarks[]` shape; extra keys
(devices, hosts, versions, the plateau) follow the contract's fields. Bandwidths are GB/s and
times microseconds, as the tools print them; cells the tool prints as `N/A` are None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef

# -- nccl-tests ----------------------------------------------------------------------------------


@dataclass
class NcclTestsMeasure:
    """One placement (out-of-place or in-place) of one table row."""

    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None  # `#wrong` count; None when the column is `N/A` or the build printed `error`
    error: float | None = None  # old builds: max deviation (`0e+00`, `1e-06`), not a count

    def to_json(self) -> dict:
        data = {"time_us": self.time_us, "algbw": self.algbw, "busbw": self.busbw, "wrong": self.wrong}
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass
class NcclTestsRow:
    size_bytes: int
    count: int | None
    type: str | None
    redop: str | None = None
    root: int | None = None
    out_of_place: NcclTestsMeasure | None = None
    in_place: NcclTestsMeasure | None = None
    extra: dict[str, str] = field(default_factory=dict)  # columns other builds add (algo, proto, nchannels)
    source: SourceRef | None = None

    def busbw(self) -> float | None:
        values = [m.busbw for m in (self.out_of_place, self.in_place) if m is not None and m.busbw is not None]
        return max(values) if values else None

    def wrong(self) -> int:
        return sum(m.wrong or 0 for m in (self.out_of_place, self.in_place) if m is not None)

    def to_json(self) -> dict:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_json() if self.out_of_place else None,
            "in_place": self.in_place.to_json() if self.in_place else None,
            "extra": dict(self.extra),
        }


@dataclass
class NcclTestsDevice:
    rank: int
    host: str | None
    pid: int | None
    device: int | None
    bus_id: str | None
    name: str | None
    source: SourceRef | None = None  # the "Using devices" line

    def to_json(self) -> dict:
        return {"rank": self.rank, "host": self.host, "pid": self.pid, "device": self.device,
                "bus_id": self.bus_id, "name": self.name}


@dataclass
class NcclTestsBenchmark:
    tool: str = "nccl-tests"
    op: str | None = None  # all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv...
    nranks: int | None = None
    rows: list[NcclTestsRow] = field(default_factory=list)
    avg_busbw: float | None = None  # `# Avg bus bandwidth : X`
    out_of_bounds: int | None = None  # `# Out of bounds values : N OK|FAILED`
    variant: str | None = None  # "nccl-tests" | "rccl-tests"
    version: str | None = None  # `# nccl-tests version 2.20.0 ...`, `rccl-tests: Version ...`
    devices: list[NcclTestsDevice] = field(default_factory=list)
    n_gpus_per_thread: int | None = None
    n_threads: int | None = None
    command: str | None = None
    columns: list[str] = field(default_factory=list)
    input: str | None = None
    header_source: SourceRef | None = None
    avg_source: SourceRef | None = None
    oob_source: SourceRef | None = None
    skipped_lines: int = 0
    # `host: Test NCCL failure common.cu:392 'unhandled cuda error ... / '`: the test aborted (first such line)
    failure: str | None = None
    failure_source: SourceRef | None = None
    failure_hosts: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return sorted({d.host for d in self.devices if d.host})

    @property
    def max_busbw(self) -> float | None:
        values = [v for v in (row.busbw() for row in self.rows) if v is not None]
        return max(values) if values else None

    def best_row(self) -> NcclTestsRow | None:
        best = None
        for row in self.rows:
            value = row.busbw()
            if value is not None and (best is None or value > (best.busbw() or 0)):
                best = row
        return best

    @property
    def plateau_busbw(self) -> float | None:
        """Bus bandwidth once messages are large: the mean over the largest sizes (up to 3 rows)."""
        rows = sorted((r for r in self.rows if r.busbw() is not None), key=lambda r: r.size_bytes)
        if not rows:
            return None
        tail = rows[-3:]
        return round(sum(r.busbw() or 0.0 for r in tail) / len(tail), 2)

    @property
    def wrong_total(self) -> int:
        return sum(row.wrong() for row in self.rows)

    def to_json(self) -> dict:
        return {
            "tool": self.tool,
            "op": self.op,
            "nranks": self.nranks,
            "rows": [row.to_json() for row in self.rows],
            "max_busbw": self.max_busbw,
            "avg_busbw": self.avg_busbw,
            "out_of_bounds": self.out_of_bounds,
            "plateau_busbw": self.plateau_busbw,
            "wrong_total": self.wrong_total,
            "variant": self.variant,
            "version": self.version,
            "devices": [d.to_json() for d in self.devices],
            "hosts": self.hosts,
            "command": self.command,
            "columns": list(self.columns),
            "input": self.input,
            "failure": self.failure,
        }


# -- p2pBandwidthLatencyTest ---------------------------------------------------------------------


@dataclass
class P2PGpu:
    index: int
    name: str | None
    bus_id: str | None  # normalized BDF from pciDomainID/pciBusID/pciDeviceID

    def to_json(self) -> dict:
        return {"index": self.index, "name": self.name, "bus_id": self.bus_id}


@dataclass
class P2PBandwidthBenchmark:
    tool: str = "p2pBandwidthLatencyTest"
    gpus: list[P2PGpu] = field(default_factory=list)
    # can_access[i][j]: `Device=i CAN|CANNOT Access Peer Device=j`; None where not printed (diagonal)
    can_access: list[list[bool | None]] = field(default_factory=list)
    connectivity: list[list[int | None]] = field(default_factory=list)  # `P2P Connectivity Matrix`
    # name exactly as the tool prints it (`Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)`);
    # latency tables are `<title>` for the GPU table and `<title> CPU` for the CPU one
    matrices: dict[str, list[list[float | None]]] = field(default_factory=dict)
    input: str | None = None
    sources: dict[str, SourceRef] = field(default_factory=dict)  # matrix name / "access:i:j" -> line

    def n(self) -> int:
        sizes = [len(self.gpus), len(self.can_access), len(self.connectivity)] + [len(m) for m in self.matrices.values()]
        return max(sizes) if sizes else 0

    def matrix(self, *words: str) -> tuple[str, list[list[float | None]]] | None:
        """The first matrix whose name contains every word (case-sensitive, as printed)."""
        for name, values in self.matrices.items():
            if all(word in name for word in words):
                return name, values
        return None

    def to_json(self) -> dict:
        return {
            "tool": self.tool,
            "gpus": [g.to_json() for g in self.gpus],
            "can_access": [list(r) for r in self.can_access],
            "connectivity": [list(r) for r in self.connectivity],
            "matrices": {name: [list(r) for r in rows] for name, rows in self.matrices.items()},
            "input": self.input,
        }


# -- nvbandwidth ---------------------------------------------------------------------------------


@dataclass
class NvbandwidthTestcase:
    name: str
    matrix: list[list[float | None]] = field(default_factory=list)
    sum: float | None = None
    description: str | None = None  # `memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)`
    status: str | None = None  # Passed | Waived | Error (JSON), "waived" in text output
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "matrix": [list(r) for r in self.matrix],
            "sum": self.sum,
            "description": self.description,
            "status": self.status,
        }


@dataclass
class NvbandwidthBenchmark:
    tool: str = "nvbandwidth"
    testcases: dict[str, NvbandwidthTestcase] = field(default_factory=dict)
    version: str | None = None
    driver_version: str | None = None
    cuda_runtime_version: str | None = None
    devices: list[dict] = field(default_factory=list)  # {index, name, bus_id}
    errors: list[str] = field(default_factory=list)
    input: str | None = None

    def to_json(self) -> dict:
        return {
            "tool": self.tool,
            "testcases": {name: tc.to_json() for name, tc in self.testcases.items()},
            "version": self.version,
            "driver_version": self.driver_version,
            "cuda_runtime_version": self.cuda_runtime_version,
            "devices": list(self.devices),
            "errors": list(self.errors),
            "input": self.input,
        }
