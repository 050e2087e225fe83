"""NCCL / RCCL debug logs (`NCCL_DEBUG=INFO`, any `NCCL_DEBUG_SUBSYS`), NCCL 2.4 to current.

The log can be gigabytes, interleaved from thousands of ranks, wrapped in launcher prefixes
(`[1,0]<stdout>:`, `[rank3]:`, ` 0: `, `[0] `, timestamps, pdsh `host: `) and mixed with
other program output, so the parser streams: it keeps only bounded state (one entry per
communicator instance, each distinct connection once, counts and first examples of the rest)
and never holds the lines.

A record is `host:pid:tid [cudaDev] NCCL INFO <body>` or
`host:pid:tid [cudaDev] <file>:<line> NCCL WARN <body>`; the version line
(`NCCL version 2.18.5+cuda12.0`) has no prefix before NCCL 2.2x. Connection bodies by era:

    Ring 00 : 26[2] -> 24[0] via P2P/IPC                         2.4-2.6 (bracket: cudaDev)
    Channel 00 : 0[4000] -> 1[5000] via direct shared memory     2.7-2.8 (bracket: busId)
    Channel 00/0 : 4[26000] -> 0[26000] [receive] via NET/IB/0/GDRDMA          2.9-2.12
    Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read               2.13+  (bracket: nvmlDev)
    Channel 09 : 6[6] -> 7[7] via SHM/direct/direct              2.13+  SHM has no /connIndex
    ... via P2P/IPC comm 0x10a5a9f0 nRanks 08                    RCCL appends the comm

Communicators are told apart by `commId` when NCCL prints it (2.13+), otherwise by size; a
connection line is attributed to the communicator its thread is initializing (the comm line
at init start in 2.4-2.6 and 2.13+, the `Init COMPLETE` line at the end in 2.7-2.12).
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import compress, count, islice, repeat
from operator import and_, contains, ge, lt, or_
from typing import Iterable, Iterator

from k3diag.model.nccl import (
    NcclConnection,
    NcclGdr,
    NcclGraph,
    NcclMessage,
    NcclNet,
    NcclP2PDisabled,
    NcclPath,
    NcclRank,
    NcclRing,
    NcclRun,
    NcclTree,
    transport_of,
)
from k3diag.model.source import SourceRef
from k3diag.parse.ids import bdf_from_nccl_busid, normalize_bdf

# -- bounds: what a multi-gigabyte log may cost ------------------------------------------------
MAX_CONNECTIONS = 100_000  # distinct connection lines kept over all communicators
MAX_INSTANCES = 32_768  # communicator instances (one per rank per communicator), e.g. 4 jobs of 8192 ranks
MAX_THREADS = 50_000
MAX_TREES = 50_000  # tree entries over all communicators (a rank prints one per channel)
MAX_PREFIX_CACHE = 20_000
MAX_MESSAGES = 300  # distinct WARN/error messages
MAX_ENV = 300
MAX_PATHS = 4_000
MAX_GRAPHS = 200
MAX_TREES_PER_RUN = 20_000
MAX_GDR = 500
MAX_P2P_DISABLED = 2_000
MAX_EXAMPLES = 10  # line numbers kept for each kind of skipped line
MAX_LINE_CHARS = 1 << 16
_BATCH = 4096  # lines narrowed together by the C-level filter in feed()

# -- regular expressions (run only on lines a substring check already picked) -----------------
# The record header right before " NCCL INFO"/" NCCL WARN": host may be numeric, redacted
# (`<cluster_name>`), a container id or a pod name; what precedes it is a launcher prefix.
_PREFIX_RE = re.compile(
    r"(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\](?: (?P<file>\S+?):(?P<fline>\d+))?\s*$"
)
# Some RCCL builds and redacted pastes drop pid:tid (`node [0] NCCL INFO`).
_PREFIX_NOPID_RE = re.compile(r"(?P<host>[^\s:\[\]]+) \[(?P<dev>\d+)\](?: (?P<file>\S+?):(?P<fline>\d+))?\s*$")
_CONN_RE = re.compile(
    r"^(?P<kind>Ring|Channel) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<sb>[^\]]*)\] -> "
    r"(?P<dst>\d+)\[(?P<db>[^\]]*)\](?: \[(?P<dir>send|receive)\])? via (?P<via>.*?)"
    r"(?: comm (?P<comm>0x[0-9a-fA-F]+) nRanks (?P<nr>\d+))?\s*$"
)
_RING_ORDER_RE = re.compile(r"^(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? :(?P<order>(?:\s+-?\d+)+)\s*(?:comm .*)?$")
_RING_ARROW_RE = re.compile(r"^Ring (?P<ch>\d+) : (?P<prev>-?\d+) -> (?P<me>-?\d+) -> (?P<next>-?\d+)\s*$")
_TREE_ARROW_RE = re.compile(r"^Tree (?P<ch>\d+) : (?P<up>-?\d+) -> (?P<me>-?\d+) -> (?P<down>[-\d/]+)\s*$")
_TREES_ITEM_RE = re.compile(r"\[(?P<ch>\d+)\] (?P<down>-?\d+(?:/-?\d+)*)->(?P<me>-?\d+)->(?P<up>-?\d+)")
_COMM_RE = re.compile(r"\bcomm (0x[0-9a-fA-F]+)")
_COMM_KV_RE = re.compile(r"\b(rank|nranks|nRanks|nNodes|localRanks|localRank|cudaDev|nvmlDev|busId|commId)\s+(0x[0-9a-fA-F]+|[0-9a-fA-F]+)\b")
_ENV_RE = re.compile(r"^(?P<name>(?:NCCL|RCCL|HSA)_[A-Z0-9_]+) set (?:by environment )?to (?P<value>.*?)\s*$")
_VERSION_RE = re.compile(r"\b(?P<lib>NCCL|RCCL) version\s*:?\s*(?P<ver>\d+\.\d+\.\d+)(?P<extra>[^\s,]*)")
_P2P_DISABLED_RE = re.compile(r"P2P is disabled between (?P<nvl>NVLINK )?connected GPUs (?P<a>\d+) and (?P<b>\d+)")
_PATTERN_RE = re.compile(
    r"^Pattern (?P<pattern>\d+), crossNic (?P<cross>\d+), nChannels (?P<nch>\d+), (?:bw|speed) "
    r"(?P<bw1>[\d.]+)/(?P<bw2>[\d.]+), type (?P<t1>[A-Z0-9]+)/(?P<t2>[A-Z0-9]+), sameChannels (?P<same>\d+)"
)
_PATH_HEAD_RE = re.compile(r"^(?P<node>(?:GPU|NET|NIC|CPU|NVS)/[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)?) :(?P<rest>.*)$")
_PATH_ITEM_RE = re.compile(r"(?P<node>(?:GPU|NET|NIC|CPU|NVS)/[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)?) \((?P<hops>\d+)/(?P<bw>[\d.]+)/(?P<type>[A-Z0-9]+)\)")
_GDR_GPU_RE = re.compile(
    r"GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>[0-9a-fA-Fx]+)\s*/\s*HCA (?P<hca>\S+)(?: \((?P<why>[^)]*)\))?"
)
_GDR_HCA_RE = re.compile(r"GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<hca>\d+) '(?P<name>[^']*)'(?: \((?P<why>[^)]*)\))?")
_ERROR_TRACE_RE = re.compile(r"^(?P<file>[\w./+-]+\.(?:cc|cu|cpp|c|h|hpp)):(?P<line>\d+) -> (?P<rc>\d+)")
_NET_USING_RE = re.compile(r"^NET/(?P<kind>IB|Socket)\s*: Using (?P<devs>.*?)(?:;\s*OOB.*)?$")
_USING_NETWORK_RE = re.compile(r"^Using network (?P<name>.+?)\s*$")
_NET_PLUGIN_LOADED_RE = re.compile(r"NET/Plugin\s*:?\s*(?:Loaded net plugin|Plugin loaded)\s*(?P<name>.*)$")
# nccl-tests headers: `#  Rank  0 Group  0 Pid 895544 on     h100-2 device  0 [0002:00:01] NVIDIA H100 80GB HBM3`,
# older `#   Rank  0 Pid 120890 on 10-90-43-152 device  0 [0x87] A100-SXM4-40GB`.
TESTS_RANK_RE = re.compile(
    r"^\s*#?\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+"
    r"(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$"
)
_SPLIT_RECORDS_RE = re.compile(r"\s{2,}")

_MARK = " NCCL "
# The first 9 characters after " NCCL ": which INFO lines can carry a fact. Everything else
# (per-collective COLL lines, proxy threads, tuning tables) is dropped after one set lookup.
_CONN_TAGS = frozenset({"INFO Chan", "INFO Ring"})
_INFO_TAGS = frozenset({
    "INFO Tree", "INFO comm", "INFO nccl", "INFO NCCL", "INFO RCCL", "INFO HSA_", "INFO NET/", "INFO Usin",
    "INFO Fail", "INFO GPU ", "INFO GPU/", "INFO NIC/", "INFO P2P ", "INFO Patt", "INFO Conn", "INFO init",
    "INFO ROCr", "INFO Hipr", "INFO MSCC",
})
# tags shared by frequent useless lines and rare useful ones: read the line only if it has this
_TAG_NEEDS = {
    "INFO P2P ": "P2P is disabled",  # not `P2P Chunksize set to ...`
    "INFO Conn": "comm 0x",  # RCCL's `Connected all rings comm 0x.. nRanks ..`, not NCCL's plain line
    "INFO init": "rsmi",  # RCCL's `initialized internal alternative rsmi functionality`
}
# one dict lookup per line: 1 = maybe a connection line, 2 = a line to read
_TAG_ACTIONS = {**{tag: 1 for tag in _CONN_TAGS}, **{tag: 2 for tag in _INFO_TAGS}}


def bus_id_from_tests_header(text: str) -> str | None:
    """nccl-tests prints `[0x1b]` (bus only), `[0002:00:01]` (domain:bus:device) or `[0000:12:00.0]`."""
    cleaned = text.strip().lower()
    if not cleaned:
        return None
    if cleaned.startswith("0x"):
        try:
            return f"0000:{int(cleaned, 16):02x}:00.0"
        except ValueError:
            return None
    parts = cleaned.split(":")
    try:
        if len(parts) == 3 and "." not in parts[2]:
            return f"{int(parts[0], 16):04x}:{int(parts[1], 16):02x}:{int(parts[2], 16):02x}.0"
    except ValueError:
        return None
    bdf = normalize_bdf(cleaned)
    return bdf if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bdf) else None


def sniff(text: str) -> float:
    """Confident for NCCL/RCCL logs; low for nccl-tests output that merely carries NCCL INFO lines."""
    lines = text.split("\n", 4000)[:4000]
    nccl = 0
    via = 0
    tests_markers = 0
    for line in lines:
        if " NCCL INFO " in line or " NCCL WARN " in line or line.startswith("NCCL INFO ") or line.startswith("NCCL WARN "):
            nccl += 1
            if " via " in line:
                via += 1
        elif _VERSION_RE.search(line) and ("NCCL version" in line or "RCCL version" in line):
            nccl += 1
        stripped = line.lstrip()
        if (
            stripped.startswith("# nThread")
            or stripped.startswith("# nThreads")
            or stripped.startswith("# Collective test starting")
            or "Avg bus bandwidth" in stripped
            or "Out of bounds values" in stripped
            or (stripped.startswith("#") and " size " in line and " count " in line and "busbw" in line)
        ):
            tests_markers += 1
    if tests_markers:
        return 0.3 if nccl else 0.0
    if via or nccl >= 3:
        return 0.95
    if nccl:
        return 0.6
    return 0.0


# -- streaming state ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Instance:
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
    # connection body -> (line number, line text); the body is the dedup key
    conns: dict = field(default_factory=dict)
    # created on first use: most instances never need them, and a big log holds tens of thousands
    rings: dict | None = None  # channel -> (order, source)
    ring_next: dict | None = None  # channel -> {rank: next}
    trees: dict | None = None  # (channel, rank) -> NcclTree


@dataclass(slots=True)
class _Thread:
    host: str | None
    pid: int | None
    tid: int | None
    dev: int | None
    current: _Instance | None = None
    pending: dict = field(default_factory=dict)


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

    @property
    def connections(self) -> list[NcclConnection]:
        return [conn for run in self.runs for conn in run.connections]


class _Parser:
    def __init__(self, input_name: str) -> None:
        self.input = input_name
        self.threads: dict[tuple, _Thread] = {}
        self.prefix_cache: dict[str, _Thread] = {}
        self.instances: dict[tuple, _Instance] = {}
        self.orphans: dict[tuple, dict] = {}  # (host, pid) -> {body: (line, text)}
        self.kept_connections = 0
        self.dropped_connections = 0
        self.dropped_instances = 0
        self.version: str | None = None
        self.version_source: SourceRef | None = None
        self.library: str | None = None
        self.rccl_hints = 0
        self.env: dict[str, str] = {}
        self.env_sources: dict[str, SourceRef] = {}
        self.env_conflicts: dict[str, set] = {}
        self.messages: dict[tuple, NcclMessage] = {}
        self.messages_dropped = 0
        self.p2p_disabled: dict[tuple, NcclP2PDisabled] = {}
        self.gdr: dict[tuple, NcclGdr] = {}
        self.graphs: dict[tuple, NcclGraph] = {}
        self.paths: dict[tuple, NcclPath] = {}
        self.net = NcclNet()
        self.tests_ranks: dict[int, NcclRank] = {}
        self.ring_cache: dict[str, tuple[int, list[int]] | None] = {}
        self.lines_total = 0
        self.lines_nccl = 0
        self.skipped = 0
        self.skipped_lines: list[int] = []
        self.junk = 0
        self.junk_lines: list[int] = []
        self.unknown_conn = 0
        self.trees_kept = 0
        self._shared_cache: dict | None = None

    # -- entry -----------------------------------------------------------------------------
    def feed(self, lines: Iterable[str], first_line: int) -> None:
        """Read lines in batches. Each batch is first narrowed in C (map/compress over str.find):
        only lines naming NCCL/RCCL (or a nccl-tests `Pid` header) that are not per-collective
        COLL calls reach Python code; in a big log that drops most lines before any Python runs."""
        iterator = iter(lines)
        base = first_line
        find = str.find
        while True:
            batch = list(islice(iterator, _BATCH))
            if not batch:
                break
            has_ccl = map(ge, map(find, batch, repeat("CCL")), repeat(0))
            has_pid = map(ge, map(find, batch, repeat("Pid")), repeat(0))
            not_coll = map(lt, map(find, batch, repeat(": opCount ")), repeat(0))
            mask = map(and_, map(or_, has_ccl, has_pid), not_coll)
            self._feed_selected(compress(zip(count(base), batch), mask))
            if any(map(contains, batch, repeat("\x00"))) or any(map(contains, batch, repeat("\ufffd"))):
                for offset, raw in enumerate(batch):
                    if ("\x00" in raw or "\ufffd" in raw) and "CCL" not in raw and "Pid" not in raw:
                        self._other(raw, base + offset)
            base += len(batch)
        self.lines_total = max(self.lines_total, base - first_line)

    def _feed_selected(self, numbered: Iterable[tuple[int, str]]) -> None:
        # The hot loop over the lines that survived the C filter: connection lines and the
        # INFO lines that may carry a fact are settled with a few substring checks, no regex.
        mark = _MARK
        threads_get = self.prefix_cache.get
        actions = _TAG_ACTIONS
        record = self._record
        kept = self.kept_connections
        cap = MAX_CONNECTIONS
        dropped_conn = 0
        dropped = 0
        for lineno, raw in numbered:
            k = raw.find(mark)
            if k < 0:
                if raw.startswith("NCCL INFO ") or raw.startswith("NCCL WARN "):
                    # a record whose prefix was lost (wrapped terminal, cut paste)
                    record(" " + raw, 0, lineno)
                else:
                    self._other(raw, lineno)
                continue
            tag = raw[k + 6 : k + 15]
            action = actions.get(tag)
            if action is None:
                if not tag.startswith("INFO") or raw.find(" -> ", len(raw) - 16) >= 0:
                    # WARN, version, garbled records; or an error trace `misc/socket.cc:567 -> 2`.
                    # Every other INFO line (proxy threads, tuning tables...) stops here.
                    record(raw, k, lineno)
                else:
                    dropped += 1
            elif action == 1:
                body = raw[k + 11 :]
                if " via " in body:
                    pre = raw[:k]
                    thread = threads_get(pre)
                    if thread is None:
                        thread = self._thread(pre)
                    inst = thread.current
                    target = inst.conns if inst is not None else thread.pending
                    if body not in target:
                        if "  " in body:
                            # several records glued on one line (terminal wrap), or trailing blanks
                            self.kept_connections = kept
                            self._split_and_feed(raw, lineno)
                            kept = self.kept_connections
                        elif kept < cap:
                            kept += 1
                            target[body] = (lineno, raw)
                        else:
                            dropped_conn += 1
                    continue
                record(raw, k, lineno)
            else:
                need = _TAG_NEEDS.get(tag)
                if need is None or need in raw:
                    record(raw, k, lineno)
                else:
                    dropped += 1
        self.kept_connections = kept
        self.dropped_connections += dropped_conn
        self.lines_nccl += dropped

    # -- connection lines ------------------------------------------------------------------
    def _new_connection(self, target: dict, body: str, raw: str, lineno: int, thread: _Thread) -> None:
        if raw.count(_MARK) > 1 or "  " in body.rstrip():
            # several records glued on one line (terminal wrap): take them one by one
            self._split_and_feed(raw, lineno)
            return
        if self.kept_connections >= MAX_CONNECTIONS:
            self.dropped_connections += 1
            return
        self.kept_connections += 1
        target[body] = (lineno, raw)

    def _split_and_feed(self, raw: str, lineno: int) -> None:
        pieces = _SPLIT_RECORDS_RE.split(raw.strip())
        for piece in pieces:
            if "NCCL" not in piece:
                continue
            k = piece.find(_MARK)
            if k < 0:
                if piece.startswith("NCCL "):
                    piece = " " + piece
                    k = 0
                else:
                    continue
            body = piece[k + 11 :]
            if piece.startswith("INFO Channel ", k + 6) or piece.startswith("INFO Ring ", k + 6):
                if " via " in body and _CONN_RE.match(body):
                    thread = self._thread(piece[:k])
                    inst = thread.current
                    target = inst.conns if inst is not None else thread.pending
                    if body not in target:
                        if self.kept_connections < MAX_CONNECTIONS:
                            self.kept_connections += 1
                            target[body] = (lineno, piece)
                        else:
                            self.dropped_connections += 1
                    continue
                self._skip(lineno)
                continue
            self._record(piece, k, lineno)

    # -- threads -----------------------------------------------------------------------------
    def _thread(self, pre: str) -> _Thread:
        cached = self.prefix_cache.get(pre)
        if cached is not None:
            return cached
        match = _PREFIX_RE.search(pre)
        if match:
            key = (match.group("host"), int(match.group("pid")), int(match.group("tid")))
            dev = int(match.group("dev"))
        else:
            match2 = _PREFIX_NOPID_RE.search(pre)
            if match2:
                key = (match2.group("host"), None, None)
                dev = int(match2.group("dev"))
            else:
                key = (None, None, None)
                dev = None
        thread = self.threads.get(key)
        if thread is None:
            if len(self.threads) >= MAX_THREADS:
                # drop threads that hold nothing; a 5 GB log of many short jobs must not grow
                self.threads = {k: t for k, t in self.threads.items() if t.pending or t.current}
                self.prefix_cache.clear()
            thread = _Thread(host=key[0], pid=key[1], tid=key[2], dev=dev)
            self.threads[key] = thread
        if len(self.prefix_cache) >= MAX_PREFIX_CACHE:
            # prefixes carrying timestamps are unique per line: stop them from piling up
            self.prefix_cache.clear()
        self.prefix_cache[pre] = thread
        return thread

    def _source(self, lineno: int, raw: str) -> SourceRef:
        text = raw.rstrip("\r\n")
        if len(text) > 2000:
            text = text[:2000] + "..."
        return SourceRef(self.input, lineno, text)

    def _skip(self, lineno: int) -> None:
        self.skipped += 1
        if len(self.skipped_lines) < MAX_EXAMPLES:
            self.skipped_lines.append(lineno)

    # -- other program output ------------------------------------------------------------
    def _other(self, raw: str, lineno: int) -> None:
        if "ersion" in raw and ("NCCL version" in raw or "RCCL version" in raw):
            self._version(raw, lineno)
            return
        if "Rank" in raw and "Pid" in raw:
            match = TESTS_RANK_RE.match(raw)
            if match:
                self._tests_rank(match, raw, lineno)
                return
        if "\x00" in raw or "\ufffd" in raw:
            self.junk += 1
            if len(self.junk_lines) < MAX_EXAMPLES:
                self.junk_lines.append(lineno)
            return
        if "NCCL INFO" in raw or "NCCL WARN" in raw:
            # `NCCL INFO` glued to something before it: a record cut by another write
            self._skip(lineno)
        elif "librccl" in raw or "RCCL" in raw[:40]:
            self.rccl_hints += 1

    def _version(self, raw: str, lineno: int) -> None:
        match = _VERSION_RE.search(raw)
        if not match:
            return
        self.lines_nccl += 1
        lib = match.group("lib")
        version = match.group("ver")
        extra = match.group("extra")
        if extra and extra.startswith("+"):
            version += extra
        elif extra and extra.startswith("-"):
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

    # -- NCCL records other than connection lines -----------------------------------------
    def _record(self, raw: str, k: int, lineno: int) -> None:
        level = raw[k + 6 : k + 10]
        if level == "INFO":
            self.lines_nccl += 1
            self._info(raw, raw[k + 11 :].rstrip(), raw[:k], lineno)
        elif level == "WARN":
            self.lines_nccl += 1
            self._warn(raw, raw[k + 11 :].strip(), raw[:k], lineno)
        elif raw.startswith("version", k + 6):
            self._version(raw, lineno)
        elif raw.startswith("ERROR", k + 6) or raw.startswith("TRACE", k + 6):
            self.lines_nccl += 1
        elif raw.startswith("IN", k + 6) or raw.startswith("WA", k + 6):
            # `NCCL ININFO ...`: two writers interleaved inside one record
            self._skip(lineno)
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
            if _PATH_HEAD_RE.match(body):
                self._path(raw, body, pre, lineno)
                return
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
        if "version" in body and ("NCCL version" in body or "RCCL version" in body):
            self._version(raw, lineno)
            return
        if "rsmi" in body or "ROCr version" in body or "Hipruntime" in body or "librccl" in body or "MSCCL" in body:
            self.rccl_hints += 1
            return
        if " -> " in body and body[0] not in "0123456789 ":
            match = _ERROR_TRACE_RE.match(body)
            if match:
                self._message("ERROR", f"{match.group('file')}:{match.group('line')} returned {match.group('rc')}",
                              match.group("file"), int(match.group("line")), raw, lineno)
            return

    def _ring(self, raw: str, body: str, pre: str, lineno: int) -> None:
        if " via " in body:
            # a connection line that reached here through the slow path (glued records)
            thread = self._thread(pre)
            inst = thread.current
            target = inst.conns if inst is not None else thread.pending
            if body not in target:
                self._new_connection(target, body, raw, lineno, thread)
            return
        cached = self.ring_cache.get(body, 0)
        if cached == 0:
            cached = None
            match = _RING_ORDER_RE.match(body)
            if match:
                order = [int(x) for x in match.group("order").split()]
                cached = (int(match.group("ch")), order)
            else:
                arrow = _RING_ARROW_RE.match(body)
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
        if self.trees_kept >= MAX_TREES:
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
            match = _TREE_ARROW_RE.match(body)
            if match:
                down = [int(x) for x in match.group("down").split("/") if x.lstrip("-").isdigit()]
                me = int(match.group("me"))
                ch = int(match.group("ch"))
                up = int(match.group("up"))
                inst.trees[(ch, me)] = NcclTree(ch, me, None if up < 0 else up, [d for d in down if d >= 0],
                                                self._source(lineno, raw))
            self.trees_kept += len(inst.trees) - before
            return
        source = None
        for match in _TREES_ITEM_RE.finditer(body):
            ch = int(match.group("ch"))
            me = int(match.group("me"))
            if (ch, me) in inst.trees:
                continue
            if source is None:
                source = self._source(lineno, raw)
            up = int(match.group("up"))
            down = [int(x) for x in match.group("down").split("/")]
            inst.trees[(ch, me)] = NcclTree(ch, me, None if up < 0 else up, [d for d in down if d >= 0], source)
        self.trees_kept += len(inst.trees) - before

    def _anonymous_instance(self, thread: _Thread) -> _Instance | None:
        """Lines that belong to a communicator whose init line is not (yet) seen: keep them per process."""
        key = ("anon", thread.host, thread.pid, thread.tid)
        inst = self.instances.get(key)
        if inst is None:
            if len(self.instances) >= MAX_INSTANCES:
                self.dropped_instances += 1
                return None
            inst = _Instance(key=key, host=thread.host, pid=thread.pid, ptr=None)
            self.instances[key] = inst
        return inst

    def _comm(self, raw: str, body: str, pre: str, lineno: int) -> None:
        ptr_match = _COMM_RE.search(body)
        if not ptr_match:
            return
        if body.startswith("NVLS ") or "headRank" in body:
            return
        thread = self._thread(pre)
        ptr = ptr_match.group(1).lower()
        values: dict[str, str] = {}
        for key, value in _COMM_KV_RE.findall(body):
            values.setdefault(key.lower(), value)
        is_destroy = "Destroy COMPLETE" in body
        ikey = (thread.host, thread.pid, ptr)
        inst = self.instances.get(ikey)
        if inst is None:
            if len(self.instances) >= MAX_INSTANCES:
                self.dropped_instances += 1
                return
            inst = _Instance(key=ikey, host=thread.host, pid=thread.pid, ptr=ptr)
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
            inst.bus_id = bdf_from_nccl_busid(values["busid"]) or inst.bus_id
        if "commid" in values:
            inst.comm_id = values["commid"].lower()
        if inst.cuda_dev is None and thread.dev is not None and "rank" in values:
            inst.cuda_dev = thread.dev
        if "rank" in values and (inst.source is None or "Init COMPLETE" in body):
            inst.source = self._source(lineno, raw)
        if is_destroy:
            return
        if " nRanks 0" in body or "localSize" in body or " bytes - Init COMPLETE" in body:
            # RCCL-only spellings: zero-padded nRanks suffix, kernel localSize, allocation total
            self.rccl_hints += 1
        if " nRanks " in body and "rank" not in values:
            # RCCL suffix on a connection/progress line: the thread works on this communicator
            thread.current = inst
            self._adopt_pending(thread, inst)
            return
        self._adopt_pending(thread, inst)
        if "Init COMPLETE" in body:
            thread.current = None
        else:
            thread.current = inst

    def _adopt_pending(self, thread: _Thread, inst: _Instance) -> None:
        if thread.pending:
            for body, value in thread.pending.items():
                inst.conns.setdefault(body, value)
            thread.pending = {}

    def _env(self, raw: str, body: str, lineno: int) -> None:
        match = _ENV_RE.match(body)
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
        if len(self.env) >= MAX_ENV:
            return
        self.env[name] = value
        self.env_sources[name] = self._source(lineno, raw)

    def _net(self, raw: str, body: str, pre: str, lineno: int) -> None:
        net = self.net
        if body.startswith("Failed to open libibverbs"):
            net.ibverbs_missing = True
            self._net_source(lineno, raw)
            return
        if "No device found" in body and body.startswith("NET/IB"):
            net.ib_not_found = True
            self._net_source(lineno, raw)
            return
        match = _USING_NETWORK_RE.match(body)
        if match:
            if net.network is None:
                net.network = match.group("name")
                self._net_source(lineno, raw)
            return
        match = _NET_USING_RE.match(body)
        if match:
            devices = [d for d in re.findall(r"\[\d+\](\S+)", match.group("devs"))]
            bucket = net.ib_devices if match.group("kind") == "IB" else net.socket_devices
            for dev in devices:
                if dev not in bucket and len(bucket) < 64:
                    bucket.append(dev)
            return
        if body.startswith("NET/Plugin"):
            loaded = _NET_PLUGIN_LOADED_RE.search(body)
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
        if len(self.gdr) >= MAX_GDR:
            return
        host = self._thread(pre).host
        match = _GDR_GPU_RE.search(body)
        if match:
            key = (host, match.group("gpu").lower(), match.group("hca"), match.group("state"))
            if key not in self.gdr:
                self.gdr[key] = NcclGdr(
                    enabled=match.group("state") == "Enabled",
                    gpu_bus_id=bdf_from_nccl_busid(match.group("gpu")),
                    hca=match.group("hca"),
                    reason=match.group("why"),
                    host=host,
                    source=self._source(lineno, raw),
                )
            return
        match = _GDR_HCA_RE.search(body)
        if match:
            key = (host, None, match.group("name"), match.group("state"))
            if key not in self.gdr:
                self.gdr[key] = NcclGdr(
                    enabled=match.group("state") == "Enabled",
                    gpu_bus_id=None,
                    hca=match.group("name"),
                    reason=match.group("why"),
                    host=host,
                    source=self._source(lineno, raw),
                )

    def _p2p_disabled(self, raw: str, body: str, pre: str, lineno: int, nvlink: bool) -> None:
        match = _P2P_DISABLED_RE.search(body)
        if not match or len(self.p2p_disabled) >= MAX_P2P_DISABLED:
            return
        host = self._thread(pre).host
        a, b = int(match.group("a")), int(match.group("b"))
        key = (host, min(a, b), max(a, b), bool(match.group("nvl")) or nvlink)
        if key not in self.p2p_disabled:
            self.p2p_disabled[key] = NcclP2PDisabled(a, b, key[3], host, self._source(lineno, raw))

    def _pattern(self, raw: str, body: str, lineno: int) -> None:
        match = _PATTERN_RE.match(body)
        if not match or len(self.graphs) >= MAX_GRAPHS:
            return
        key = match.groups()
        if key in self.graphs:
            return
        self.graphs[key] = NcclGraph(
            pattern=int(match.group("pattern")),
            cross_nic=int(match.group("cross")),
            n_channels=int(match.group("nch")),
            bw_intra=float(match.group("bw1")),
            bw_inter=float(match.group("bw2")),
            type_intra=match.group("t1"),
            type_inter=match.group("t2"),
            same_channels=int(match.group("same")),
            source=self._source(lineno, raw),
        )

    def _path(self, raw: str, body: str, pre: str, lineno: int) -> None:
        head = _PATH_HEAD_RE.match(body)
        if not head or len(self.paths) >= MAX_PATHS:
            return
        host = self._thread(pre).host
        src = head.group("node")
        source = None
        for item in _PATH_ITEM_RE.finditer(head.group("rest")):
            dst = item.group("node")
            if dst == src:
                continue
            key = (host, src, dst)
            if key in self.paths:
                continue
            if source is None:
                source = self._source(lineno, raw)
            self.paths[key] = NcclPath(
                src=src,
                dst=dst,
                hops=int(item.group("hops")),
                bw=float(item.group("bw")),
                path_type=item.group("type"),
                src_bus_id=_node_bus_id(src),
                dst_bus_id=_node_bus_id(dst),
                host=host,
                source=source,
            )

    def _warn(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = _PREFIX_RE.search(pre) or _PREFIX_NOPID_RE.search(pre)
        src_file = match.group("file") if match else None
        src_line = int(match.group("fline")) if match and match.group("fline") else None
        if src_file and ("rccl" in src_file or "hipify" in src_file):
            self.rccl_hints += 1
        if body.startswith("P2P is disabled"):
            self._p2p_disabled(raw, body, pre, lineno, nvlink=True)
        self._message("WARN", body, src_file, src_line, raw, lineno)

    def _message(self, level: str, text: str, src_file: str | None, src_line: int | None, raw: str, lineno: int) -> None:
        key = (level, src_file, src_line, text)
        msg = self.messages.get(key)
        if msg is not None:
            msg.count += 1
            return
        if len(self.messages) >= MAX_MESSAGES:
            self.messages_dropped += 1
            return
        self.messages[key] = NcclMessage(level, text, src_file, src_line, 1, self._source(lineno, raw))

    # -- after the last line ---------------------------------------------------------------
    def finish(self) -> NcclLogResult:
        result = NcclLogResult(input_name=self.input)
        result.version = self.version

        # pending connections of threads that never announced their communicator
        for thread in self.threads.values():
            if thread.pending:
                bucket = self.orphans.setdefault((thread.host, thread.pid), {})
                for body, value in thread.pending.items():
                    bucket.setdefault(body, value)
                thread.pending = {}

        groups: dict[str, list[_Instance]] = {}
        for inst in self.instances.values():
            if inst.ptr is None and not (inst.rings or inst.ring_next or inst.trees):
                continue
            groups.setdefault(_group_key(inst), []).append(inst)
        # anonymous instances (rings/trees with no init line) join the single real group, if any
        anon = groups.pop("anon", [])
        real_keys = [k for k in groups]
        if anon:
            if len(real_keys) == 1:
                groups[real_keys[0]].extend(anon)
            else:
                groups["anon"] = anon

        # orphan connections: attach to the process's only communicator, else the only run
        by_process: dict[tuple, list[str]] = {}
        for key, insts in groups.items():
            for inst in insts:
                by_process.setdefault((inst.host, inst.pid), []).append(key)
        extra: dict[str, dict] = {}
        for proc, bodies in self.orphans.items():
            keys = sorted(set(by_process.get(proc, [])))
            if len(keys) == 1:
                target = keys[0]
            elif len(groups) == 1:
                target = next(iter(groups))
            elif not groups:
                target = "default"
            else:
                target = "unattributed"
            bucket = extra.setdefault(target, {})
            for body, value in bodies.items():
                bucket.setdefault(body, value)
        for key in extra:
            groups.setdefault(key, [])

        for key in sorted(groups, key=_run_sort_key):
            run = self._build_run(key, groups[key], extra.get(key, {}))
            if run is not None:
                result.runs.append(run)
        if not result.runs and (self.env or self.messages or self.version or self.p2p_disabled or self.lines_nccl):
            run = self._build_run("default", [], {})
            if run is not None:
                result.runs.append(run)

        library = self.library
        if self.rccl_hints:
            library = "RCCL"
        if library is None and (self.instances or self.kept_connections or self.lines_nccl):
            library = "NCCL"
        result.library = library
        for run in result.runs:
            run.library = library
        result.lines_total = self.lines_total
        result.lines_nccl = self.lines_nccl + self.kept_connections
        result.lines_skipped = self.skipped
        result.skipped_lines = list(self.skipped_lines)
        if self.skipped:
            where = ", ".join(str(n) for n in self.skipped_lines)
            result.warnings.append(
                f"{self.skipped} NCCL line(s) could not be read (cut or interleaved with other output); "
                f"first at line(s) {where}"
            )
        if self.junk:
            where = ", ".join(str(n) for n in self.junk_lines)
            result.warnings.append(f"{self.junk} line(s) of binary or undecodable data were skipped; first at line(s) {where}")
        if self.unknown_conn:
            result.warnings.append(f"{self.unknown_conn} connection line(s) name a transport k3diag does not know; not counted")
        if self.dropped_connections:
            result.warnings.append(
                f"{self.dropped_connections} further distinct connection line(s) were counted but not kept "
                f"(limit {MAX_CONNECTIONS} per file keeps memory bounded)"
            )
        if self.dropped_instances:
            result.warnings.append(f"{self.dropped_instances} communicator line(s) were not tracked: they belong to "
                                   f"communicator instances beyond the first {MAX_INSTANCES} (limit keeps memory bounded)")
        if self.messages_dropped:
            result.warnings.append(f"{self.messages_dropped} further distinct NCCL warning(s) were not kept")
        for name, values in sorted(self.env_conflicts.items()):
            result.warnings.append(f"{name} has different values in this log ({', '.join(sorted(values))}); "
                                   "the first one is reported")
        if not result.runs and not self.lines_nccl:
            result.warnings.append("no NCCL/RCCL log lines found; run the job with NCCL_DEBUG=INFO "
                                   "NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET and give its output")
        return result

    def _build_run(self, key: str, insts: list[_Instance], extra: dict) -> NcclRun | None:
        run = NcclRun(input=self.input, library=None, version=self.version)
        run.version_source = self.version_source
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

        # connections: each distinct line once; both ends of a NET link log their own side
        seen: set[tuple] = set()
        prefix_cache: dict[str, tuple] = {}
        bodies: list[tuple[str, tuple]] = []
        for inst in insts:
            bodies.extend(inst.conns.items())
            inst.conns = {}  # converted below; drop the raw lines as we go (bounded peak memory)
        bodies.extend(extra.items())
        extra.clear()
        bodies.sort(key=lambda item: item[1][0])
        conn_match = _CONN_RE.match
        via_cache: dict[str, str | None] = {}
        append = run.connections.append
        input_name = self.input
        for body, (lineno, text) in bodies:
            text = text.rstrip("\r\n")
            match = conn_match(body)
            if not match:
                self._skip(lineno)
                continue
            kind, ch, conn, src_s, sb, dst_s, db, direction, via, _comm, nr = match.groups()
            via = via.strip()
            transport = via_cache.get(via, "?")
            if transport == "?":
                transport = via_cache[via] = transport_of(via)
            if transport is None:
                self.unknown_conn += 1
                continue
            channel, src, dst = int(ch), int(src_s), int(dst_s)
            ckey = (channel, src, dst, via, direction, conn)
            if ckey in seen:
                continue
            seen.add(ckey)
            source = SourceRef(input_name, lineno, text)
            append(NcclConnection(channel, src, dst, via, transport, direction, source))
            self._ranks_from_connection(ranks, kind, src, sb, dst, db, direction, text, source, prefix_cache,
                                        transport != "NET" and "MNNVL" not in via)
            if nr:
                # only RCCL appends `comm 0x.. nRanks NN` to connection lines
                self.rccl_hints += 1
                if not nranks:
                    nranks.add(int(nr))
        if run.nranks is None and nranks:
            run.nranks = max(nranks)
        # nccl-tests headers name the host and device of every rank
        if self.tests_ranks and (run.nranks is None or len(self.tests_ranks) <= run.nranks):
            for rank, info in self.tests_ranks.items():
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

        # rings and trees
        ring_map: dict[int, NcclRing] = {}
        trees: dict[tuple, NcclTree] = {}
        nexts: dict[int, dict[int, int]] = {}
        for inst in insts:
            for ch, (order, source) in (inst.rings or {}).items():
                ring_map.setdefault(ch, NcclRing(ch, order, source))
            for ch, mapping in (inst.ring_next or {}).items():
                nexts.setdefault(ch, {}).update(mapping)
            for tkey, tree in (inst.trees or {}).items():
                if len(trees) < MAX_TREES_PER_RUN:
                    trees.setdefault(tkey, tree)
        for ch, mapping in nexts.items():
            if ch in ring_map:
                continue
            order = _follow_ring(mapping)
            if order:
                ring_map[ch] = NcclRing(ch, order, None)
        run.rings = [ring_map[ch] for ch in sorted(ring_map)]
        run.trees = [trees[k] for k in sorted(trees)]

        # process-wide facts (one log is normally one job)
        shared = self._shared()
        run.env = shared["env"]
        run.env_sources = shared["env_sources"]
        run.messages = shared["messages"]
        run.warnings = shared["warnings"]
        run.p2p_disabled = shared["p2p_disabled"]
        run.gdr = shared["gdr"]
        run.graphs = shared["graphs"]
        run.paths = shared["paths"]
        run.net = self.net
        run.connections_dropped = self.dropped_connections
        if not (run.connections or run.ranks or run.rings or run.trees or run.env or run.messages or run.version
                or run.p2p_disabled or run.paths or run.graphs):
            return None
        return run

    def _shared(self) -> dict:
        """Process-wide facts, built once and shared by every run (a log can hold thousands of
        communicators; copying a path table into each would cost more than the parse)."""
        if self._shared_cache is None:
            messages = sorted(self.messages.values(), key=lambda m: (m.source.line or 0) if m.source else 0)
            self._shared_cache = {
                "env": dict(self.env),
                "env_sources": dict(self.env_sources),
                "messages": messages,
                "warnings": [_message_text(m) for m in messages],
                "p2p_disabled": list(self.p2p_disabled.values()),
                "gdr": list(self.gdr.values()),
                "graphs": list(self.graphs.values()),
                "paths": list(self.paths.values()),
            }
        return self._shared_cache

    def _ranks_from_connection(self, ranks: dict[int, NcclRank], kind: str, src: int, sb: str, dst: int, db: str,
                               direction: str | None, text: str, source: SourceRef, prefix_cache: dict,
                               intra_node: bool) -> None:
        """The logging rank (sender; receiver for `[receive]`) ran on the prefix's host and device; over
        P2P and SHM (not multi-node NVLink) its peer is on the same host."""
        era_ring = kind == "Ring"
        for rank, bracket in ((src, sb), (dst, db)):
            info = ranks.get(rank)
            if info is None:
                info = ranks[rank] = NcclRank(rank, source=source)
            elif info.bus_id or info.nvml_dev is not None or info.cuda_dev is not None:
                continue
            bracket = bracket.strip()
            if len(bracket) >= 4:
                info.bus_id = info.bus_id or bdf_from_nccl_busid(bracket)
            elif bracket.isdigit():
                # 2.4-2.6 printed cudaDev in brackets, 2.13+ prints nvmlDev
                if era_ring:
                    info.cuda_dev = int(bracket)
                else:
                    info.nvml_dev = int(bracket)
        logger = dst if direction == "receive" else src
        info = ranks[logger]
        peer = ranks[src if logger == dst else dst]
        if info.host is not None and info.pid is not None:
            if intra_node and peer.host is None:
                peer.host = info.host
            return
        k = text.find(_MARK)
        if k <= 0:
            return
        pre = text[:k]
        parsed = prefix_cache.get(pre)
        if parsed is None:
            found = _PREFIX_RE.search(pre)
            if found:
                parsed = (found.group("host"), int(found.group("pid")), int(found.group("dev")))
            else:
                found = _PREFIX_NOPID_RE.search(pre)
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


def _group_key(inst: _Instance) -> str:
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


def _node_bus_id(node: str) -> str | None:
    kind, _, ident = node.partition("/")
    if kind != "GPU":
        return None
    if "-" in ident:
        ident = ident.split("-", 1)[1]
    return bdf_from_nccl_busid(ident)


def _message_text(msg: NcclMessage) -> str:
    where = f"{msg.file}:{msg.line_no} " if msg.file else ""
    times = f" (x{msg.count})" if msg.count > 1 else ""
    return f"{msg.level} {where}{msg.text}{times}"


# -- public API ----------------------------------------------------------------------------------


def parse_stream(lines: Iterable[str], input_name: str, first_line: int = 1) -> NcclLogResult:
    """Parse a log given as lines (with or without line endings) in bounded memory; never raises."""
    parser = _Parser(input_name)
    with _gc_paused():
        try:
            parser.feed(lines, first_line)
        except (UnicodeError, MemoryError) as exc:  # a broken reader must cost the rest, not the report
            parser.skipped += 1
            result = parser.finish()
            result.warnings.append(f"reading stopped early ({type(exc).__name__}); the lines before were parsed")
            return result
        return parser.finish()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The parser builds many small acyclic records; the cyclic collector rescanning them
    again and again costs more than the parsing itself on big logs."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def parse(section, input_name: str) -> NcclLogResult:
    return parse_stream(section.text.split("\n"), input_name, first_line=section.first_line)


def iter_file_lines(path, max_line_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Lines of a file on disk, decoded leniently; a run of bytes without newline is cut into pieces
    so binary junk cannot make one giant line."""
    with open(path, "r", encoding="utf-8", errors="replace", newline="") as handle:
        while True:
            line = handle.readline(max_line_chars)
            if not line:
                return
            yield line


def parse_path(path, input_name: str | None = None) -> NcclLogResult:
    """Parse a log file directly (the fastest path: no per-line generator in between)."""
    name = input_name or str(path)
    parser = _Parser(name)
    with _gc_paused():
        try:
            with open(path, "r", encoding="utf-8", errors="replace", newline="") as handle:
                parser.feed(handle, 1)
        except OSError as exc:
            result = parser.finish()
            result.warnings.append(f"reading {name} failed part way: {exc}")
            return result
        return parser.finish()
