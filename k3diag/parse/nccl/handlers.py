"""One handler per kind of NCCL line other than connection lines (those are folded in `lines`/`fast`):
the dispatch of INFO lines, communicator lines, rings, trees, other program output. The log-wide
facts (environment, network, paths, warnings...) are in `facts`.

Each handler reads one line already classified by its tag and updates the parser's bounded state.
"""

from __future__ import annotations

import re

from k3diag.model.nccl import NcclRank, NcclTree
from k3diag.model.source import SourceRef, source_ref
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl.comm_shapes import BUS_CACHE as _BUS_CACHE
from k3diag.parse.nccl.comm_shapes import COMM_LINE_RE as _COMM_LINE_RE
from k3diag.parse.nccl.comm_shapes import INIT_LINE_RE as _INIT_LINE_RE
from k3diag.parse.nccl.comm_shapes import bus_id as _bus_id
from k3diag.parse.nccl.comm_shapes import comm_values as _comm_values
from k3diag.parse.nccl.init_state import done_key as _done_key
from k3diag.parse.nccl.init_state import read_init_timings as _read_init_timings
from k3diag.parse.nccl.state import Instance, Thread

# A pasted command line or `env` dump that sets a variable changing NCCL's transports.
_CMDLINE_ENV_RE = re.compile(
    r"(?:^|[\s;'\"(])(?:export\s+)?(?P<name>NCCL_(?:P2P_DISABLE|P2P_LEVEL|SHM_DISABLE|IB_DISABLE|NET_GDR_LEVEL|"
    r"NVLS_ENABLE|CUMEM_ENABLE|NET|SOCKET_IFNAME|IB_HCA|ALGO|PROTO))=(?P<value>[^\s;'\"]+)"
)


