"""After the last line: instances grouped into communicators (runs), each built once.

Runs are told apart by `commId` (NCCL 2.13+), otherwise by size. The runs that matter are kept in
full: those that show a problem (same-host pairs off P2P, NET over sockets, IB without GDRDMA) and
the largest, up to `DETAIL_RUNS`; every other run becomes an `NcclRunSummary` of exact counters, and
the result says how many were summarized.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from k3diag.model.nccl import NcclConnection, NcclRank, NcclRing, NcclRun, NcclRunSummary, NcclSummary, NcclTree
from k3diag.model.source import SourceRef, source_ref
from k3diag.parse.ids import bdf_from_nccl_busid
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl.init_state import init_state, is_stuck, timings_of
from k3diag.parse.nccl.log_warnings import log_warnings
from k3diag.parse.nccl.state import ConnAgg, Instance, absorb_all


@dataclass
class NcclLogResult:
    runs: list[NcclRun] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    library: str | None = None
    version: str | None = None
    lines_total: int = 0
    lines_nccl: int = 0
    lines_skipped: int = 0
    skipped_lines: list[int] = field(default_factory=list)  # first few line numbers
    input_name: str = ""
    summary: NcclSummary = field(default_factory=NcclSummary)
    # every host named on an NCCL line, ranked or not, with the first such line
    hosts_seen: dict[str, SourceRef] = field(default_factory=dict)
    identity: object = None  # k3diag.model.identity.InputIdentity

    @property
    def connections(self) -> list[NcclConnection]:
        return [conn for run in self.runs for conn in run.connections]


class _Kept:
    """A run in the keeper's heap, ordered by what makes it worth reporting in full."""

    __slots__ = ("rank", "run", "summary")

    def __init__(self, rank: tuple, run: NcclRun | None, summary: NcclRunSummary) -> None:
        self.rank = rank
        self.run = run
        self.summary = summary

    def __lt__(self, other: "_Kept") -> bool:
        return self.rank < other.rank


class RunKeeper:
    """The `DETAIL_RUNS` runs that matter most, in full; exact counters of the others, by shape."""

    def __init__(self) -> None:
        self.heap: list[_Kept] = []
        self.shapes: dict[tuple, dict] = {}
        self.total = 0
        self.late_lines = 0  # connection lines printed after a summarized run was built

    def offer(self, parser, key: str, insts: list[Instance], extra: dict, first_line: int,
              allow_empty: bool = False) -> None:
        """A finished communicator: built in full only if it ranks among the runs kept."""
        if not (allow_empty or extra or any(i.conns or i.rings or i.ring_next or i.trees
                                                 or (i.rank is not None and i.ptr is not None) for i in insts)):
            return  # nothing a run would show
        problem, summary = _stats(insts, extra)
        rank = ((1 if problem else 0, summary.nranks or 0, summary.pairs), -first_line, key)
        self.total += 1
        if len(self.heap) >= P.DETAIL_RUNS and rank < self.heap[0].rank:
            self._count(summary)
            return
        run = _build_run(parser, key, insts, extra, allow_empty)
        if run is None:
            self.total -= 1
            return
        self._push(_Kept(rank, run, summary))

    def _push(self, kept: _Kept) -> None:
        if len(self.heap) < P.DETAIL_RUNS:
            heapq.heappush(self.heap, kept)
            return
        self._count(heapq.heappushpop(self.heap, kept).summary)

    def _count(self, item: NcclRunSummary, times: int = 1, comm_ids: list | None = None) -> None:
        group = self.shapes.get(item.shape())
        if group is None:
            group = self.shapes[item.shape()] = {"item": item, "count": 0, "comm_ids": []}
        group["count"] += times
        # the first few comm ids in sorted order: the same whatever order runs were built in
        ids = set(group["comm_ids"]) | {c for c in (comm_ids if comm_ids is not None else [item.comm_id]) if c}
        group["comm_ids"] = sorted(ids)[:8]

    def absorb(self, other: "RunKeeper") -> None:
        """Runs another part of the file built (its share of the total is counted there)."""
        self.total += other.total
        self.late_lines += other.late_lines
        for group in other.shapes.values():
            self._count(group["item"], group["count"], group["comm_ids"])
        for kept in other.heap:
            self._push(kept)

    def summary(self) -> NcclSummary:
        summary = NcclSummary(runs_total=self.total, runs_detailed=len(self.heap), detail_limit=P.DETAIL_RUNS,
                              late_lines=self.late_lines)
        summary.groups = [(group["item"], group["count"], group["comm_ids"]) for group in self.shapes.values()]
        return summary


