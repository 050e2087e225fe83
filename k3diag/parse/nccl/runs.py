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
from k3diag.model.source import SourceRef
from k3diag.parse.ids import bdf_from_nccl_busid
from k3diag.parse.nccl import patterns as P
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

    @property
    def connections(self) -> list[NcclConnection]:
        return [conn for run in self.runs for conn in run.connections]


def finish(parser) -> NcclLogResult:
    result = NcclLogResult(input_name=parser.input)
    result.version = parser.version
    result.hosts_seen = dict(parser.hosts_seen)

    # pending connections of threads that never announced their communicator
    for thread in parser.threads.values():
        if thread.pending:
            bucket = parser.orphans.setdefault((thread.host, thread.pid), {})
            parser.conn_overflow += absorb_all(bucket, thread.pending, P.MAX_CONN_KEYS_PER_INSTANCE)
            thread.pending = {}

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
    for proc, bodies in parser.orphans.items():
        keys = sorted(by_process.get(proc, ()))
        if len(keys) == 1:
            target = keys[0]
        elif len(groups) == 1:
            target = next(iter(groups))
        elif not groups:
            target = "default"
        else:
            target = "unattributed"
        parser.conn_overflow += absorb_all(extra.setdefault(target, {}), bodies, 1 << 30)
    for key in extra:
        groups.setdefault(key, [])

    keep: list[tuple] = []  # heap of (priority, order, run)
    summary = result.summary
    summary.detail_limit = P.DETAIL_RUNS
    library = _library(parser)
    for order, key in enumerate(sorted(groups, key=_run_sort_key)):
        run = _build_run(parser, key, groups.pop(key), extra.pop(key, {}))
        if run is None:
            continue
        run.library = library
        summary.runs_total += 1
        entry = (_priority(run), -order, run)
        if len(keep) < P.DETAIL_RUNS:
            heapq.heappush(keep, entry)
        else:
            dropped = heapq.heappushpop(keep, entry)[2]
            summary.summaries.append(_summarize(dropped))
    if not keep and (parser.env or parser.messages or parser.version or parser.p2p_disabled or parser.lines_nccl
                     or parser.cmdline_env):
        run = _build_run(parser, "default", [], {})
        if run is not None:
            run.library = library
            summary.runs_total += 1
            keep.append(((0,), 0, run))
    result.runs = [entry[2] for entry in sorted(keep, key=lambda e: -e[1])]
    summary.runs_detailed = len(result.runs)
    _attach_unranked_hosts(parser, result)

    result.library = library
    result.lines_total = parser.lines_total
    result.lines_nccl = parser.lines_nccl
    result.lines_skipped = parser.skipped
    result.skipped_lines = sorted(parser.skipped_lines)[: P.MAX_EXAMPLES]
    _warnings(parser, result)
    return result


def _library(parser) -> str | None:
    if parser.rccl_hints:
        return "RCCL"
    if parser.library is None and (parser.instances or parser.lines_nccl):
        return "NCCL"
    return parser.library


def _warnings(parser, result: NcclLogResult) -> None:
    warnings = result.warnings
    if getattr(parser, "read_error", None):
        warnings.append(parser.read_error)
    if parser.skipped:
        where = ", ".join(str(n) for n in result.skipped_lines)
        warnings.append(f"{parser.skipped} NCCL line(s) could not be read (cut or interleaved with other output); "
                        f"first at line(s) {where}")
    if parser.junk:
        where = ", ".join(str(n) for n in sorted(parser.junk_lines)[: P.MAX_EXAMPLES])
        warnings.append(f"{parser.junk} line(s) of binary or undecodable data were skipped; first at line(s) {where}")
    if parser.unknown_conn:
        warnings.append(f"{parser.unknown_conn} connection line(s) name a transport k3diag does not know; not counted")
    if parser.conn_overflow:
        warnings.append(f"{parser.conn_overflow} connection line(s) were counted but not kept: an instance connected "
                        f"to more than {P.MAX_CONN_KEYS_PER_INSTANCE} distinct peers/transports")
    if parser.dropped_instances:
        warnings.append(f"{parser.dropped_instances} communicator line(s) were not tracked: they belong to "
                        f"communicator instances beyond the first {P.MAX_INSTANCES} (limit keeps memory bounded)")
    if parser.messages_dropped:
        warnings.append(f"{parser.messages_dropped} further distinct NCCL warning(s) were not kept")
    summary = result.summary
    if summary.runs_summarized:
        warnings.append(f"{summary.runs_total} communicators in this log: {summary.runs_detailed} reported in full "
                        f"(those that show a problem, then the largest), {summary.runs_summarized} summarized with "
                        "exact counters (`nccl_summary` in --json)")
    for name, values in sorted(parser.env_conflicts.items()):
        warnings.append(f"{name} has different values in this log ({', '.join(sorted(values))}); "
                        "the first one is reported")
    if not result.runs and not parser.lines_nccl:
        warnings.append("no NCCL/RCCL log lines found; run the job with NCCL_DEBUG=INFO "
                        "NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET and give its output")


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
    if largest.nodes_reported is None:
        largest.nodes = len(largest.hosts)


