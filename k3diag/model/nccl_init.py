"""How far each communicator's init got: ranks that started and never completed, and how long init took.

`NcclInitState` is what a log shows of one communicator's `ncclCommInitRank ... - Init START` / `Init COMPLETE`
lines: which ranks started, which completed, which of `nranks` never appear, and for each stuck rank (started,
no `Init COMPLETE` before the log ends) its start line and the last line its process printed. Whether the log is
visibly cut (`excerpt`) decides what that means: in a whole log the job hung or died in init, in an excerpt the
init is only not seen to complete.

`NcclInitTiming` is one `Init timings - ncclCommInitRank: rank R nranks N total T (kernels ..., bootstrap ...,
connections ..., rest ...)` line (NCCL 2.23+): the seconds each phase of that rank's init took.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef

# the phases NCCL times, in the order it prints them (`Init timings - <api>: ... total T (kernels a, alloc b, ...)`)
INIT_PHASES = ("kernels", "alloc", "bootstrap", "allgathers", "topo", "graphs", "connections", "rest")


@dataclass
class NcclStuckRank:
    """A rank that printed its init start and no `Init COMPLETE` before the log ends."""

    rank: int
    host: str | None = None
    pid: int | None = None
    start: SourceRef | None = None  # the line that showed it initializing (`Init START`, `comm 0x.. rank R ...`)
    last: SourceRef | None = None  # the last NCCL line its process printed, when the text could be read again

    def to_json(self) -> dict:
        return {"rank": self.rank, "host": self.host, "pid": self.pid,
                "start": self.start.to_json() if self.start else None,
                "last": self.last.to_json() if self.last else None}


@dataclass
class NcclInitState:
    nranks: int | None = None
    started: int = 0  # ranks seen initializing (with or without `Init COMPLETE`)
    completed: int = 0
    stuck: list[NcclStuckRank] = field(default_factory=list)  # the first `MAX_STUCK_EXAMPLES`, by rank
    stuck_total: int = 0
    missing: list[int] = field(default_factory=list)  # ranks of 0..nranks-1 never seen (first ones)
    missing_total: int = 0
    # the log is visibly cut (a code block quoting a few lines, a truncated paste): a stuck rank is then only
    # "not seen to complete in this excerpt"; `excerpt_why` says what showed it
    excerpt: bool = False
    excerpt_why: str = ""

    def to_json(self) -> dict:
        return {"nranks": self.nranks, "started": self.started, "completed": self.completed,
                "stuck": [s.to_json() for s in self.stuck], "stuck_total": self.stuck_total,
                "missing": list(self.missing), "missing_total": self.missing_total,
                "excerpt": self.excerpt, "excerpt_why": self.excerpt_why or None}


@dataclass
class NcclInitTiming:
    """One rank's `Init timings` line: seconds in total and per phase."""

    rank: int
    nranks: int
    api: str  # ncclCommInitRank, ncclCommInitRankConfig, ncclCommSplit...
    total: float
    phases: dict[str, float] = field(default_factory=dict)
    host: str | None = None
    pid: int | None = None
    source: SourceRef | None = None

    @property
    def dominant(self) -> str | None:
        """The phase that took the most time (None when the line named no phase)."""
        return max(self.phases, key=self.phases.__getitem__) if self.phases else None

    def to_json(self) -> dict:
        return {"rank": self.rank, "nranks": self.nranks, "api": self.api, "total_s": self.total,
                "phases_s": dict(self.phases), "dominant_phase": self.dominant, "host": self.host,
                "first": self.source.to_json() if self.source else None}


@dataclass
class NcclInitTimings:
    """A communicator's `Init timings` lines: the slowest ranks kept, every one counted."""

    slowest: list[NcclInitTiming] = field(default_factory=list)  # slowest first, at most `MAX_SLOWEST`
    ranks_timed: int = 0
    fastest_total: float | None = None

    def to_json(self) -> dict:
        return {"slowest": [t.to_json() for t in self.slowest], "ranks_timed": self.ranks_timed,
                "fastest_total_s": self.fastest_total,
                "dominant_phase": self.slowest[0].dominant if self.slowest else None}
