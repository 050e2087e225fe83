"""One handler per kind of NCCL line other than connection lines (those are folded in `lines`/`fast`).

Each handler reads one line already classified by its tag and updates the parser's bounded state.
"""

from __future__ import annotations

import re

from k3diag.model.nccl import (
    NcclChannelCounts,
    NcclDmaBuf,
    NcclGdr,
    NcclGraph,
    NcclMessage,
    NcclMnnvlHealth,
    NcclNvlsSupport,
    NcclP2PDisabled,
    NcclPath,
    NcclRank,
    NcclTree,
)
from k3diag.model.source import SourceRef
from k3diag.parse.ids import bdf_from_nccl_busid
from k3diag.parse.nccl import patterns as P
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
        return SourceRef(self.input, lineno, text)

    def _skip(self, lineno: int) -> None:
        self.skipped += 1
        if len(self.skipped_lines) < P.MAX_EXAMPLES:
            self.skipped_lines.append(lineno)

    def _thread(self, pre: str) -> Thread:
        cached = self.prefix_cache.get(pre)
        if cached is not None:
            return cached
        match = P.PREFIX_RE.search(pre)
        if match:
            key = (match.group("host"), int(match.group("pid")), int(match.group("tid")))
            dev = int(match.group("dev"))
        else:
            match2 = P.PREFIX_NOPID_RE.search(pre)
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
                for key_, old in list(self.threads.items()):
                    if old.pending or old.current is not None:
                        continue
                    head = old.head
                    if head is not None and (head.conns or head.rings or head.ring_next or head.trees):
                        continue
                    if head is not None and old.head_closed:
                        self.adopters[key_] = old.adopter  # what the merge needs of an empty head
                    elif head is not None:
                        continue  # still open: the merge must know this thread did nothing yet
                    del self.threads[key_]
                # what could not be forgotten stays: look again only once as many threads came
                self.thread_limit = 2 * len(self.threads)
                self.prefix_cache.clear()
            thread = Thread(host=key[0], pid=key[1], tid=key[2], dev=dev)
            if self.cut_part:
                # what this thread does before its first comm line here continues the previous part
                thread.head = Instance(key=("head",) + key, host=key[0], pid=key[1], ptr=None)
                thread.head_closed = False
                thread.current = thread.head
            self.threads[key] = thread
        if len(self.prefix_cache) >= P.MAX_PREFIX_CACHE:
            # prefixes carrying timestamps are unique per line: stop them from piling up
            self.prefix_cache.clear()
        self.prefix_cache[pre] = thread
        return thread

    def _host_seen(self, thread: Thread, lineno: int, raw: str) -> None:
        """Hosts named on any NCCL line, with or without a rank (Bootstrap, NET/IB, WARN...)."""
        host = thread.host
        if host and host not in self.hosts_seen and len(self.hosts_seen) < P.MAX_HOSTS:
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
            if name not in self.cmdline_env and len(self.cmdline_env) < P.MAX_ENV:
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
            self._host_seen(self._thread(raw[:k]), lineno, raw)
            self._info(raw, raw[k + 11 :].rstrip(), raw[:k], lineno)
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
        if "version" in body and ("NCCL version" in body or "RCCL version" in body):
            self._version(raw, lineno)
            return
        if "rsmi" in body or "ROCr version" in body or "Hipruntime" in body or "librccl" in body or "MSCC" in body:
            self.rccl_hints += 1
            return
        if " -> " in body and body[0] not in "0123456789 ":
            match = P.ERROR_TRACE_RE.match(body)
            if match:
                self._message("ERROR", f"{match.group('file')}:{match.group('line')} returned {match.group('rc')}",
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
                order = [int(x) for x in match.group("order").split()]
                cached = (int(match.group("ch")), order)
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
            if len(self.ring_cache) < 10_000:
                self.ring_cache[body] = cached
        if cached is None:
            return
        thread = self._thread(pre)
        inst = thread.current or self._anonymous_instance(thread)
        if inst is None:
            return
        if inst.rings is None:
            inst.rings = {}
        if cached[0] not in inst.rings and len(inst.rings) < 512:
            inst.rings[cached[0]] = (cached[1], self._source(lineno, raw))

    def _trees(self, raw: str, body: str, pre: str, lineno: int) -> None:
        if self.trees_kept >= P.MAX_TREES:
            return
        thread = self._thread(pre)
        inst = thread.current or self._anonymous_instance(thread)
        if inst is None:
            return
        if inst.trees is None:
            inst.trees = {}
        if len(inst.trees) >= 4096:
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
        source = None
        for match in P.TREES_ITEM_RE.finditer(body):
            ch, me = int(match.group("ch")), int(match.group("me"))
            if (ch, me) in inst.trees:
                continue
            if source is None:
                source = self._source(lineno, raw)
            up = int(match.group("up"))
            down = [int(x) for x in match.group("down").split("/")]
            inst.trees[(ch, me)] = NcclTree(ch, me, None if up < 0 else up, [d for d in down if d >= 0], source)
        self.trees_kept += len(inst.trees) - before

    def _anonymous_instance(self, thread: Thread) -> Instance | None:
        """Lines that belong to a communicator whose init line is not (yet) seen: keep them per thread."""
        key = ("anon", thread.host, thread.pid, thread.tid)
        inst = self.instances.get(key)
        if inst is None:
            if len(self.instances) >= P.MAX_INSTANCES:
                self.dropped_instances += 1
                return None
            inst = Instance(key=key, host=thread.host, pid=thread.pid, ptr=None)
            self.instances[key] = inst
        return inst

    def _comm(self, raw: str, body: str, pre: str, lineno: int) -> None:
        ptr_match = P.COMM_RE.search(body)
        if not ptr_match:
            return
        if body.startswith("NVLS ") or "headRank" in body:
            return
        thread = self._thread(pre)
        ptr = ptr_match.group(1).lower()
        values = _comm_values(body)
        ikey = (thread.host, thread.pid, ptr)
        inst = self.instances.get(ikey)
        if inst is None:
            if len(self.instances) >= P.MAX_INSTANCES:
                self.dropped_instances += 1
                return
            inst = Instance(key=ikey, host=thread.host, pid=thread.pid, ptr=ptr, first_line=lineno)
            inst.clean = not self.cut_part or "Init START" in body
            self.instances[ikey] = inst
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
        if "Destroy COMPLETE" in body:
            return
        if " nRanks 0" in body or "localSize" in body or " bytes - Init COMPLETE" in body:
            # RCCL-only spellings: zero-padded nRanks suffix, kernel localSize, allocation total
            self.rccl_hints += 1
        if not thread.head_closed:
            # the first comm line of this thread in a cut part: what came before belongs elsewhere
            thread.head_closed = True
            thread.adopter = ikey
            thread.current = None
            head = thread.head
            if head is not None and (head.conns or head.rings or head.ring_next or head.trees):
                inst.clean = False  # its lines may belong to what the previous part was doing
        self._adopt_pending(thread, inst)
        if " nRanks " in body and "rank" not in values:
            # RCCL suffix on a connection/progress line: the thread works on this communicator
            thread.current = inst
        elif complete:
            thread.current = None
            inst.complete = True
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
            self.conn_overflow += _absorb(inst.conns, thread.pending)
            thread.pending = {}

    def _env(self, raw: str, body: str, lineno: int) -> None:
        match = P.ENV_RE.match(body)
        if not match:
            return
        name = match.group("name")
        value = match.group("value").strip()
        if value.endswith(".") and value[:-1].replace("-", "").isdigit():
            value = value[:-1]
        if name in self.env:
            if self.env[name] != value:
                self.env_conflicts.setdefault(name, {self.env[name]}).add(value)
            return
        if len(self.env) >= P.MAX_ENV:
            return
        self.env[name] = value
        self.env_sources[name] = self._source(lineno, raw)

    def _net(self, raw: str, body: str, pre: str, lineno: int) -> None:
        net = self.net
        if body.startswith("Failed to open libibverbs") or "Failed to open libibverbs" in body[:40]:
            net.ibverbs_missing = True
            self._net_source(lineno, raw)
            return
        if "No device found" in body and body.startswith("NET/IB"):
            net.ib_not_found = True
            self._net_source(lineno, raw)
            return
        match = P.USING_NETWORK_RE.match(body)
        if match:
            if net.network is None:
                net.network = match.group("name")
                self._net_source(lineno, raw)
            return
        match = P.NET_USING_RE.match(body)
        if match:
            bucket = net.ib_devices if match.group("kind") == "IB" else net.socket_devices
            for dev in P.NET_DEVICE_RE.findall(match.group("devs")):
                if dev not in bucket and len(bucket) < 64:
                    bucket.append(dev)
            return
        if body.startswith("NET/Plugin"):
            loaded = P.NET_PLUGIN_LOADED_RE.search(body)
            if loaded and net.plugin is None:
                net.plugin = loaded.group("name").strip() or None
                self._net_source(lineno, raw)
            return
        if "GPU Direct RDMA" in body:
            self._gdr(raw, body, pre, lineno)

    def _net_source(self, lineno: int, raw: str) -> None:
        if len(self.net.sources) < 20:
            self.net.sources.append(self._source(lineno, raw))

    def _gdr(self, raw: str, body: str, pre: str, lineno: int) -> None:
        if len(self.gdr) >= P.MAX_GDR:
            return
        host = self._thread(pre).host
        match = P.GDR_GPU_RE.search(body)
        if match:
            key = (host, match.group("gpu").lower(), match.group("hca"), match.group("state"))
            if key not in self.gdr:
                self.gdr[key] = NcclGdr(enabled=match.group("state") == "Enabled",
                                        gpu_bus_id=bdf_from_nccl_busid(match.group("gpu")), hca=match.group("hca"),
                                        reason=match.group("why"), host=host, source=self._source(lineno, raw))
            return
        match = P.GDR_HCA_RE.search(body)
        if match:
            key = (host, None, match.group("name"), match.group("state"))
            if key not in self.gdr:
                self.gdr[key] = NcclGdr(enabled=match.group("state") == "Enabled", gpu_bus_id=None,
                                        hca=match.group("name"), reason=match.group("why"), host=host,
                                        source=self._source(lineno, raw), hca_index=int(match.group("hca")))

    def _dmabuf(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.DMABUF_RE.search(body)
        if not match or len(self.dmabuf) >= P.MAX_DMABUF:
            return
        host = self._thread(pre).host
        state = match.group("state").lower()
        key = (host, match.group("gpu"), match.group("name"), state)
        if key not in self.dmabuf:
            self.dmabuf[key] = NcclDmaBuf(
                enabled=not state.startswith("not") and state != "disabled",
                hca=match.group("name"), gpu=int(match.group("gpu")) if match.group("gpu") else None,
                host=host, source=self._source(lineno, raw))

    def _p2p_disabled(self, raw: str, body: str, pre: str, lineno: int, nvlink: bool) -> None:
        match = P.P2P_DISABLED_RE.search(body)
        if not match or len(self.p2p_disabled) >= P.MAX_P2P_DISABLED:
            return
        host = self._thread(pre).host
        a, b = int(match.group("a")), int(match.group("b"))
        key = (host, min(a, b), max(a, b), bool(match.group("nvl")) or nvlink)
        if key not in self.p2p_disabled:
            self.p2p_disabled[key] = NcclP2PDisabled(a, b, key[3], host, self._source(lineno, raw))

    def _pattern(self, raw: str, body: str, lineno: int) -> None:
        match = P.PATTERN_RE.match(body)
        if not match or len(self.graphs) >= P.MAX_GRAPHS:
            return
        key = match.groups()
        if key in self.graphs:
            return
        self.graphs[key] = NcclGraph(
            pattern=int(match.group("pattern")), cross_nic=int(match.group("cross")),
            n_channels=int(match.group("nch")), bw_intra=float(match.group("bw1")),
            bw_inter=float(match.group("bw2")), type_intra=match.group("t1"), type_inter=match.group("t2"),
            same_channels=int(match.group("same")), source=self._source(lineno, raw))

    def _channel_counts(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.CHANNEL_COUNTS_RE.match(body)
        if not match:
            return
        host = self._thread(pre).host
        nvls = int(match.group("nvls")) if match.group("nvls") is not None else None
        collnet = int(match.group("collnet")) if match.group("collnet") is not None else None
        key = (host, int(match.group("coll")), collnet, nvls, int(match.group("p2p")))
        if key not in self.channel_counts and len(self.channel_counts) < 200:
            self.channel_counts[key] = NcclChannelCounts(coll=key[1], collnet=collnet, nvls=nvls, p2p=key[4],
                                                         host=host, source=self._source(lineno, raw))

    def _mnnvl_health(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.HEALTH_MASK_RE.search(body)
        if not match or len(self.mnnvl_health) >= 200:
            return
        host = self._thread(pre).host
        key = (host, match.group("mask").lower())
        if key not in self.mnnvl_health:
            self.mnnvl_health[key] = NcclMnnvlHealth(mask=key[1], host=host, source=self._source(lineno, raw))

    def _nvls_support(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.NVLS_SUPPORT_RE.match(body)
        if not match or len(self.nvls_support) >= 200:
            return
        host = self._thread(pre).host
        key = (host, match.group("dev"), match.group("not") is None)
        if key not in self.nvls_support:
            self.nvls_support[key] = NcclNvlsSupport(available=key[2], gpu=int(key[1]) if key[1].isdigit() else None,
                                                     host=host, source=self._source(lineno, raw))

    def _path(self, raw: str, body: str, pre: str, lineno: int) -> None:
        head = P.PATH_HEAD_RE.match(body)
        if not head or len(self.paths) >= P.MAX_PATHS:
            return
        host = self._thread(pre).host
        src = head.group("node")
        source = None
        for item in P.PATH_ITEM_RE.finditer(head.group("rest")):
            dst = item.group("node")
            if dst == src:
                continue
            key = (host, src, dst)
            if key in self.paths:
                continue
            if source is None:
                source = self._source(lineno, raw)
            self.paths[key] = NcclPath(src=src, dst=dst, hops=int(item.group("hops")), bw=float(item.group("bw")),
                                       path_type=item.group("type"), src_bus_id=_node_bus_id(src),
                                       dst_bus_id=_node_bus_id(dst), host=host, source=source)

    def _warn(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.PREFIX_RE.search(pre) or P.PREFIX_NOPID_RE.search(pre)
        src_file = match.group("file") if match else None
        src_line = int(match.group("fline")) if match and match.group("fline") else None
        if src_file and ("rccl" in src_file or "hipify" in src_file):
            self.rccl_hints += 1
        if body.startswith("P2P is disabled"):
            self._p2p_disabled(raw, body, pre, lineno, nvlink=True)
        if "Failed to open libibverbs" in body:
            self.net.ibverbs_missing = True
            self._net_source(lineno, raw)
        self._message("WARN", body, src_file, src_line, raw, lineno)

    def _message(self, level: str, text: str, src_file: str | None, src_line: int | None, raw: str,
                 lineno: int) -> None:
        key = (level, src_file, src_line, text)
        msg = self.messages.get(key)
        if msg is not None:
            msg.count += 1
            return
        if len(self.messages) >= P.MAX_MESSAGES:
            self.messages_dropped += 1
            return
        self.messages[key] = NcclMessage(level, text, src_file, src_line, 1, self._source(lineno, raw))


_COMM_KEYS = {"rank": "rank", "nranks": "nranks", "nRanks": "nranks", "nNodes": "nnodes", "localRanks": "localranks",
              "localRank": "localrank", "cudaDev": "cudadev", "nvmlDev": "nvmldev", "busId": "busid", "commId": "commid"}
_COMM_KEY_SET = frozenset(_COMM_KEYS)
_COMM_KEY_ORDER = {token: index for index, token in enumerate(_COMM_KEYS)}
_HEX = frozenset("0123456789abcdefABCDEFx")


def _comm_values(body: str) -> dict[str, str]:
    """`rank 3 nRanks 16 nNodes 2 ... busId 1b000 commId 0x..`: the first value of each known key
    (a C-level dict of token -> next token instead of a regex: three such lines per rank and
    communicator; built from the end so that the first occurrence wins)."""
    tokens = body.split()
    following = dict(zip(tokens[-2::-1], tokens[:0:-1]))
    values: dict[str, str] = {}
    for token in sorted(_COMM_KEY_SET.intersection(following), key=_COMM_KEY_ORDER.__getitem__):
        name = _COMM_KEYS[token]
        value = following[token]
        if name not in values:
            value = value.rstrip(",;.")
            if value and _HEX.issuperset(value) and value.find("x") in (-1, 1):
                values[name] = value
    return values


_BUS_CACHE: dict[str, str | None] = {}


def _bus_id(text: str) -> str | None:
    value = _BUS_CACHE.get(text, "")
    if value == "":
        value = bdf_from_nccl_busid(text)
        if len(_BUS_CACHE) < 4096:
            _BUS_CACHE[text] = value
    return value


def _absorb(target: dict, extra: dict) -> int:
    from k3diag.parse.nccl.state import absorb_all

    return absorb_all(target, extra, P.MAX_CONN_KEYS_PER_INSTANCE)


def _node_bus_id(node: str) -> str | None:
    kind, _, ident = node.partition("/")
    if kind != "GPU":
        return None
    if "-" in ident:
        ident = ident.split("-", 1)[1]
    return bdf_from_nccl_busid(ident)
