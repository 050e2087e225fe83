"""The normalized model of one host: everything every source said, joined by identity.

Parsers produce typed records; `k3diag.join.build` merges them into one `Machine`, and the
analyzer reads only this. Live collection and saved files end up here the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from k3diag.model.fabric import FabricFacts
from k3diag.model.host import HostInfo
from k3diag.model.identity import InputIdentity
from k3diag.model.pci import PciDevice
from k3diag.model.source import SourceRef
from k3diag.model.topology import Gpu, Link, Nic, P2PStatus, endpoint_sort_key, pair_key, path_rank

if TYPE_CHECKING:  # annotations only: a topology alone need not load the NCCL records (start-up counts)
    from k3diag.model.bench import Benchmark
    from k3diag.model.nccl import NcclRun


@dataclass
class InputRecord:
    """One input as the user gave it (or one part of a file that held several outputs)."""

    path: str
    format: str  # a format name from the report contract, or "unknown"
    warnings: list[str] = field(default_factory=list)
    size_bytes: int | None = None
    command: str | None = None
    # Which machine this input says it came from (host name, GPU UUIDs, bus ids...): the parser
    # sets `identity` on its result, or `k3diag.join.identity` reads it; the join groups by it.
    identity: InputIdentity = field(default_factory=InputIdentity, repr=False, compare=False)
    # Set only when the inputs describe several machines: which one this input went to (1-based,
    # None when it went to none, e.g. nothing in it could be read) and why.
    machine: int | None = None
    machine_reason: str | None = None
    # The collection that should have produced this input failed: its command was missing, exited with an
    # error, timed out or printed nothing, or a library reading raised. What rules read instead of the
    # warning's words (`no-gpu-found` asks whether a GPU tool was tried).
    collection_failed: bool = False

    def to_json(self) -> dict:
        data = {
            "path": self.path,
            "format": self.format,
            "warnings": list(self.warnings),
            "size_bytes": self.size_bytes,
            "command": self.command,
        }
        if self.collection_failed:
            data["collection_failed"] = True
        if self.machine_reason is not None:
            data["machine"] = self.machine
            data["machine_reason"] = self.machine_reason
        return data


@dataclass
class Note:
    """Something that could not be read or known, in one sentence, with what to do about it."""

    subject: str
    message: str
    level: str = "warn"  # warn | info
    # a command stopped at its own time limit (not at the run's deadline): it hung (`command-timed-out`)
    timed_out: bool = False

    def to_json(self) -> dict:
        data = {"subject": self.subject, "message": self.message, "level": self.level}
        if self.timed_out:
            data["timed_out"] = True
        return data


@dataclass
class Machine:
    """Everything the inputs say about one machine: the model every rule and renderer reads."""

    host: HostInfo = field(default_factory=HostInfo)
    gpus: dict[int, Gpu] = field(default_factory=dict)
    nics: dict[str, Nic] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    p2p: list[P2PStatus] = field(default_factory=list)
    pci: list[PciDevice] = field(default_factory=list)
    nccl: list[NcclRun] = field(default_factory=list)
    benchmarks: list[Benchmark] = field(default_factory=list)
    # NVLink per link, NVLink fabric, RDMA ports, GPUDirect prerequisites (k3diag.model.fabric).
    fabric: FabricFacts = field(default_factory=FabricFacts)
    inputs: list[InputRecord] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    live: bool = False
    # Header lines that list the GPUs cut short in the paste (`GPU0  GPU1  GPU2  ...` of a `topo -m` or
    # `topo -p2p`): the machine has at least the GPUs shown; how many more is unknown.
    gpu_list_cuts: list[SourceRef] = field(default_factory=list)
    # What the inputs say about which machine this is (union of their keys) and how the report
    # names it when there are several ("machine 2 (node7)").
    identity: InputIdentity = field(default_factory=InputIdentity, repr=False, compare=False)
    label: str | None = None
    # Facts a domain keeps that the core does not model (dmesg events, NUMA distances...).
    extras: dict[str, Any] = field(default_factory=dict)
    # Readings already held, so that a file repeating one output thousands of times (a loop of
    # `nvidia-smi topo -m` saved to a log) does not grow the lists that every pair lookup scans.
    _link_readings: set[tuple] = field(default_factory=set, repr=False, compare=False)
    # Pair and bus-id lookups are indexed: a 72-GPU rack asks for every pair (5,000 lookups) and a
    # 5,000-device lspci asks for every device, so a scan per lookup is quadratic or worse.
    _pair_index: "_AppendIndex" = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _bdf_index: "_AppendIndex" = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _p2p_index: "_AppendIndex" = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self._pair_index = _AppendIndex(lambda link: link.key())
        self._bdf_index = _AppendIndex(lambda device: device.bdf)
        self._p2p_index = _AppendIndex(lambda status: (status.src, status.dst))

    # -- GPUs -----------------------------------------------------------------
    def gpu(self, index: int) -> Gpu:
        """The GPU with this index, created on first mention."""
        if index not in self.gpus:
            self.gpus[index] = Gpu(index=index)
        return self.gpus[index]

    def sorted_gpus(self) -> list[Gpu]:
        return [self.gpus[i] for i in sorted(self.gpus)]

    def attached_gpu_count(self) -> int:
        """How many GPUs the inputs say the machine has (`Attached GPUs : 8`, a full inventory), 0 if none says.
        More than `len(gpus)` when an output was filtered (`nvidia-smi -q -i 0`): the others are not in the inputs."""
        fact = self.identity.gpu_count
        try:
            return int(fact.value) if fact is not None else 0
        except ValueError:
            return 0

    def attached_count_source(self) -> SourceRef | None:
        """The line that gives the machine's GPU count (`Attached GPUs : 8`), None without one."""
        fact = self.identity.gpu_count
        return fact.source if fact is not None else None

    def gpu_count_is_a_floor(self) -> bool:
        """The GPUs in the inputs may not be all the machine has: a GPU list was cut (`...`) and no input gives
        the machine's count."""
        return bool(self.gpu_list_cuts) and self.attached_gpu_count() == 0

    def unseen_attached_gpus(self) -> int:
        """How many attached GPUs no input shows (0 when the inputs show them all or say nothing of a count)."""
        return max(0, self.attached_gpu_count() - len(self.gpus))

    def gpu_by_bus_id(self, bus_id: str | None) -> Gpu | None:
        if not bus_id:
            return None
        from k3diag.model.ids import normalize_bdf

        wanted = normalize_bdf(bus_id)
        for gpu in self.gpus.values():
            if gpu.bus_id and normalize_bdf(gpu.bus_id) == wanted:
                return gpu
        return None

    def nic(self, name: str) -> Nic:
        if name not in self.nics:
            self.nics[name] = Nic(name=name)
        return self.nics[name]

    # -- pairs ----------------------------------------------------------------
    def links_between(self, a: str, b: str) -> list[Link]:
        """Every reading of this pair, in the order they were added."""
        return list(self._pair_index.lookup(self.links, pair_key(a, b)))

    def link(self, a: str, b: str, origin: str | None = None) -> Link | None:
        """The link a source reported for this pair; with no origin, the best-ranked one."""
        candidates = [
            link for link in self.links_between(a, b) if origin is None or link.origin == origin
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda link: path_rank(link.path))

    def add_link(self, link: Link) -> None:
        """Keep one link per pair and origin; a later reading of the same pair replaces nothing
        silently: both stay, so a contradiction between two readings can be reported. A reading
        that repeats one already held (same pair, origin and values) adds nothing and is dropped."""
        reading = (link.key(), link.origin, link.path, link.hops, link.weight)
        if reading in self._link_readings:
            return
        self._link_readings.add(reading)
        self.links.append(link)

    def p2p_status(self, src: str, dst: str, capability: str | None = None) -> list[P2PStatus]:
        return [
            p for p in self._p2p_index.lookup(self.p2p, (src, dst)) if capability is None or p.capability == capability
        ]

    def pci_device(self, bdf: str | None) -> PciDevice | None:
        if not bdf:
            return None
        from k3diag.model.ids import normalize_bdf

        found = self._bdf_index.lookup(self.pci, normalize_bdf(bdf))
        return found[0] if found else None

    def endpoint_names(self) -> list[str]:
        names = {link.a for link in self.links} | {link.b for link in self.links}
        return sorted(names, key=endpoint_sort_key)

    def note(self, subject: str, message: str, level: str = "warn") -> None:
        self.keep_note(Note(subject=subject, message=message, level=level))

    def keep_note(self, note: Note) -> None:
        # Two layers may notice the same problem (the evidence and its parser): say it once.
        if any(existing.message == note.message for existing in self.notes):
            return
        self.notes.append(note)

    @property
    def analyzable(self) -> bool:
        """Whether any input yielded facts; exit code 3 when not."""
        return bool(
            self.gpus or self.links or self.p2p or self.pci or self.nccl or self.benchmarks
            or not self.fabric.empty
            # A bundle's own record says it was opened, not that anything in it was read.
            or any(inp.format not in ("unknown", "bundle") for inp in self.inputs)
        )