class LineHandlers:
    """Mixin of `NcclLogParser`: the handlers for each non-connection kind of line."""

    input: str

    # -- common --------------------------------------------------------------------------------
    def _source(self, lineno: int, raw: str) -> SourceRef:
        text = raw.rstrip("\r\n")
        if len(text) > 2000:
            text = text[:2000] + "..."
        return source_ref(self.input, lineno, text)

    def _room(self, table, cap: int, kind: str, key: object = None) -> bool:
        """Whether `table` may take one more entry; if not, the entry is counted as not kept (`not_kept`):
        once per distinct `key` when one is given (a fact that recurs on every rank is one fact)."""
        if len(table) < cap:
            return True
        if key is None:
            self.not_kept[kind] += 1
            return False
        keys = self.not_kept_keys.setdefault(kind, set())
        if key not in keys:
            if self.not_kept_held < P.MAX_NOT_KEPT_KEYS:
                keys.add(key)
                self.not_kept_held += 1
                self.not_kept[kind] += 1
            else:  # too many to tell apart: the count is a lower bound from here on
                self.not_kept_more.add(kind)
        return False

    def left_out(self, kind: str, number: int) -> None:
        """`number` lines or entries of `kind` a bound left out (nothing is recorded for none)."""
        if number:
            self.not_kept[kind] += number

    def _skip(self, lineno: int) -> None:
        """Counted; the smallest line numbers kept as examples (the bulk path may skip out of order)."""
        self.skipped += 1
        examples = self.skipped_lines
        if len(examples) < P.MAX_EXAMPLES:
            examples.append(lineno)
        elif lineno < max(examples):
            examples.remove(max(examples))
            examples.append(lineno)

    def _thread(self, pre: str) -> Thread:
        cached = self.prefix_cache.get(pre)
        if cached is not None:
            return cached
        match = P.PREFIX_RE.search(pre[-P.MAX_HEADER_CHARS:])
        if match:
            key = (match.group("host"), int(match.group("pid")), int(match.group("tid")))
            dev = int(match.group("dev"))
        else:
            match2 = P.PREFIX_NOPID_RE.search(pre[-P.MAX_HEADER_CHARS:])
            if match2:
                key = (match2.group("host"), None, None)
                dev = int(match2.group("dev"))
            else:
                key = (None, None, None)
                dev = None
        thread = self.threads.get(key)
        if thread is None:
            if len(self.threads) >= max(P.MAX_THREADS, self.thread_limit):
                # drop threads that hold nothing; a 5 GB log of many short jobs must not grow
                self.forget_idle_threads()
                # what could not be forgotten stays: look again only once as many threads came
                self.thread_limit = 2 * len(self.threads)
            thread = Thread(host=key[0], pid=key[1], tid=key[2], dev=dev)
            if self.cut_part:
                # what this thread does before its first comm line here continues the previous part
                thread.head = Instance(key=("head",) + key, host=key[0], pid=key[1], ptr=None)
                thread.head_closed = False
                thread.current = thread.head
            self.threads[key] = thread
        # prefixes carrying timestamps are unique per line: the bound stops them from piling up
        P.remember(self.prefix_cache, pre, thread, P.MAX_PREFIX_CACHE, pre)
        return thread

    def forget_idle_threads(self) -> None:
        """Threads with nothing in flight are dropped (what a merge needs of them stays in `adopters`).

        In a cut part an open head that holds nothing goes too: a thread that never prints a comm line
        (the main thread's `cudaDriverVersion` and `Bootstrap` lines) would otherwise keep one per process
        for the whole part, and memory would grow with the log. Forgetting it changes nothing at the
        merge: an empty open head hands nothing on, and the earlier part's state of the thread continues."""
        for key, old in list(self.threads.items()):
            head = old.head
            holds = head is not None and bool(head.conns or head.rings or head.ring_next or head.trees)
            empty_open_head = head is not None and not old.head_closed and old.current is head and not holds
            if old.pending or (old.current is not None and not empty_open_head) or holds:
                continue
            if head is not None and old.head_closed:
                # what the merge needs of an empty head: the threads the previous part left busy print again
                # right after the cut, so the first ones are kept; memory must not grow with the log
                if len(self.adopters) < P.MAX_ADOPTERS:
                    self.adopters[key] = old.adopter
                else:
                    self.adopters_dropped += 1
            del self.threads[key]
        # a prefix must not keep leading to a forgotten thread (its next line makes a new one): every
        # prefix is looked up again; cleared in place, as the line loops hold this dict's `get`
        self.prefix_cache.clear()

    def _host_seen(self, thread: Thread, lineno: int, raw: str) -> None:
        """Hosts named on any NCCL line, with or without a rank (Bootstrap, NET/IB, WARN...)."""
        host = thread.host
        if host and host not in self.hosts_seen and self._room(self.hosts_seen, P.MAX_HOSTS, "hosts", host):
            self.hosts_seen[host] = self._source(lineno, raw)

    # -- other program output ----------------------------------------------------------------
    def _other(self, raw: str, lineno: int) -> None:
        if "ersion" in raw and ("NCCL version" in raw or "RCCL version" in raw):
            self._version(raw, lineno)
            return
        if "Rank" in raw and "Pid" in raw:
            match = P.TESTS_RANK_RE.match(raw)
            if match:
                self._tests_rank(match, raw, lineno)
                return
        if "\x00" in raw or "\ufffd" in raw:
            self.junk += 1
            if len(self.junk_lines) < P.MAX_EXAMPLES:
                self.junk_lines.append(lineno)
            return
        if "NCCL_" in raw and "=" in raw:
            self._cmdline_env(raw, lineno)
        if "/dev/shm" in raw:
            # PyTorch's `Last error:` relays NCCL's shm failure on a line of its own
            self._message("ERROR", raw.strip()[:500], None, None, raw, lineno)
            return
        if "NCCL INFO" in raw or "NCCL WARN" in raw:
            # `NCCL INFO` glued to something before it: a record cut by another write
            self._skip(lineno)
        elif "librccl" in raw or "RCCL" in raw[:40]:
            self.rccl_hints += 1

    def _cmdline_env(self, raw: str, lineno: int) -> None:
        for match in _CMDLINE_ENV_RE.finditer(raw):
            name, value = match.group("name"), match.group("value")
            if name not in self.cmdline_env and self._room(self.cmdline_env, P.MAX_ENV, "env", name):
                self.cmdline_env[name] = (value, self._source(lineno, raw))

    def _version(self, raw: str, lineno: int) -> None:
        match = P.VERSION_RE.search(raw)
        if not match:
            return
        lib = match.group("lib")
        version = match.group("ver")
        extra = match.group("extra")
        if extra and extra[0] in "+-":
            version += extra
        if lib == "RCCL":
            self.library = "RCCL"
        elif self.library is None:
            self.library = "NCCL"
        # `NCCL version: 2.21.5,` from PyTorch's environment dump is the same fact, less detail
        if self.version is None or (len(version) > len(self.version) and version.startswith(self.version)):
            self.version = version
            self.version_source = self._source(lineno, raw)

    def _tests_rank(self, match: re.Match, raw: str, lineno: int) -> None:
        from k3diag.parse.nccl.sniff import bus_id_from_tests_header

        rank = int(match.group("rank"))
        if rank in self.tests_ranks or len(self.tests_ranks) >= 100_000:
            return
        self.tests_ranks[rank] = NcclRank(
            rank=rank,
            host=match.group("host"),
            pid=int(match.group("pid")),
            cuda_dev=int(match.group("dev")),
            bus_id=bus_id_from_tests_header(match.group("bus")),
            source=self._source(lineno, raw),
        )

    # -- NCCL records other than connection lines -------------------------------------------
    def _record(self, raw: str, k: int, lineno: int) -> None:
        level = raw[k + 6 : k + 10]
        if level == "INFO":
            self.lines_nccl += 1
            pre = raw[:k]
            thread = self.prefix_cache.get(pre) or self._thread(pre)
            if thread.host not in self.hosts_seen:
                self._host_seen(thread, lineno, raw)
            body = raw[k + 11 :].rstrip()
            tag = body[:4]
            if tag in P.ONCE_TAGS or tag[:1].isdigit():
                # every rank prints its host's network and environment: the first of each is the fact. Only
                # texts that `read_once` allows are remembered, so a remembered one need not be asked again
                key = (thread.host, body)
                if key in self.once_read:
                    return
                if P.read_once(body):
                    P.remember(self.once_read, key, True, P.MAX_ONCE, body)
            self._info(raw, body, pre, lineno)
        elif level == "WARN":
            self.lines_nccl += 1
            self._host_seen(self._thread(raw[:k]), lineno, raw)
            self._warn(raw, raw[k + 11 :].strip(), raw[:k], lineno)
        elif raw.startswith("version", k + 6):
            self.lines_nccl += 1
            self._version(raw, lineno)
        elif raw.startswith("ERROR", k + 6) or raw.startswith("TRACE", k + 6):
            self.lines_nccl += 1
        elif raw.startswith("IN", k + 6) or raw.startswith("WA", k + 6):
            # `NCCL ININFO ...`: two writers interleaved inside one record
            self._skip(lineno)
        elif "NCCL_" in raw and "=" in raw:
            self._cmdline_env(raw, lineno)
        # anything else (`RuntimeError: NCCL error ...`) is another program talking about NCCL

    def _info(self, raw: str, body: str, pre: str, lineno: int) -> None:
        if not body or ": opCount " in body:
            # per-collective COLL lines (`AllReduce: opCount 5 ... comm 0x..`) are most of a big log
            return
        first = body[0]
        if first == "I" and body.startswith("Init timings"):
            _read_init_timings(self, self._thread(pre), raw, body, lineno)
            return
        if body.startswith("Channel ") or body.startswith("Ring "):
            self._ring(raw, body, pre, lineno)
            return
        if body.startswith("Trees ") or body.startswith("Tree "):
            self._trees(raw, body, pre, lineno)
            return
        if "comm 0x" in body:
            self._comm(raw, body, pre, lineno)
            # RCCL appends `comm 0x.. nRanks ..` to other lines too; fall through for those
            if not (body.startswith("Connected") or body.startswith("Trees")):
                return
        if first in "NR" and " set " in body and ("NCCL_" in body or "RCCL_" in body):
            self._env(raw, body, lineno)
            return
        if first in "GNC" and "/" in body[:6] and " :" in body[:40] and "(" in body:
            if P.PATH_HEAD_RE.match(body):
                self._path(raw, body, pre, lineno)
                return
        if "DMA-BUF" in body or "DMABUF" in body:
            self._dmabuf(raw, body, pre, lineno)
        if body.startswith("NET/") or body.startswith("Using network") or body.startswith("Failed to open libibverbs"):
            self._net(raw, body, pre, lineno)
            return
        if "GPU Direct RDMA" in body:
            self._gdr(raw, body, pre, lineno)
            return
        if body.startswith("P2P is disabled"):
            self._p2p_disabled(raw, body, pre, lineno, nvlink=False)
            return
        if body.startswith("Pattern "):
            self._pattern(raw, body, lineno)
            return
        if first.isdigit() and " coll channels" in body:
            self._channel_counts(raw, body, pre, lineno)
            return
        if "healthMask" in body:
            self._mnnvl_health(raw, body, pre, lineno)
            return
        if body.startswith("NVLS multicast support is"):
            self._nvls_support(raw, body, pre, lineno)
            return
        if first == "C" and body.startswith("CollNet "):
            self._collnet(raw, body, pre, lineno)
            return
        if "version" in body and ("NCCL version" in body or "RCCL version" in body):
            self._version(raw, lineno)
            return
        if "rsmi" in body or "ROCr version" in body or "Hipruntime" in body or "librccl" in body or "MSCC" in body:
            self.rccl_hints += 1
            return
        if " -> " in body and body[0] not in "0123456789 ":
            match = P.ERROR_TRACE_RE.match(body)
            if match:
                # the file and line are the message's own fields (shown before its text)
                self._message("ERROR", f"returned {match.group('rc')}",
                              match.group("file"), int(match.group("line")), raw, lineno)

    def _ring(self, raw: str, body: str, pre: str, lineno: int) -> None:
        if " via " in body:
            # a connection line that reached here through the slow path (glued records)
            self._conn_line(self._thread(pre), body, raw, lineno)
            return
        cached = self.ring_cache.get(body, 0)
        if cached == 0:
            cached = None
            match = P.RING_ORDER_RE.match(body)
            if match:
                cached = (int(match.group("ch")), self._ring_order(match.group("order")))
            else:
                arrow = P.RING_ARROW_RE.match(body)
                if arrow:
                    thread = self._thread(pre)
                    inst = thread.current or self._anonymous_instance(thread)
                    if inst is not None:
                        if inst.ring_next is None:
                            inst.ring_next = {}
                        nexts = inst.ring_next.setdefault(int(arrow.group("ch")), {})
                        nexts[int(arrow.group("me"))] = int(arrow.group("next"))
                    return
            P.remember(self.ring_cache, body, cached, 10_000, body)
        if cached is None:
            return
        thread = self._thread(pre)
        inst = thread.current or self._anonymous_instance(thread)
        if inst is None:
            return
        if inst.rings is None:
            inst.rings = {}
        if cached[0] not in inst.rings and self._room(inst.rings, P.MAX_RINGS_PER_INSTANCE, "rings"):
            inst.rings[cached[0]] = (cached[1], self._source(lineno, raw))

    def _ring_order(self, text: str) -> list[int]:
        """The ranks of a ring order, as one list per distinct order and one int per distinct rank: the
        channels of a ring often print the same order, and rank 0 of an 8,192-rank job prints 16 orders of
        8,192 ranks (a list of new ints each: ~5 MB). Nothing changes an order once read."""
        orders = self.ring_orders
        order = orders.get(text)
        if order is None:
            ints = self.rank_ints
            order = []
            for token in text.split():
                value = ints.get(token)
                if value is None:
                    value = int(token)
                    if len(ints) < P.MAX_RANK_INTS:
                        ints[token] = value
                order.append(value)
            # bounded by the text the keys hold (4 orders of 8,192 ranks), so the memory does not depend on the log
            self.ring_order_chars += len(text)
            if self.ring_order_chars > P.MAX_RING_ORDER_CHARS:
                orders.clear()
                self.ring_order_chars = len(text)
            orders[text] = order
        return order

    def _trees(self, raw: str, body: str, pre: str, lineno: int) -> None:
        if self.trees_kept >= P.MAX_TREES:
            self.not_kept["tree_lines"] += 1
            return
        thread = self._thread(pre)
        inst = thread.current or self._anonymous_instance(thread)
        if inst is None:
            return
        if inst.trees is None:
            inst.trees = {}
        if not self._room(inst.trees, P.MAX_TREES_PER_INSTANCE, "tree_lines"):
            return
        before = len(inst.trees)
        if body.startswith("Tree "):
            match = P.TREE_ARROW_RE.match(body)
            if match:
                down = [int(x) for x in match.group("down").split("/") if x.lstrip("-").isdigit()]
                me, ch, up = int(match.group("me")), int(match.group("ch")), int(match.group("up"))
                inst.trees[(ch, me)] = NcclTree(ch, me, None if up < 0 else up, [d for d in down if d >= 0],
                                                self._source(lineno, raw))
            self.trees_kept += len(inst.trees) - before
            return
        items = self.trees_cache.get(body)
        if items is None:
            # the same `Trees` text recurs for the same rank in every job: read once
            items = []
            for match in P.TREES_ITEM_RE.finditer(body):
                up = int(match.group("up"))
                down = [int(x) for x in match.group("down").split("/")]
                items.append((int(match.group("ch")), int(match.group("me")), None if up < 0 else up,
                              tuple(d for d in down if d >= 0)))
            P.remember(self.trees_cache, body, items, 10_000, body)
        source = None
        trees = inst.trees
        for ch, me, up, down in items:
            if (ch, me) in trees:
                continue
            if source is None:
                source = self._source(lineno, raw)
            trees[(ch, me)] = NcclTree(ch, me, up, list(down), source)
        self.trees_kept += len(trees) - before

    def _anonymous_instance(self, thread: Thread) -> Instance | None:
        """Lines that belong to a communicator whose init line is not (yet) seen: keep them per thread."""
        key = ("anon", thread.host, thread.pid, thread.tid)
        inst = self.instances.get(key)
        if inst is None:
            if len(self.instances) >= P.MAX_INSTANCES:
                self.not_kept["init_lines"] += 1
                return None
            inst = Instance(key=key, host=thread.host, pid=thread.pid, ptr=None)
            self.instances[key] = inst
        return inst

    def _comm(self, raw: str, body: str, pre: str, lineno: int) -> None:
        # the two shapes of nearly every communicator line (2.13+), read by one strict match: the same
        # values `_comm_values` finds in them (a test checks it), set without building a dict
        if body.startswith("ncclComm"):
            strict = _INIT_LINE_RE.fullmatch(body)
            if strict is not None:
                self._init_strict(strict, raw, body, pre, lineno)
                return
        elif body.startswith("comm 0x"):
            strict = _COMM_LINE_RE.fullmatch(body)
            if strict is not None:
                self._comm_strict(strict, raw, pre, lineno)
                return
        elif body.startswith("[Rank "):
            # 2.29+ (and RCCL 7) put the rank before the init start line: `[Rank 3] ncclCommInitRank comm 0x..
            # rank 3 nranks 16 ... - Init START`; behind it is the line of the earlier releases
            end = body.find("] ", 6)
            if end > 0 and body[6:end].isdigit():
                self._comm(raw, body[end + 2:], pre, lineno)
                return
        ptr_match = P.COMM_RE.search(body)
        if not ptr_match:
            return
        if body.startswith("NVLS ") or "headRank" in body:
            return
        values = _comm_values(body)
        thread, inst = self._comm_instance(pre, ptr_match.group(1).lower(), body, lineno)
        if inst is None:
            return
        try:
            if "rank" in values and inst.rank is None:
                inst.rank = int(values["rank"])
            if "nranks" in values and inst.nranks is None:
                inst.nranks = int(values["nranks"])
            if "nnodes" in values:
                inst.nnodes = int(values["nnodes"])
            if "cudadev" in values:
                inst.cuda_dev = int(values["cudadev"])
            if "nvmldev" in values:
                inst.nvml_dev = int(values["nvmldev"])
        except ValueError:
            self._skip(lineno)
        if "busid" in values:
            inst.bus_id = _bus_id(values["busid"]) or inst.bus_id
        if "commid" in values:
            inst.comm_id = values["commid"].lower()
        if inst.cuda_dev is None and thread.dev is not None and "rank" in values:
            inst.cuda_dev = thread.dev
        complete = "Init COMPLETE" in body
        if "rank" in values and (inst.source is None or complete):
            inst.source = self._source(lineno, raw)
            inst.source_complete = complete
        if "Destroy COMPLETE" in body or "Abort COMPLETE" in body:
            inst.ended = True
            return
        if " nRanks 0" in body or "localSize" in body or " bytes - Init COMPLETE" in body:
            # RCCL-only spellings: zero-padded nRanks suffix, kernel localSize, allocation total
            self.rccl_hints += 1
        self._comm_transition(thread, inst, complete, suffix_only=" nRanks " in body and "rank" not in values)

    # The two strict shapes: neither can hold the RCCL spellings or `Destroy COMPLETE` the general path
    # looks for (the match is whole), but a zero-padded nRanks. Each is one method: the instance found by
    # `_strict_instance`, and in the common case (the thread's head closed, nothing pending) the change
    # `_settle` makes without the rest of `_comm_transition` (a communicator line of every rank of every job
    # comes here: ~70,000 per 100 MB).
    def _init_strict(self, strict: re.Match, raw: str, body: str, pre: str, lineno: int) -> None:
        """`ncclCommInitRank comm 0x.. rank R nranks N cudaDev C nvmlDev V busId B commId 0x.. - Init START|COMPLETE`."""
        ptr, rank, nranks, cuda_dev, nvml_dev, bus_id, comm_id = strict.groups()
        thread, inst = self._strict_instance(pre, ptr, rank, nranks, body, lineno)
        if inst is None:
            return
        inst.cuda_dev, inst.nvml_dev = int(cuda_dev), int(nvml_dev)
        bus = _BUS_CACHE.get(bus_id, "")
        inst.bus_id = (_bus_id(bus_id) if bus == "" else bus) or inst.bus_id
        inst.comm_id = comm_id.lower()
        complete = body[-1] == "E"  # `COMPLETE`, not `START`
        if inst.source is None or complete:
            inst.source = self._source(lineno, raw)
            inst.source_complete = complete
        if not thread.head_closed or thread.pending:
            self._comm_transition(thread, inst, complete, suffix_only=False)
        else:
            self._settle(thread, inst, complete)

    def _comm_strict(self, strict: re.Match, raw: str, pre: str, lineno: int) -> None:
        """`comm 0x.. rank R nRanks N nNodes M localRanks L localRank l [MNNVL 0]`."""
        ptr, rank, nranks, nnodes = strict.group(1, 2, 3, 4)
        thread, inst = self._strict_instance(pre, ptr, rank, nranks, strict.string, lineno)
        if inst is None:
            return
        inst.nnodes = int(nnodes)
        if inst.cuda_dev is None and thread.dev is not None:
            inst.cuda_dev = thread.dev
        if nranks[0] == "0":
            self.rccl_hints += 1  # RCCL's zero-padded nRanks
        if inst.source is None:
            inst.source = self._source(lineno, raw)
            inst.source_complete = False
        if not thread.head_closed or thread.pending:
            self._comm_transition(thread, inst, False, suffix_only=False)
        else:
            thread.current = inst

    def _strict_instance(self, pre: str, ptr: str, rank: str, nranks: str, body: str,
                         lineno: int) -> tuple[Thread, Instance | None]:
        """`_comm_instance` for a strict shape, with the rank and size it names set where still unknown."""
        thread = self.prefix_cache.get(pre) or self._thread(pre)
        ptr = ptr.lower()
        inst = self.instances.get((thread.host, thread.pid, ptr))
        if inst is None:
            inst = self._new_instance(thread, ptr, body, lineno)
            if inst is None:
                return thread, None
        if inst.rank is None:
            inst.rank = int(rank)
        if inst.nranks is None:
            inst.nranks = int(nranks)
        return thread, inst

    def _comm_instance(self, pre: str, ptr: str, body: str, lineno: int) -> tuple[Thread, Instance | None]:
        """The thread printing a communicator line, and its instance of that communicator (created on
        first sight; None past the bound)."""
        thread = self.prefix_cache.get(pre) or self._thread(pre)
        inst = self.instances.get((thread.host, thread.pid, ptr))
        if inst is None:
            inst = self._new_instance(thread, ptr, body, lineno)
        return thread, inst

    def _new_instance(self, thread: Thread, ptr: str, body: str, lineno: int) -> Instance | None:
        if len(self.instances) >= P.MAX_INSTANCES:
            self.not_kept["init_lines"] += 1
            return None
        ikey = (thread.host, thread.pid, ptr)
        inst = Instance(key=ikey, host=thread.host, pid=thread.pid, ptr=ptr, first_line=lineno)
        inst.clean = not self.cut_part or "Init START" in body
        self.instances[ikey] = inst
        return inst

    def _comm_transition(self, thread: Thread, inst: Instance, complete: bool, suffix_only: bool) -> None:
        """What a communicator line changes in its thread: the instance it is initializing now."""
        if not thread.head_closed:
            # the first comm line of this thread in a cut part: what came before belongs elsewhere
            thread.head_closed = True
            thread.adopter = inst.key
            thread.current = None
            head = thread.head
            if head is not None and (head.conns or head.rings or head.ring_next or head.trees):
                inst.clean = False  # its lines may belong to what the previous part was doing
        if thread.pending:
            self._adopt_pending(thread, inst)
        if suffix_only:
            # RCCL suffix on a connection/progress line: the thread works on this communicator
            thread.current = inst
        else:
            self._settle(thread, inst, complete)

    def _settle(self, thread: Thread, inst: Instance, complete: bool) -> None:
        """The thread works on `inst` now, or (its `Init COMPLETE`) no longer, and a rank is done."""
        if complete:
            thread.current = None
            inst.complete = True
            thread.done = _done_key(inst)
            if inst.comm_id and inst.nranks and inst.rank is not None:
                self._rank_complete(inst)
        else:
            thread.current = inst

    def _rank_complete(self, inst: Instance) -> None:
        """When every rank of a communicator completed its init, build the run now and let its
        instances go: memory stays bounded however many communicators a log holds."""
        key = "id:" + inst.comm_id
        track = self.tracks.get(key)
        if track is None:
            if len(self.tracks) >= P.MAX_INSTANCES:
                return
            track = self.tracks[key] = {}
        track[inst.rank] = inst
        if len(track) < inst.nranks:
            return
        del self.tracks[key]
        members = [i for i in self.instances.values() if i.comm_id == inst.comm_id] \
            if len(track) != inst.nranks else list(track.values())
        if not all(i.clean and i.complete and self.instances.get(i.key) is i for i in members):
            return
        from k3diag.parse.nccl.runs import finalize_run

        for member in members:
            del self.instances[member.key]
        finalize_run(self, key, members)

    def _adopt_pending(self, thread: Thread, inst: Instance) -> None:
        if thread.pending:
            self.left_out("connection_lines", _absorb(inst.conns, thread.pending))
            thread.pending = {}


def _absorb(target: dict, extra: dict) -> int:
    from k3diag.parse.nccl.state import absorb_all

    return absorb_all(target, extra, P.MAX_CONN_KEYS_PER_INSTANCE)

