"""A log file read in large chunks through the fast path, split across processes when it is big.

The file is cut at line boundaries into one part per available core. Each part is parsed on its
own (the first in this process); a part after the first starts not knowing what its threads were
doing, so what a thread does there before its first communicator line is kept apart (`Thread.head`)
and given, at the merge, to whatever the previous part left that thread working on. Communicators
that span a cut are merged instance by instance; the result equals one pass over the whole file.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from k3diag.gcpause import collector_paused
from k3diag.lifecycle import die_with_parent, sigterm_held, stop_workers
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl import chunks
from k3diag.parse.nccl.chunks import whole_line_chunks
from k3diag.parse.nccl.init_state import merge_init_timings, settle_file
from k3diag.parse.nccl.parser import NcclLogParser
from k3diag.parse.nccl.state import Instance, Thread, absorb_all

POOL_MIN_BYTES = 48 << 20  # below this, starting a process costs more than it saves
MAX_WORKERS = 8
PICKLE_LEAD_BYTES = 16 << 20  # how much more the first part reads (`_cut_points`)


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_file(path, input_name: str, workers: int | None = None):
    path = Path(path)
    size = path.stat().st_size
    if workers is None:
        workers = min(available_cores(), MAX_WORKERS) if size >= POOL_MIN_BYTES else 1
    with collector_paused():
        if workers <= 1:
            parser = NcclLogParser(input_name)
            _read_range(parser, path, 0, size, 1)
            return settle_file(parser.finish(), path)
        cuts = _cut_points(path, size, workers)
        parts = [(start, end) for start, end in zip(cuts[:-1], cuts[1:]) if end > start]
        if len(parts) < 2:  # a file of a few long lines cannot be cut
            parser = NcclLogParser(input_name)
            _read_range(parser, path, 0, size, 1)
            return settle_file(parser.finish(), path)
        parsers = _run_parts(path, input_name, parts)
        merged = parsers[0]
        for later in parsers[1:]:
            merge_parser(merged, later)
        return settle_file(merged.finish(), path)


def _run_parts(path: Path, input_name: str, parts: list[tuple[int, int]]) -> list[NcclLogParser]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:  # no fork on this platform: one process reads it all
        context = None
    if context is None:
        parser = NcclLogParser(input_name)
        _read_range(parser, path, 0, parts[-1][1], 1)
        return [parser]
    # a worker ends with this process, however it ends (SIGTERM, SIGKILL), and at once on Ctrl-C
    with ProcessPoolExecutor(max_workers=len(parts) - 1, mp_context=context, initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        try:
            with sigterm_held():  # the first submit forks the workers
                futures = [pool.submit(_parse_part_pickled, str(path), input_name, start, end, index > 0)
                           for index, (start, end) in enumerate(parts) if index > 0]
            first = _parse_part(str(path), input_name, parts[0][0], parts[0][1], False)
            return [first] + [pickle.loads(future.result()) for future in futures]
        except BaseException:
            stop_workers(pool)
            raise


def _parse_part(path: str, input_name: str, start: int, end: int, cut_part: bool) -> NcclLogParser:
    with collector_paused():
        first_line = 1 + _count_newlines(Path(path), start) if start else 1
        parser = NcclLogParser(input_name, cut_part=cut_part)
        _read_range(parser, Path(path), start, end, first_line)
        parser.drop_caches()
        return parser


def _parse_part_pickled(path: str, input_name: str, start: int, end: int, cut_part: bool) -> bytes:
    """A later part's state, pickled here: the executor's thread in the first process then receives one
    bytes object, and the state is rebuilt in the main thread. Rebuilt in that thread (what the executor does
    with a returned object), its tens of thousands of objects went to another malloc arena, which cannot reuse
    what the main thread freed after its own part: ~10 MB more at the peak for an 8,192-rank job's log."""
    return pickle.dumps(_parse_part(path, input_name, start, end, cut_part), pickle.HIGHEST_PROTOCOL)


def _count_newlines(path: Path, end: int) -> int:
    total = 0
    with path.open("rb") as handle:
        left = end
        while left > 0:
            data = handle.read(min(chunks.CHUNK_BYTES, left))
            if not data:
                break
            total += data.count(b"\n")
            left -= len(data)
    return total


