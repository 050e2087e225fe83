"""The bounded state of one pass over a log: threads, communicator instances, folded connections.

A connection line is folded into one `ConnAgg` per (src, dst, via, direction) of the instance that
printed it: the channels and connIndexes it covered, and the first line as evidence. An instance of
a 16-channel ring thus costs one record per peer, not one per channel line.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef
from k3diag.parse.nccl import patterns as P

# (src, dst, via, direction)
ConnKey = tuple[int, int, str, "str | None"]


def channel_code(channel: int, conn_index: int | None) -> int:
    """One int per (channel, connIndex): `Channel 03/1` and `Channel 03/0` are two connection lines."""
    return (channel << 8) | (0 if conn_index is None else conn_index + 1)


@dataclass(slots=True)
class ConnAgg:
    """Every line of one instance (or one thread's pending lines) for one (src, dst, via, direction)."""

    kind: str  # "Channel" | "Ring" (2.4-2.6 printed Ring with cudaDev in brackets)
    src: int
    dst: int
    sb: str  # bracket after src: busId, nvmlDev or cudaDev by era
    db: str
    direction: str | None
    via: str
    transport: str
    nranks_suffix: int | None  # RCCL's `comm 0x.. nRanks NN` suffix
    lineno: int
    text: str  # the first line, as evidence
    # the (channel, connIndex) codes of its lines. An aggregate the bulk path folds from a plan shares the plan's
    # frozenset (the ranks of a job print the same channels: one set for thousands of aggregates, where a set
    # of 16 ints is ~730 bytes); a code added on its own then makes it a new set (`add` raises on a frozenset)
    codes: set[int] | frozenset[int] = field(default_factory=set)

    def absorb(self, other: "ConnAgg") -> None:
        """Fold a later-seen aggregate for the same key into this one (keeps the earliest line)."""
        self.codes |= other.codes  # a shared frozenset is not changed: `|=` makes a new one
        if other.lineno < self.lineno:
            self.lineno, self.text, self.kind, self.sb, self.db = other.lineno, other.text, other.kind, other.sb, other.db


def absorb_all(target: dict, extra: dict, cap: int) -> int:
    """Fold `extra` into `target`; returns how many keys did not fit under `cap`."""
    over = 0
    for key, agg in extra.items():
        mine = target.get(key)
        if mine is not None:
            mine.absorb(agg)
        elif len(target) < cap:
            target[key] = agg
        else:
            over += len(agg.codes)
    return over


@dataclass(slots=True)
class Instance:
    """One rank's view of one communicator (`comm 0x...` pointer within one process)."""

    key: tuple
    host: str | None
    pid: int | None
    ptr: str | None
    rank: int | None = None
    nranks: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    comm_id: str | None = None
    nnodes: int | None = None
    source: SourceRef | None = None
    source_complete: bool = False  # `source` is the Init COMPLETE line (preferred)
    first_line: int = 0  # where the instance was first seen: orders runs the same way on every path
    complete: bool = False  # its `Init COMPLETE` line was read
    ended: bool = False  # its `Destroy COMPLETE` / `Abort COMPLETE` line was read: not stuck in init
    # May its communicator be built as soon as every rank completed? Always in one pass over a file;
    # in a part cut for parallel parsing only if this part saw its `Init START` after the thread's head.
    clean: bool = True
    conns: dict = field(default_factory=dict)  # ConnKey -> ConnAgg
    # created on first use: most instances never need them, and a big log holds tens of thousands
    rings: dict | None = None  # channel -> (order, source)
    ring_next: dict | None = None  # channel -> {rank: next}
    trees: dict | None = None  # (channel, rank) -> NcclTree

    def absorb(self, later: "Instance", cap: int, not_kept: Counter[str]) -> int:
        """Merge what a later part of the file said about the same instance, as one pass would have; what
        the bounds leave out is counted in `not_kept` (the parser's, by kind)."""
        self.complete = self.complete or later.complete
        self.ended = self.ended or later.ended
        if self.rank is None:
            self.rank = later.rank
        if self.nranks is None:
            self.nranks = later.nranks
        for name in ("cuda_dev", "nvml_dev", "bus_id", "comm_id", "nnodes"):
            value = getattr(later, name)
            if value is not None:
                setattr(self, name, value)
        if later.source is not None and (self.source is None or later.source_complete):
            self.source, self.source_complete = later.source, later.source_complete
        over = absorb_all(self.conns, later.conns, cap)
        if later.rings:
            if self.rings is None:
                self.rings = {}
            for ch, value in later.rings.items():
                if ch in self.rings:
                    continue
                if len(self.rings) < P.MAX_RINGS_PER_INSTANCE:
                    self.rings[ch] = value
                else:
                    not_kept["rings"] += 1
        if later.ring_next:
            if self.ring_next is None:
                self.ring_next = {}
            for ch, mapping in later.ring_next.items():
                self.ring_next.setdefault(ch, {}).update(mapping)
        if later.trees:
            if self.trees is None:
                self.trees = {}
            for key, tree in later.trees.items():
                if key in self.trees:
                    continue
                if len(self.trees) < P.MAX_TREES_PER_INSTANCE:
                    self.trees[key] = tree
                else:
                    not_kept["tree_entries"] += 1
        return over


@dataclass(slots=True)
class Thread:
    host: str | None
    pid: int | None
    tid: int | None
    dev: int | None
    current: Instance | None = None
    pending: dict = field(default_factory=dict)  # ConnKey -> ConnAgg, lines before any comm line
    # In a part of a file cut for parallel parsing, what this thread did before its first
    # communicator line there: it belongs to whatever the previous part left it working on.
    head: Instance | None = None
    head_closed: bool = True
    adopter: tuple | None = None  # key of the instance whose comm line ended the head
    done: str | None = None  # the run key of the communicator it completed last (its `Init timings` line follows)