def _priority(run: NcclRun) -> tuple:
    return (1 if _shows_problem(run) else 0, run.nranks or 0, len(run.connections))


def _shows_problem(run: NcclRun) -> bool:
    hosts = {info.rank: info.host for info in run.ranks}
    for conn in run.connections:
        if conn.transport == "NET":
            if "socket" in conn.via.lower() or "GDRDMA" not in conn.via:
                return True
        if conn.transport != "P2P":
            host = hosts.get(conn.src_rank)
            if host is not None and host == hosts.get(conn.dst_rank):
                return True
    return bool(run.p2p_disabled)


def _summarize(run: NcclRun) -> NcclRunSummary:
    return NcclRunSummary(comm_id=run.comm_id, nranks=run.nranks, nodes=run.nodes, hosts=len(run.hosts),
                          transport_counts=run.transport_counts(), pairs=len(run.connections), input=run.input)


def _build_run(parser, key: str, insts: list[Instance], extra: dict) -> NcclRun | None:
    run = NcclRun(input=parser.input, library=None, version=parser.version)
    run.version_source = parser.version_source
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
        source = SourceRef(input_name, agg.lineno, agg.text)
        run.connections.append(NcclConnection(channels[0] if channels else None, agg.src, agg.dst, agg.via,
                                              agg.transport, agg.direction, source, channels, len(agg.codes)))
        _ranks_from_connection(ranks, agg, source, prefix_cache, agg.transport != "NET" and "MNNVL" not in agg.via)
        if agg.nranks_suffix and not nranks:
            nranks.add(agg.nranks_suffix)
    if run.nranks is None and nranks:
        run.nranks = max(nranks)
    # nccl-tests headers name the host and device of every rank
    if parser.tests_ranks and (run.nranks is None or len(parser.tests_ranks) <= run.nranks):
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
    if run.nodes_reported is not None:
        run.nodes = run.nodes_reported
    elif run.hosts:
        run.nodes = len(run.hosts)

    ring_map: dict[int, NcclRing] = {}
    trees: dict[tuple, NcclTree] = {}
    nexts: dict[int, dict[int, int]] = {}
    for inst in insts:
        for ch, (order, source) in (inst.rings or {}).items():
            ring_map.setdefault(ch, NcclRing(ch, order, source))
        for ch, mapping in (inst.ring_next or {}).items():
            nexts.setdefault(ch, {}).update(mapping)
        for tkey, tree in (inst.trees or {}).items():
            if len(trees) < P.MAX_TREES_PER_RUN:
                trees.setdefault(tkey, tree)
    for ch, mapping in nexts.items():
        if ch not in ring_map:
            order = _follow_ring(mapping)
            if order:
                ring_map[ch] = NcclRing(ch, order, None)
    run.rings = [ring_map[ch] for ch in sorted(ring_map)]
    run.trees = [trees[k] for k in sorted(trees)]

    shared = parser.shared()
    run.env = shared["env"]
    run.env_sources = shared["env_sources"]
    run.env_origin = shared["env_origin"]
    run.messages = shared["messages"]
    run.warnings = shared["warnings"]
    run.p2p_disabled = shared["p2p_disabled"]
    run.gdr = shared["gdr"]
    run.dmabuf = shared["dmabuf"]
    run.graphs = shared["graphs"]
    run.paths = shared["paths"]
    run.channel_counts = shared["channel_counts"]
    run.mnnvl_health = shared["mnnvl_health"]
    run.net = parser.net
    run.connections_dropped = parser.conn_overflow
    if not (run.connections or run.ranks or run.rings or run.trees or run.env or run.messages or run.version
            or run.p2p_disabled or run.paths or run.graphs):
        return None
    return run


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
        found = P.PREFIX_RE.search(pre)
        if found:
            parsed = (found.group("host"), int(found.group("pid")), int(found.group("dev")))
        else:
            found = P.PREFIX_NOPID_RE.search(pre)
            parsed = (found.group("host"), None, int(found.group("dev"))) if found else (None, None, None)
        if len(prefix_cache) < 100_000:
            prefix_cache[pre] = parsed
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