def _cut_points(path: Path, size: int, parts: int) -> list[int]:
    """Where each part starts (at a line start), and the file's end. The first part, read in this process,
    is longer by `_lead(size)`: each later part's state is pickled in its worker and unpickled here, so a
    worker given as much as this process would keep it waiting for that long."""
    lead = _lead(size) if parts > 1 else 0
    first = (size + lead * (parts - 1)) // parts
    cuts = [0]
    with path.open("rb") as handle:
        for index in range(1, parts):
            handle.seek(max(first + (size - first) * (index - 1) // (parts - 1), cuts[-1]))
            handle.readline()  # to the start of the next line
            cuts.append(min(handle.tell(), size))
    cuts.append(size)
    return sorted(set(cuts)) if len(set(cuts)) < len(cuts) else cuts


def _lead(size: int) -> int:
    # a part's pickled state is bounded (about 5 MB at any size: the K runs, the open instances), which
    # takes about as long to send and receive as reading 10 to 15 MiB of log takes
    return min(PICKLE_LEAD_BYTES, size // 16)


def _read_range(parser: NcclLogParser, path: Path, start: int, end: int, first_line: int) -> None:
    """Bytes [start, end) of the file, whole lines at a time, through the fast path."""
    lineno = first_line
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            for chunk in whole_line_chunks(handle.read, end - start):
                lineno = parser.feed_bytes(chunk, lineno)
    except OSError as exc:
        parser.read_error = f"reading {parser.input} failed part way: {exc}"


# -- merging a later part into an earlier one ------------------------------------------------------


def merge_parser(a: NcclLogParser, b: NcclLogParser) -> None:
    """Fold part `b` (the file's next part) into `a`, as if one parser had read both in order."""
    cap = P.MAX_CONN_KEYS_PER_INSTANCE
    over = 0
    if b.adopters_dropped:
        # threads this part left busy that the later one may have seen, then forgotten past its bound: what
        # they did across the cut cannot be followed (counted, never silent)
        unsure = sum(1 for key, at in a.threads.items()
                     if (at.current is not None or at.pending) and key not in b.threads and key not in b.adopters)
        if unsure:
            a.not_kept["cut_threads"] += unsure
    for key, adopter in b.adopters.items():  # threads whose empty head closed, then were forgotten
        if key not in b.threads:
            b.threads[key] = Thread(host=key[0], pid=key[1], tid=key[2], dev=None, head=None, head_closed=True,
                                    adopter=adopter)
    for key, bt in b.threads.items():
        at = a.threads.get(key)
        head = bt.head
        prev_current = at.current if at is not None else None
        prev_pending = at.pending if at is not None else {}
        if head is not None and (head.conns or head.rings or head.ring_next or head.trees):
            if prev_current is not None:
                over += prev_current.absorb(head, cap, a.not_kept)
            else:
                if bt.head_closed and bt.adopter in b.instances:
                    adopter = b.instances[bt.adopter]
                    over += absorb_all(adopter.conns, prev_pending, cap)
                    over += absorb_all(adopter.conns, head.conns, cap)
                    prev_pending = {}
                else:
                    over += absorb_all(prev_pending, head.conns, cap)
                head.conns = {}
                if head.rings or head.ring_next or head.trees:
                    anon_key = ("anon",) + key
                    anon = a.instances.get(anon_key) or b.instances.get(anon_key)
                    if anon is None:
                        anon = Instance(key=anon_key, host=key[0], pid=key[1], ptr=None)
                        b.instances[anon_key] = anon
                    over += anon.absorb(head, cap, a.not_kept)
        elif bt.head_closed and bt.adopter in b.instances and prev_current is None and prev_pending:
            over += absorb_all(b.instances[bt.adopter].conns, prev_pending, cap)
            prev_pending = {}
        if bt.head_closed:
            state = (bt.current, bt.pending)
            if prev_pending and prev_current is None:
                # the adopting communicator was built in that part already: the lines become the
                # process's late lines, attached at the end like any connection printed after init
                pending = dict(prev_pending)
                over += absorb_all(pending, bt.pending, cap)
                state = (bt.current, pending)
        else:
            state = (prev_current, prev_pending)
        thread = at or Thread(host=bt.host, pid=bt.pid, tid=bt.tid, dev=bt.dev)
        thread.current, thread.pending = state
        thread.head, thread.head_closed, thread.adopter = None, True, None
        a.threads[key] = thread
    # instances: the same (host, pid, comm pointer) on both sides of the cut is one instance
    merged: dict[int, Instance] = {}
    for key, inst in b.instances.items():
        mine = a.instances.get(key)
        if mine is None:
            if len(a.instances) >= P.MAX_INSTANCES:
                # one for the instance: how many of its lines the later part read is not known here, so the
                # count is a lower bound
                a.not_kept["init_lines"] += 1
                a.not_kept_more.add("init_lines")
                continue
            a.instances[key] = inst
        else:
            over += mine.absorb(inst, cap, a.not_kept)
            merged[id(inst)] = mine
    for thread in a.threads.values():
        if thread.current is not None and id(thread.current) in merged:
            thread.current = merged[id(thread.current)]
    a.left_out("connection_lines", over)
    a.keeper.absorb(b.keeper)
    for key in b.finalized_keys:
        a.note_built(key)
    a.finalized_more = a.finalized_more or b.finalized_more
    for proc, keys in b.finalized_procs.items():
        a.finalized_procs.setdefault(proc, set()).update(keys)
    _merge_facts(a, b)


def _merge_facts(a: NcclLogParser, b: NcclLogParser) -> None:
    if b.version and (a.version is None or (len(b.version) > len(a.version) and b.version.startswith(a.version))):
        a.version, a.version_source = b.version, b.version_source
    if b.library == "RCCL" or a.library is None:
        a.library = b.library or a.library
    for name in ("rccl_hints", "lines_total", "lines_nccl", "skipped", "junk", "unknown_conn", "trees_kept"):
        setattr(a, name, getattr(a, name) + getattr(b, name))
    for kind, number in b.not_kept.items():
        if kind not in b.not_kept_keys:  # counted per line or entry: the parts add up
            a.not_kept[kind] += number
    a.not_kept_more |= b.not_kept_more
    a.skipped_lines = sorted(a.skipped_lines + b.skipped_lines)[: P.MAX_EXAMPLES]
    a.junk_lines = sorted(a.junk_lines + b.junk_lines)[: P.MAX_EXAMPLES]
    for name, value in b.env.items():
        if name in a.env:
            if a.env[name] != value:
                a.env_conflicts.setdefault(name, {a.env[name]}).add(value)
        elif a._room(a.env, P.MAX_ENV, "env", name):
            a.env[name] = value
            a.env_sources[name] = b.env_sources[name]
    for name, values in b.env_conflicts.items():
        a.env_conflicts.setdefault(name, set()).update(values)
    for name, value in b.cmdline_env.items():
        if name not in a.cmdline_env and a._room(a.cmdline_env, P.MAX_ENV, "env", name):
            a.cmdline_env[name] = value
    for key, msg in b.messages.items():
        mine = a.messages.get(key)
        if mine is not None:
            mine.count += msg.count
        elif a._room(a.messages, P.MAX_MESSAGES, "messages", key):
            a.messages[key] = msg
    for table, cap in (("p2p_disabled", P.MAX_P2P_DISABLED), ("gdr", P.MAX_GDR), ("dmabuf", P.MAX_DMABUF),
                       ("graphs", P.MAX_GRAPHS), ("paths", P.MAX_PATHS), ("channel_counts", P.MAX_SMALL_TABLE),
                       ("mnnvl_health", P.MAX_SMALL_TABLE), ("nvls_support", P.MAX_SMALL_TABLE),
                       ("collnet", P.MAX_SMALL_TABLE)):
        mine, theirs = getattr(a, table), getattr(b, table)
        for key, value in theirs.items():
            if key not in mine and a._room(mine, cap, table, key):
                mine[key] = value
    for host, source in b.hosts_seen.items():
        if host not in a.hosts_seen and a._room(a.hosts_seen, P.MAX_HOSTS, "hosts", host):
            a.hosts_seen[host] = source
    for rank, info in b.tests_ranks.items():
        a.tests_ranks.setdefault(rank, info)
    net, other = a.net, b.net
    net.network = net.network or other.network
    net.plugin = net.plugin or other.plugin
    for kind, mine, theirs in (("IB", net.ib_devices, other.ib_devices),
                               ("Socket", net.socket_devices, other.socket_devices)):
        for dev in theirs:
            if dev not in mine and a._room(mine, P.MAX_NET_DEVICES, "net_devices", (kind, dev)):
                mine.append(dev)
    net.ib_not_found = net.ib_not_found or other.ib_not_found
    net.ibverbs_missing = net.ibverbs_missing or other.ibverbs_missing
    net.sources.extend(other.sources[: max(0, 20 - len(net.sources))])
    for kind, source in b.net_first.items():  # the first part's line stays the evidence, as in one pass
        a.net_first.setdefault(kind, source)
    if getattr(b, "read_error", None) and not getattr(a, "read_error", None):
        a.read_error = b.read_error
    merge_init_timings(a, b)
    _merge_not_kept(a, b)


def _merge_not_kept(a: NcclLogParser, b: NcclLogParser) -> None:
    """The distinct facts either part left out, less those the first part kept (its table had room for
    them before it filled): what one pass would have left out."""
    kept = {"env": (a.env, a.cmdline_env), "hosts": (a.hosts_seen,),
            "net_devices": ({("IB", dev) for dev in a.net.ib_devices}
                            | {("Socket", dev) for dev in a.net.socket_devices},)}
    for kind, keys in b.not_kept_keys.items():
        mine = a.not_kept_keys.setdefault(kind, set())
        for key in keys - mine:
            if a.not_kept_held >= P.MAX_NOT_KEPT_KEYS:
                a.not_kept_more.add(kind)
                break
            mine.add(key)
            a.not_kept_held += 1
    for kind, keys in a.not_kept_keys.items():
        for table in kept.get(kind) or (getattr(a, kind),):
            keys.difference_update([key for key in keys if key in table])
        a.not_kept[kind] = len(keys)
        if not keys:
            del a.not_kept[kind]