def _stats(insts: list[Instance], extra: dict) -> tuple[bool, NcclRunSummary]:
    """Exact counters of a run straight from its instances (no records built), and whether it shows
    a problem worth reporting in full: NET over sockets or without GDRDMA, a same-host pair off P2P."""
    folded: dict[tuple, tuple[str, set]] = {}
    nranks = nnodes = suffix = 0
    host_of: dict[int, str] = {}
    for source in [inst.conns for inst in insts] + [extra]:
        for key, agg in source.items():
            entry = folded.get(key)
            if entry is None:
                folded[key] = (agg.transport, agg.codes)  # read only: copied if another instance adds to it
            else:
                folded[key] = (entry[0], entry[1] | agg.codes)
            if agg.nranks_suffix:
                suffix = max(suffix, agg.nranks_suffix)
    for inst in insts:
        nranks = max(nranks, inst.nranks or 0)
        nnodes = max(nnodes, inst.nnodes or 0)
        if inst.ptr is not None and inst.rank is not None and inst.host:
            host_of.setdefault(inst.rank, inst.host)
    counts = {"P2P": 0, "SHM": 0, "NET": 0}
    problem = any(map(is_stuck, insts))  # a rank stuck in init: the key evidence of a hang, kept in full
    for (src, dst, via, _), (transport, codes) in folded.items():
        counts[transport] = counts.get(transport, 0) + len(codes)
        if problem:
            continue
        if transport == "NET" and ("socket" in via.lower() or "GDRDMA" not in via):
            problem = True
        elif transport != "P2P" and host_of.get(src) is not None and host_of.get(src) == host_of.get(dst):
            problem = True
    hosts = set(host_of.values())
    comm_id = next((i.comm_id for i in insts if i.comm_id), None)
    summary = NcclRunSummary(comm_id=comm_id, nranks=nranks or suffix or None, nodes=nnodes or len(hosts) or None,
                             hosts=len(hosts), transport_counts=counts, pairs=len(folded))
    return problem, summary