class _AppendIndex:
    """A dict over a list that only grows (the model's lists): entries added since the last lookup are
    indexed then, so building the model and reading it both stay linear. If the list was replaced or
    shrank (a test, a rule that filters), the index is rebuilt from scratch."""

    def __init__(self, key) -> None:
        self._key = key
        self._list_id: int | None = None
        self._count = 0
        self._index: dict = {}

    def lookup(self, items: list, wanted) -> list:
        if id(items) != self._list_id or len(items) < self._count:
            self._list_id, self._count, self._index = id(items), 0, {}
        if self._count < len(items):
            for item in items[self._count:]:
                key = self._key(item)
                if key is not None:
                    self._index.setdefault(key, []).append(item)
            self._count = len(items)
        return self._index.get(wanted, ())


@dataclass
class MachineSet:
    """What saved inputs describe: one or more machines, never merged into one when their keys conflict.

    `inputs` is every input in the order given (read or not); each machine's own `inputs` are those
    that went to it. `unplaced` are inputs nothing could be read from while there are several machines.
    """

    machines: list[Machine] = field(default_factory=list)
    inputs: list[InputRecord] = field(default_factory=list)
    unplaced: list[InputRecord] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    # The manifests of the bundles among the inputs (host, versions): which machine a bundle is of.
    manifests: list[dict] = field(default_factory=list)

    @property
    def several(self) -> bool:
        return len(self.machines) > 1
