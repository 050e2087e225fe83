"""The parser's state, and the one object that reads a log: lines (exact path) or bytes (fast path)."""

from __future__ import annotations

from collections import Counter

from k3diag.model.nccl import NcclNet, NcclRank
from k3diag.parse.nccl import patterns as P
from k3diag.model.source import SourceRef
from k3diag.parse.nccl.facts import FactHandlers
from k3diag.parse.nccl.fast import FastFeed
from k3diag.parse.nccl.handlers import LineHandlers
from k3diag.parse.nccl.lines import LineFeed
from k3diag.parse.nccl.state import Instance, Thread


class NcclLogParser(LineHandlers, FactHandlers, LineFeed, FastFeed):
    def __init__(self, input_name: str, cut_part: bool = False) -> None:
        self.input = input_name
        # a part of a file cut for parallel parsing, other than the first: see `state.Thread.head`
        self.cut_part = cut_part
        self.threads: dict[tuple, Thread] = {}
        self.prefix_cache: dict[str, Thread] = {}
        self.instances: dict[tuple, Instance] = {}
        self.orphans: dict[tuple, dict] = {}  # (host, pid) -> {ConnKey: ConnAgg}
        self.head_cache: dict[str, tuple] = {}
        self.rest_cache: dict[str, object] = {}
        # `INFO Channel ...` (a line after its record mark ` NCCL `) -> (channel code, connection key), for
        # the plain connection lines read before: the same text recurs in every job and TP group
        self.conn_tails: dict[str, tuple] = {}
        self.version: str | None = None
        self.version_source: SourceRef | None = None
        self.library: str | None = None
        self.rccl_hints = 0
        self.env: dict[str, str] = {}
        self.env_sources: dict[str, SourceRef] = {}
        self.env_conflicts: dict[str, set] = {}
        self.cmdline_env: dict[str, tuple[str, SourceRef]] = {}
        self.messages: dict[tuple, object] = {}
        self.p2p_disabled: dict[tuple, object] = {}
        self.gdr: dict[tuple, object] = {}
        self.dmabuf: dict[tuple, object] = {}
        self.graphs: dict[tuple, object] = {}
        self.paths: dict[tuple, object] = {}
        self.channel_counts: dict[tuple, object] = {}
        self.mnnvl_health: dict[tuple, object] = {}
        self.nvls_support: dict[tuple, object] = {}
        self.collnet: dict[tuple, object] = {}
        self.hosts_seen: dict[str, SourceRef] = {}
        self.net = NcclNet()
        # the line that set `net.network` / `net.plugin` (first wins); joined to `net.sources` at the end
        self.net_first: dict[str, SourceRef] = {}
        self.tests_ranks: dict[int, NcclRank] = {}
        # `Init timings` lines: run key (or, unattributed, ("rank", host, pid, rank, nranks)) -> NcclInitTimings
        self.init_timings: dict = {}
        self.ring_cache: dict[str, tuple[int, list[int]] | None] = {}
        self.trees_cache: dict[str, list[tuple]] = {}  # `Trees` text -> (channel, rank, up, down) items
        self.ring_orders: dict[str, list[int]] = {}  # a ring order's text -> its ranks (`_ring_order`)
        self.ring_order_chars = 0
        self.rank_ints: dict[str, int] = {}
        # (host, body) of the facts read (`patterns.read_once`): the body as text on the exact path, as
        # bytes on the bulk path (a fact the other path read is read once more: that changes nothing)
        self.once_read: dict[tuple, bool] = {}
        self.lines_total = 0
        self.lines_nccl = 0
        self.skipped = 0
        self.skipped_lines: list[int] = []
        self.junk = 0
        self.junk_lines: list[int] = []
        self.unknown_conn = 0
        self.trees_kept = 0
        # what a bound left out, by kind (`patterns.NOT_KEPT`): counted, reported, never silent
        self.not_kept: Counter[str] = Counter()
        # the distinct facts left out, by kind (so a fact printed by every rank counts once), at most
        # `MAX_NOT_KEPT_KEYS` in all; kinds with more than that are in `not_kept_more` (counts are lower bounds)
        self.not_kept_keys: dict[str, set] = {}
        self.not_kept_held = 0
        self.not_kept_more: set[str] = set()
        self._shared_cache: dict | None = None
        # communicators whose ranks are completing: "id:<commId>" -> {rank: instance}
        self.tracks: dict[str, dict[int, Instance]] = {}
        # runs built while reading: the first `MAX_FINALIZED_KEYS` keys (`finalized_more` once there were
        # more: what is asked of them is only whether there were none, one or several), and which processes
        # took part in each
        self.finalized_keys: set[str] = set()
        self.finalized_more = False
        self.finalized_procs: dict[tuple, set[str]] = {}
        # threads of a cut part forgotten after their (empty) head closed: thread key -> adopter key, for the
        # first `MAX_ADOPTERS` (those that matter at the merge speak right after the cut); past them, counted
        self.adopters: dict[tuple, tuple | None] = {}
        self.adopters_dropped = 0
        self.thread_limit = 0
        from k3diag.parse.nccl.runs import RunKeeper

        self.keeper = RunKeeper()

    def note_built(self, key: str) -> None:
        """A run built while reading (or by another part of the file): its key kept, up to the bound."""
        if len(self.finalized_keys) < P.MAX_FINALIZED_KEYS:
            self.finalized_keys.add(key)
        elif key not in self.finalized_keys:
            self.finalized_more = True

    def shared(self) -> dict:
        """Process-wide facts, built once and shared by every run (a log can hold thousands of
        communicators; copying a path table into each would cost more than the parse)."""
        if self._shared_cache is None:
            messages = sorted(self.messages.values(), key=lambda m: (m.source.line or 0) if m.source else 0)
            env = dict(self.env)
            sources = dict(self.env_sources)
            origin = {name: "log" for name in env}
            for name, (value, source) in self.cmdline_env.items():
                if name not in env:
                    env[name], sources[name], origin[name] = value, source, "command-line"
            self._shared_cache = {
                "env": env,
                "env_sources": sources,
                "env_origin": origin,
                "messages": messages,
                "warnings": [_message_text(m) for m in messages],
                "p2p_disabled": list(self.p2p_disabled.values()),
                "gdr": list(self.gdr.values()),
                "dmabuf": list(self.dmabuf.values()),
                "graphs": list(self.graphs.values()),
                "paths": list(self.paths.values()),
                "channel_counts": list(self.channel_counts.values()),
                "mnnvl_health": list(self.mnnvl_health.values()),
                "nvls_support": list(self.nvls_support.values()),
                "collnet": list(self.collnet.values()),
            }
        return self._shared_cache

    def finish(self):
        from k3diag.parse.nccl.runs import finish

        return finish(self)

    def drop_caches(self) -> None:
        """Before the state travels between processes: caches are rebuilt on demand."""
        self.prefix_cache = {}
        self.tracks = {}
        self.head_cache = {}
        self.rest_cache = {}
        self.conn_tails = {}
        self.ring_cache = {}
        self.trees_cache = {}
        self.ring_orders = {}
        self.ring_order_chars = 0
        self.rank_ints = {}
        self.once_read = {}
        self.__dict__.pop("_codes", None)
        for name in ("_rest_bytes", "_kinds", "_plans", "_plain_prefix", "_code_sets"):
            self.__dict__.pop(name, None)
        self.forget_idle_threads()  # fewer to send and merge; the merge treats both alike


def _message_text(msg) -> str:
    where = f"{msg.file}:{msg.line_no} " if msg.file else ""
    times = f" (x{msg.count})" if msg.count > 1 else ""
    return f"{msg.level} {where}{msg.text}{times}"