def finalize_run(parser, key: str, members: list[Instance]) -> None:
    parser.keeper.offer(parser, key, members, {}, min((m.first_line for m in members), default=0))
    # `MAX_TREES` bounds the trees held by communicators still being read: these are let go now (a run
    # kept in full holds its own, at most `MAX_TREES_PER_RUN`), so later runs may keep theirs
    parser.trees_kept -= sum(len(member.trees) for member in members if member.trees)
    # which processes took part: connection lines they print after init (lazy p2p) still find the run
    procs = parser.finalized_procs
    for member in members:
        procs.setdefault((member.host, member.pid), set()).add(key)
    if len(procs) > P.MAX_FINALIZED_PROCS:  # forget the oldest half: late lines come soon after init
        for proc in list(procs)[: len(procs) // 2]:
            del procs[proc]
    parser.note_built(key)


def _finalize_complete(parser) -> None:
    """Communicators whose every rank completed but that were not built while reading (a part of a
    file cut across them, or ranks completing in another part)."""
    by_comm: dict[str, list[Instance]] = {}
    for inst in parser.instances.values():
        if inst.comm_id and inst.ptr is not None:
            by_comm.setdefault(inst.comm_id, []).append(inst)
    for comm_id, members in by_comm.items():
        nranks = members[0].nranks
        ranks = {m.rank for m in members if m.complete and m.rank is not None}
        if not nranks or len(ranks) != nranks or not all(m.complete for m in members):
            continue
        for member in members:
            del parser.instances[member.key]
        finalize_run(parser, "id:" + comm_id, members)


def finish(parser) -> NcclLogResult:
    result = NcclLogResult(input_name=parser.input)
    result.version = parser.version
    result.hosts_seen = dict(parser.hosts_seen)

    # pending connections of threads that never announced their communicator
    for thread in parser.threads.values():
        if thread.pending:
            bucket = parser.orphans.setdefault((thread.host, thread.pid), {})
            parser.left_out("connection_lines", absorb_all(bucket, thread.pending, P.MAX_CONN_KEYS_PER_INSTANCE))
            thread.pending = {}

    _finalize_complete(parser)
    groups: dict[str, list[Instance]] = {}
    for inst in parser.instances.values():
        if inst.ptr is None and not (inst.rings or inst.ring_next or inst.trees or inst.conns):
            continue
        groups.setdefault(_group_key(inst), []).append(inst)
    # anonymous instances (rings/trees with no init line) join the single real group, if any
    anon = groups.pop("anon", [])
    if anon:
        if len(groups) == 1:
            next(iter(groups.values())).extend(anon)
        else:
            groups["anon"] = anon

    # orphan connections: attach to the process's only communicator, else the only run
    by_process: dict[tuple, set[str]] = {}
    for key, insts in groups.items():
        for inst in insts:
            by_process.setdefault((inst.host, inst.pid), set()).add(key)
    extra: dict[str, dict] = {}
    late: dict[str, dict] = {}  # for runs built while reading (their instances are gone)
    only_run = None
    built_runs = len(parser.finalized_keys) + (1 if parser.finalized_more else 0)  # none, one or several
    if len(groups) + built_runs == 1:
        only_run = next(iter(groups)) if groups else next(iter(parser.finalized_keys))
    for proc, bodies in parser.orphans.items():
        built = parser.finalized_procs.get(proc, set())
        keys = sorted(by_process.get(proc, set()) | built)
        if len(keys) == 1:
            target = keys[0]
        elif only_run is not None:
            target = only_run
        elif not groups and not built_runs:
            target = "default"
        else:
            target = "unattributed"
        # a run built while reading (its instances are gone): the lines are its late lines
        was_built = target in built or (target == only_run and not groups)
        bucket = late if was_built and target not in groups else extra
        absorb_all(bucket.setdefault(target, {}), bodies, 1 << 30)  # unbounded: nothing is left out
    for key in extra:
        groups.setdefault(key, [])

    keeper = parser.keeper
    for key in sorted(groups, key=_run_sort_key):
        insts = groups.pop(key)
        bodies = extra.pop(key, {})
        keeper.offer(parser, key, insts, bodies, _first_line(insts, bodies))
    if not keeper.heap and (parser.env or parser.messages or parser.version or parser.p2p_disabled
                            or parser.lines_nccl or parser.cmdline_env):
        keeper.offer(parser, "default", [], {}, 0, allow_empty=True)
    _attach_late(parser, late)
    library = _library(parser)
    if parser.net_first:  # the lines that set the network and plugin, among the others in line order
        net = parser.net
        net.sources = sorted(net.sources + list(parser.net_first.values()), key=lambda s: s.line or 0)[:20]
        parser.net_first = {}
    kept = sorted(keeper.heap, key=lambda k: -k.rank[1])  # in the order they appear in the log
    result.runs = [k.run for k in kept]
    for run in result.runs:
        _complete_run(parser, run, library)
    result.summary = keeper.summary()
    result.summary.not_kept = dict(parser.not_kept)
    result.summary.not_kept_lower_bounds = sorted(parser.not_kept_more)
    _attach_unranked_hosts(parser, result)

    result.library = library
    result.lines_total = parser.lines_total
    result.lines_nccl = parser.lines_nccl
    result.lines_skipped = parser.skipped
    result.skipped_lines = sorted(parser.skipped_lines)[: P.MAX_EXAMPLES]
    log_warnings(parser, result)
    result.identity = _identity(result)
    return result


def _identity(result: NcclLogResult):
    """What the log says of its machine: a one-host log names it and its GPUs' bus ids (a multi-node
    log describes several machines, so it claims none of them)."""
    from k3diag.model.identity import InputIdentity

    identity = InputIdentity()
    hosts = set(result.hosts_seen) | {h for run in result.runs for h in run.hosts}
    if len(hosts) != 1:
        return identity
    host = next(iter(hosts))
    identity.add_hostname(host, result.hosts_seen.get(host))
    for run in result.runs:
        for info in run.ranks:
            if info.bus_id and info.host in (host, None):
                identity.add_bus_id(info.bus_id, info.source)
    return identity


def _attach_late(parser, late: dict[str, dict]) -> None:
    """Connection lines a process printed after its communicator was built (lazy p2p connections):
    added to that run when it is reported in full, else counted with the summarized runs."""
    kept = {entry.rank[2]: entry.run for entry in parser.keeper.heap}
    for key, aggs in late.items():
        run = kept.get(key)
        if run is None:
            parser.keeper.late_lines += sum(len(agg.codes) for agg in aggs.values())
            continue
        ranks = {info.rank: info for info in run.ranks}
        known = {(c.src_rank, c.dst_rank, c.via, c.direction): c for c in run.connections}
        for agg in sorted(aggs.values(), key=lambda a: a.lineno):
            key4 = (agg.src, agg.dst, agg.via, agg.direction)
            conn = known.get(key4)
            channels = sorted({code >> 8 for code in agg.codes})
            if conn is not None:
                conn.channels = sorted(set(conn.channels) | set(channels))
                conn.channel = conn.channels[0] if conn.channels else conn.channel
                conn.lines += len(agg.codes)  # later lines of one instance: distinct by construction
                continue
            source = source_ref(parser.input, agg.lineno, agg.text)
            conn = known[key4] = NcclConnection(channels[0] if channels else None, agg.src, agg.dst, agg.via,
                                                agg.transport, agg.direction, source, channels, len(agg.codes))
            run.connections.append(conn)
            _ranks_from_connection(ranks, agg, source, {}, agg.transport != "NET" and "MNNVL" not in agg.via)
        run.connections.sort(key=lambda c: c.source.line if c.source and c.source.line else 0)
        run.ranks = [ranks[r] for r in sorted(ranks)]
        run.hosts = sorted({r.host for r in run.ranks if r.host})
        run.nodes = _nodes(run)


def _nodes(run: NcclRun) -> int | None:
    """NCCL's nNodes, else the nodes its hosts prove: one host that printed some of the ranks says nothing of
    where the others ran (a node's share of a multi-node job's log); several are at least that many."""
    if run.nodes_reported is not None or not run.hosts:
        return run.nodes_reported
    if len(run.hosts) > 1 or not run.nranks or sum(1 for r in run.ranks if r.host) >= run.nranks:
        return len(run.hosts)
    return None


def _first_line(insts: list[Instance], extra: dict) -> int:
    """Where a run starts in the log, the same on every path (instances built from a cut part's head
    have no line of their own: their lines decide)."""
    lines = [i.first_line for i in insts if i.ptr is not None]
    if not lines:
        lines = [agg.lineno for agg in extra.values()] + [agg.lineno for i in insts for agg in i.conns.values()]
        for inst in insts:
            lines.extend(src.line for _, src in (inst.rings or {}).values() if src is not None and src.line)
            lines.extend(t.source.line for t in (inst.trees or {}).values() if t.source is not None and t.source.line)
    return min(lines, default=1 << 62)


def _library(parser) -> str | None:
    """RCCL when anything said so (its spellings, `librccl`, an RCCL version line), else NCCL."""
    if parser.rccl_hints:
        return "RCCL"
    if parser.library is None and (parser.instances or parser.lines_nccl):
        return "NCCL"
    return parser.library


def _attach_unranked_hosts(parser, result: NcclLogResult) -> None:
    """Hosts named only on lines without a rank belong to the job: the largest run lists them."""
    if not result.runs or not parser.hosts_seen:
        return
    ranked = {host for run in result.runs for host in run.hosts}
    unranked = [host for host in parser.hosts_seen if host not in ranked]
    if not unranked:
        return
    largest = max(result.runs, key=lambda run: run.nranks or 0)
    largest.hosts_unranked = sorted(unranked)
    largest.hosts_sources = {host: parser.hosts_seen[host] for host in unranked}
    largest.hosts = sorted(set(largest.hosts) | set(unranked))
    largest.nodes = _nodes(largest)


def _build_run(parser, key: str, insts: list[Instance], extra: dict, allow_empty: bool = False) -> NcclRun | None:
    run = NcclRun(input=parser.input, library=None, version=None)
    run.comm_id = key[3:] if key.startswith("id:") else None
    ranks: dict[int, NcclRank] = {}
    nranks: set[int] = set()
    nnodes: set[int] = set()
    for inst in insts:
        if inst.nranks is not None:
            nranks.add(inst.nranks)
        if inst.nnodes is not None:
            nnodes.add(inst.nnodes)
        if inst.rank is not None and inst.ptr is not None:
            info = ranks.get(inst.rank)
            if info is None:
                ranks[inst.rank] = NcclRank(inst.rank, inst.host, inst.pid, inst.cuda_dev, inst.nvml_dev,
                                            inst.bus_id, inst.source)
            else:
                info.host = info.host or inst.host
                info.pid = info.pid or inst.pid
                info.cuda_dev = info.cuda_dev if info.cuda_dev is not None else inst.cuda_dev
                info.nvml_dev = info.nvml_dev if info.nvml_dev is not None else inst.nvml_dev
                info.bus_id = info.bus_id or inst.bus_id
    run.nranks = max(nranks) if nranks else None
    run.nodes_reported = max(nnodes) if nnodes else None

    # connections: one record per (src, dst, via, direction) over the run's instances
    folded: dict[tuple, ConnAgg] = {}
    for inst in insts:
        absorb_all(folded, inst.conns, 1 << 30)
        inst.conns = {}  # drop as we go: bounded peak memory
    absorb_all(folded, extra, 1 << 30)
    extra.clear()
    prefix_cache: dict[str, tuple] = {}
    input_name = parser.input
    for agg in sorted(folded.values(), key=lambda a: a.lineno):
        channels = sorted({code >> 8 for code in agg.codes})
        source = source_ref(input_name, agg.lineno, agg.text)
        run.connections.append(NcclConnection(channels[0] if channels else None, agg.src, agg.dst, agg.via,
                                              agg.transport, agg.direction, source, channels, len(agg.codes)))
        _ranks_from_connection(ranks, agg, source, prefix_cache, agg.transport != "NET" and "MNNVL" not in agg.via)
        if agg.nranks_suffix and not nranks:
            nranks.add(agg.nranks_suffix)
    if run.nranks is None and nranks:
        run.nranks = max(nranks)
    run.ranks = [ranks[r] for r in sorted(ranks)]
    run.hosts = sorted({r.host for r in run.ranks if r.host})
    run.nodes = _nodes(run)

    ring_map: dict[int, NcclRing] = {}
    trees: dict[tuple, NcclTree] = {}
    nexts: dict[int, dict[int, int]] = {}
    for inst in insts:
        for ch, (order, source) in (inst.rings or {}).items():
            ring_map.setdefault(ch, NcclRing(ch, order, source))
        for ch, mapping in (inst.ring_next or {}).items():
            nexts.setdefault(ch, {}).update(mapping)
        for tkey, tree in (inst.trees or {}).items():
            if tkey in trees:
                continue
            if len(trees) < P.MAX_TREES_PER_RUN:
                trees[tkey] = tree
            else:
                run.trees_not_kept += 1
    for ch, mapping in nexts.items():
        if ch not in ring_map:
            order = _follow_ring(mapping)
            if order:
                ring_map[ch] = NcclRing(ch, order, None)
    run.rings = [ring_map[ch] for ch in sorted(ring_map)]
    run.trees = [trees[k] for k in sorted(trees)]
    run.init = init_state(insts, run.nranks)

    if not (allow_empty or run.connections or run.ranks or run.rings or run.trees):
        return None
    return run


def _complete_run(parser, run: NcclRun, library: str | None) -> None:
    """What the whole log says, given to each run reported in full once the last line is read."""
    run.library = library
    run.version = parser.version
    run.version_source = parser.version_source
    # nccl-tests headers name the host and device of every rank
    if parser.tests_ranks and (run.nranks is None or len(parser.tests_ranks) <= run.nranks):
        ranks = {info.rank: info for info in run.ranks}
        for rank, info in parser.tests_ranks.items():
            known = ranks.get(rank)
            if known is None:
                ranks[rank] = NcclRank(info.rank, info.host, info.pid, info.cuda_dev, None, info.bus_id, info.source)
            else:
                known.host = known.host or info.host
                known.bus_id = known.bus_id or info.bus_id
                if known.cuda_dev is None:
                    known.cuda_dev = info.cuda_dev
        run.ranks = [ranks[r] for r in sorted(ranks)]
        run.hosts = sorted({r.host for r in run.ranks if r.host})
        run.nodes = _nodes(run)
    for name, value in parser.shared().items():  # each key names the NcclRun field it fills
        setattr(run, name, value)
    run.net = parser.net
    run.init_timings = timings_of(parser, "id:" + run.comm_id if run.comm_id else f"nranks:{run.nranks}", run)
    run.connections_dropped = parser.not_kept.get("connection_lines", 0)  # log-wide, as it always was


def _ranks_from_connection(ranks: dict[int, NcclRank], agg: ConnAgg, source: SourceRef, prefix_cache: dict,
                           intra_node: bool) -> None:
    """The logging rank (sender; receiver for `[receive]`) ran on the prefix's host and device; over
    P2P and SHM (not multi-node NVLink) its peer is on the same host."""
    era_ring = agg.kind == "Ring"
    for rank, bracket in ((agg.src, agg.sb), (agg.dst, agg.db)):
        info = ranks.get(rank)
        if info is None:
            info = ranks[rank] = NcclRank(rank, source=source)
        elif info.bus_id or info.nvml_dev is not None or info.cuda_dev is not None:
            continue
        if len(bracket) >= 4:
            info.bus_id = info.bus_id or bdf_from_nccl_busid(bracket)
        elif bracket.isdigit():
            # 2.4-2.6 printed cudaDev in brackets, 2.13+ prints nvmlDev
            if era_ring:
                info.cuda_dev = int(bracket)
            else:
                info.nvml_dev = int(bracket)
    logger = agg.dst if agg.direction == "receive" else agg.src
    info = ranks[logger]
    peer = ranks[agg.src if logger == agg.dst else agg.dst]
    if info.host is not None and info.pid is not None:
        if intra_node and peer.host is None:
            peer.host = info.host
        return
    text = agg.text
    k = text.find(P.MARK)
    if k <= 0:
        return
    pre = text[:k]
    parsed = prefix_cache.get(pre)
    if parsed is None:
        found = P.PREFIX_RE.search(pre[-P.MAX_HEADER_CHARS:])
        if found:
            parsed = (found.group("host"), int(found.group("pid")), int(found.group("dev")))
        else:
            found = P.PREFIX_NOPID_RE.search(pre[-P.MAX_HEADER_CHARS:])
            parsed = (found.group("host"), None, int(found.group("dev"))) if found else (None, None, None)
        P.remember(prefix_cache, pre, parsed, 100_000, pre)
    host, pid, dev = parsed
    if info.host is None:
        info.host = host
    if info.pid is None:
        info.pid = pid
    if info.cuda_dev is None and dev is not None:
        info.cuda_dev = dev
    if intra_node and peer.host is None:
        peer.host = info.host


def _group_key(inst: Instance) -> str:
    if inst.ptr is None:
        return "anon"
    if inst.comm_id:
        return f"id:{inst.comm_id}"
    if inst.nranks is not None:
        return f"nranks:{inst.nranks}"
    return "unknown"


def _run_sort_key(key: str) -> tuple:
    order = {"id": 0, "nranks": 1, "unknown": 2, "anon": 3, "default": 4, "unattributed": 5}
    return (order.get(key.split(":")[0], 9), key)


def _follow_ring(mapping: dict[int, int]) -> list[int]:
    if not mapping:
        return []
    start = 0 if 0 in mapping else min(mapping)
    order = [start]
    current = start
    for _ in range(len(mapping)):
        nxt = mapping.get(current)
        if nxt is None or nxt == start or nxt in order:
            break
        order.append(nxt)
        current = nxt
    return order
