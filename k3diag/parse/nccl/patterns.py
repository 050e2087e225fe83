"""The line shapes of NCCL/RCCL debug logs, and the bounds a multi-gigabyte log may cost.

Regular expressions run only on lines a substring check already picked; the `bytes` ones are the
fast path's, run over whole blocks of one thread's lines at once.
"""

from __future__ import annotations

import re

# -- bounds ------------------------------------------------------------------------------------
MAX_INSTANCES = 262_144  # communicator instances (one per rank per communicator) tracked at once
MAX_CONN_KEYS_PER_INSTANCE = 4_096  # distinct (src, dst, via, direction) per instance (all-to-all p2p)
MAX_THREADS = 8_192  # threads with nothing in flight are forgotten beyond this
MAX_TREES = 50_000  # tree entries over all communicators (a rank prints one per channel)
MAX_PREFIX_CACHE = 20_000
MAX_REST_CACHE = 50_000
# Texts longer than this are parsed each time, not kept as cache keys: a log of long odd lines must not
# make the caches hold gigabytes (a connection line's text after ` : ` is 30 to 120 characters)
MAX_CACHED_TEXT = 256


def remember(cache: dict, key: object, value: object, cap: int, text: str | bytes) -> None:
    """`cache[key] = value` for a memo of what `text` says (every parser cache is one): not kept when the
    text is longer than `MAX_CACHED_TEXT`; a cache holding `cap` entries starts over."""
    if len(text) <= MAX_CACHED_TEXT:
        if len(cache) >= cap:
            cache.clear()
        cache[key] = value
MAX_MESSAGES = 300  # distinct WARN/error messages
MAX_ENV = 300
MAX_PATHS = 4_000
MAX_GRAPHS = 200
MAX_TREES_PER_RUN = 20_000
MAX_RING_ORDER_CHARS = 1 << 17  # text of the distinct ring orders shared (`handlers._ring_order`)
MAX_RANK_INTS = 1 << 16
MAX_TREES_PER_INSTANCE = 4_096
MAX_RINGS_PER_INSTANCE = 512  # NCCL has at most 64 channels (MAXCHANNELS): only a garbled log gets near
MAX_SMALL_TABLE = 200  # channel counts, MNNVL health masks, NVLS support lines: a few per host
MAX_NET_DEVICES = 64
MAX_NOT_KEPT_KEYS = 65_536  # distinct facts a bound left out, remembered so that each is counted once
MAX_GDR = 500
MAX_DMABUF = 500
MAX_P2P_DISABLED = 2_000
MAX_HOSTS = 4_096  # host names seen on NCCL lines, with or without a rank
MAX_FINALIZED_PROCS = 32_768  # processes of built runs remembered for their late connection lines
MAX_FINALIZED_KEYS = 4_096  # keys of built runs remembered (the rest only counted as "more")
MAX_ADOPTERS = 32_768  # forgotten threads of a cut part remembered for the merge (`NcclLogParser.adopters`)
MAX_EXAMPLES = 10  # line numbers kept for each kind of skipped line
CUT_THREADS_SENTENCE = (
    "{threads} busy where the file was cut to be read in parallel could not be followed across the cut: the later "
    "part forgot more than {MAX_ADOPTERS:,} threads before they spoke again, so their connection lines after the "
    "cut may be counted with the communicator they were initializing before it (`nccl_summary.not_kept` in --json)")
# what each kind of `NcclLogParser.not_kept` counts (singular, plural) and which bound left it out (the
# bound's name in braces: formatted when reported, with the bounds in force then)
NOT_KEPT: dict[str, tuple[str, str, str]] = {
    "tree_lines": ("`Trees` line", "`Trees` lines", "not read: the trees of communicators being read are bounded "
                   "to {MAX_TREES:,} entries in all and {MAX_TREES_PER_INSTANCE:,} per rank"),
    "tree_entries": ("tree entry", "tree entries", "past {MAX_TREES_PER_INSTANCE:,} per rank"),
    "rings": ("ring order", "ring orders", "past {MAX_RINGS_PER_INSTANCE:,} per rank"),
    "env": ("NCCL setting", "NCCL settings", "past the first {MAX_ENV:,} distinct ones"),
    "hosts": ("host name", "host names", "past the first {MAX_HOSTS:,}"),
    "gdr": ("GPUDirect RDMA line", "GPUDirect RDMA lines", "past the first {MAX_GDR:,} distinct ones"),
    "dmabuf": ("DMA-BUF line", "DMA-BUF lines", "past the first {MAX_DMABUF:,} distinct ones"),
    "p2p_disabled": ("'P2P is disabled' line", "'P2P is disabled' lines",
                     "past the first {MAX_P2P_DISABLED:,} distinct GPU pairs"),
    "graphs": ("graph search result", "graph search results", "past the first {MAX_GRAPHS:,} distinct ones"),
    "paths": ("topology path", "topology paths", "past the first {MAX_PATHS:,} distinct ones"),
    "channel_counts": ("channel-count line", "channel-count lines", "past the first {MAX_SMALL_TABLE:,} distinct ones"),
    "mnnvl_health": ("MNNVL health line", "MNNVL health lines", "past the first {MAX_SMALL_TABLE:,} distinct ones"),
    "nvls_support": ("NVLS support line", "NVLS support lines", "past the first {MAX_SMALL_TABLE:,} distinct ones"),
    "collnet": ("CollNet connection line", "CollNet connection lines", "past the first {MAX_SMALL_TABLE:,} distinct ones"),
    "net_devices": ("network device", "network devices", "past the first {MAX_NET_DEVICES:,} of a kind"),
    "messages": ("NCCL warning or error", "NCCL warnings or errors", "past the first {MAX_MESSAGES:,} distinct ones"),
    "connection_lines": ("connection line", "connection lines", "of ranks connected to more than "
                         "{MAX_CONN_KEYS_PER_INSTANCE:,} distinct peers and transports in one communicator"),
    "init_timings": ("`Init timings` line", "`Init timings` lines", "of communicators past the first 4,096 "
                     "with init timings"),
    "init_lines": ("communicator init line", "communicator init lines", "of ranks past the first {MAX_INSTANCES:,} "
                           "communicator instances being read at once"),
    # not a fact left out but a thread's state: said in its own words (`CUT_THREADS_SENTENCE`)
    "cut_threads": ("thread", "threads", ""),
}
MAX_LINE_CHARS = 1 << 16
# Runs (communicators) reported in full: the largest and those that show a problem, up to this many.
# Every other run is summarized with exact counters (ranks, nodes, connection lines per transport).
DETAIL_RUNS = 16
BATCH = 4096  # lines narrowed together by the C-level filter of the exact path

# -- text (exact path) ---------------------------------------------------------------------------
# The record header right before " NCCL INFO"/" NCCL WARN": host may be numeric, redacted
# (`<cluster_name>`), a container id or a pod name; what precedes it is a launcher prefix, or NULs and
# bad bytes glued to it (a log file whose writer crashed leaves a NUL-filled stretch before the next record).
# The host is tried only where a run of host characters starts (the look-behind): the leftmost match starts
# there anyway, and a search tried at every character of a long run re-reads the run from each one, time
# quadratic in its length (9 ms for each distinct line with 1,000 characters of junk glued before its header).
# A WARN names its source as `file.cc:123`; aws-ofi-nccl's as a C function with its return type (`int
# nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):263`, `__PRETTY_FUNCTION__`): the function is the file.
PREFIX_RE = re.compile(
    r"(?<![^\s:\x00\ufffd])(?P<host>[^\s:\x00\ufffd]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]"
    r"(?: (?:[A-Za-z_]\w* (?=\w+\())?(?P<file>\S+?):(?P<fline>\d+))?\s*$"
)
# The headers are searched in the last `MAX_HEADER_CHARS` of what precedes " NCCL " (a header is shorter).
MAX_HEADER_CHARS = 1024
# Some RCCL builds and redacted pastes drop pid:tid (`node [0] NCCL INFO`).
PREFIX_NOPID_RE = re.compile(r"(?<![^\s:\[\]\x00\ufffd])(?P<host>[^\s:\[\]\x00\ufffd]+) \[(?P<dev>\d+)\]"
                             r"(?: (?P<file>\S+?):(?P<fline>\d+))?\s*$")
# A connection line is `<head> : <rest>`; both halves are parsed once per distinct text.
CONN_HEAD_RE = re.compile(r"^(?P<kind>Ring|Channel) (?P<ch>\d+)(?:/(?P<conn>\d+))?$")
CONN_REST_RE = re.compile(
    r"^(?P<src>\d+)\[(?P<sb>[^\]]*)\] -> (?P<dst>\d+)\[(?P<db>[^\]]*)\](?: \[(?P<dir>send|receive)\])? via (?P<via>.*?)"
    r"(?: comm (?P<comm>0x[0-9a-fA-F]+) nRanks (?P<nr>\d+))?\s*$"
)
RING_ORDER_RE = re.compile(r"^(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? :(?P<order>(?:\s+-?\d+)+)\s*(?:comm .*)?$")
RING_ARROW_RE = re.compile(r"^Ring (?P<ch>\d+) : (?P<prev>-?\d+) -> (?P<me>-?\d+) -> (?P<next>-?\d+)\s*$")
TREE_ARROW_RE = re.compile(r"^Tree (?P<ch>\d+) : (?P<up>-?\d+) -> (?P<me>-?\d+) -> (?P<down>[-\d/]+)\s*$")
TREES_ITEM_RE = re.compile(r"\[(?P<ch>\d+)\] (?P<down>-?\d+(?:/-?\d+)*)->(?P<me>-?\d+)->(?P<up>-?\d+)")
COMM_RE = re.compile(r"\bcomm (0x[0-9a-fA-F]+)")
COMM_KV_RE = re.compile(
    r"\b(rank|nranks|nRanks|nNodes|localRanks|localRank|cudaDev|nvmlDev|busId|commId)\s+(0x[0-9a-fA-F]+|[0-9a-fA-F]+)\b"
)
ENV_RE = re.compile(r"^(?P<name>(?:NCCL|RCCL|HSA)_[A-Z0-9_]+) set (?:by environment )?to (?P<value>(?:.*\S)?)\s*$")
VERSION_RE = re.compile(r"\b(?P<lib>NCCL|RCCL) version\s*(?::\s*)?(?P<ver>\d+\.\d+\.\d+)(?P<extra>[^\s,]*)")
P2P_DISABLED_RE = re.compile(r"P2P is disabled between (?P<nvl>NVLINK )?connected GPUs (?P<a>\d+) and (?P<b>\d+)")
PATTERN_RE = re.compile(
    r"^Pattern (?P<pattern>\d+), crossNic (?P<cross>\d+), nChannels (?P<nch>\d+), (?:bw|speed) "
    r"(?P<bw1>[\d.]+)/(?P<bw2>[\d.]+), type (?P<t1>[A-Z0-9]+)/(?P<t2>[A-Z0-9]+), sameChannels (?P<same>\d+)"
)
PATH_HEAD_RE = re.compile(r"^(?P<node>(?:GPU|NET|NIC|CPU|NVS)/[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)?) :(?P<rest>.*)$")
PATH_ITEM_RE = re.compile(
    r"(?P<node>(?:GPU|NET|NIC|CPU|NVS)/[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)?) \((?P<hops>\d+)/(?P<bw>[\d.]+)/(?P<type>[A-Z0-9]+)\)"
)
GDR_GPU_RE = re.compile(
    r"GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>[0-9a-fA-Fx]+)\s*/\s*HCA (?P<hca>\S+)"
    r"(?: \((?P<why>[^)]*)\))?"
)
GDR_HCA_RE = re.compile(
    r"GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<hca>\d+) '(?P<name>[^']*)'(?: \((?P<why>[^)]*)\))?"
)
# `NET/IB : GPU Direct RDMA (nvidia-peermem) enabled for HCA 0 'mlx5_0'`, `DMA-BUF is available on GPU device 0`,
# `NET/IB : mlx5_0:1 DMA-BUF enabled` (the wording moved between 2.1x releases: matched loosely).
DMABUF_RE = re.compile(r"DMA-?BUF(?: support)? (?:is )?(?P<state>enabled|disabled|available|not available|supported|"
                       r"not supported)(?: on GPU device (?P<gpu>\d+)| for HCA (?P<hca>\d+) '(?P<name>[^']*)')?",
                       re.IGNORECASE)
ERROR_TRACE_RE = re.compile(r"^(?P<file>[\w./+-]+\.(?:cc|cu|cpp|c|h|hpp)):(?P<line>\d+) -> (?P<rc>\d+)")
NET_USING_RE = re.compile(r"^NET/(?P<kind>IB|Socket)\s*: Using (?P<devs>.*?)(?:;\s*OOB.*)?$")
NET_DEVICE_RE = re.compile(r"\[\d+\](\S+)")
USING_NETWORK_RE = re.compile(r"^Using network (?P<name>.+?)\s*$")
NET_PLUGIN_LOADED_RE = re.compile(r"NET/Plugin\s*(?::\s*)?(?:Loaded net plugin|Plugin loaded)\s*(?P<name>.*)$")
# `<n> coll channels, <n> collnet channels, <n> nvls channels, <n> p2p channels, ...` (2.17+)
CHANNEL_COUNTS_RE = re.compile(r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
                               r"(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels")
# `CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA` (2.12+; `CollNet 00 : ...` before the connIndex)
COLLNET_RE = re.compile(r"^CollNet (?P<ch>\d+)(?:/\d+)? : (?P<rank>\d+) \[(?P<dir>send|receive)\] via (?P<via>\S+)")
NVLS_SUPPORT_RE = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\S+)")
# MNNVL: `MNNVL busId 0x... cliqueId 0x... state 3 healthMask 0xaa`
HEALTH_MASK_RE = re.compile(r"healthMask (?P<mask>0x[0-9a-fA-F]+)")
# nccl-tests headers: `#  Rank  0 Group  0 Pid 895544 on     h100-2 device  0 [0002:00:01] NVIDIA H100 80GB HBM3`,
# older `#   Rank  0 Pid 120890 on 10-90-43-152 device  0 [0x87] A100-SXM4-40GB`.
TESTS_RANK_RE = re.compile(
    r"^\s*#?\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+"
    r"(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>(?:.*\S)?)\s*$"
)
SPLIT_RECORDS_RE = re.compile(r"\s{2,}")

MARK = " NCCL "
# The first 9 characters after " NCCL ": which INFO lines can carry a fact. Everything else
# (per-collective COLL lines, proxy threads, tuning tables) is dropped after one set lookup.
CONN_TAGS = frozenset({"INFO Chan", "INFO Ring"})
INFO_TAGS = frozenset({
    "INFO Tree", "INFO comm", "INFO nccl", "INFO NCCL", "INFO RCCL", "INFO HSA_", "INFO NET/", "INFO Usin",
    "INFO Fail", "INFO GPU ", "INFO GPU/", "INFO NIC/", "INFO P2P ", "INFO Patt", "INFO Conn", "INFO init",
    "INFO ROCr", "INFO Hipr", "INFO MSCC", "INFO MNNV", "INFO DMA-", "INFO NVLS", "INFO [Ran", "INFO Init",
    "INFO Coll",
})
# coll/nvls channel counts start with a number: `16 coll channels, 0 collnet channels, 0 nvls channels`
COUNT_TAG_NEEDS = " coll channels"
# tags shared by frequent useless lines and rare useful ones: read the line only if it has this
TAG_NEEDS = {
    "INFO P2P ": "P2P is disabled",  # not `P2P Chunksize set to ...`
    "INFO Conn": "comm 0x",  # RCCL's `Connected all rings comm 0x.. nRanks ..`, not NCCL's plain line
    "INFO init": "rsmi",  # RCCL's `initialized internal alternative rsmi functionality`
    "INFO MNNV": "healthMask",
    "INFO [Ran": "comm 0x",  # 2.29+ `[Rank 3] ncclCommInitRank comm 0x.. - Init START`
    "INFO Init": "Init timings",  # 2.23+ `Init timings - ncclCommInitRank: rank R nranks N total T (...)`
}
# one dict lookup per line: 1 = maybe a connection line, 2 = a line to read
TAG_ACTIONS = {**{tag: 1 for tag in CONN_TAGS}, **{tag: 2 for tag in INFO_TAGS}}

# Facts that read the same twice change nothing (tables keyed by host and text, the first value kept):
# an INFO line of these tags, or one that begins with a digit (channel counts), is read once per host and
# text. Not lines that count or append on every read (missing libibverbs, RCCL hints), error traces, or
# lines that may start, end or adopt a communicator.
ONCE_TAGS = frozenset({"NCCL", "RCCL", "NET/", "Usin"})
NOT_ONCE = ("comm 0x", "Failed to open libibverbs", "No device found", "rsmi", "ROCr version", "Hipruntime",
            "librccl", "MSCC", " -> ")
MAX_ONCE = 50_000  # (host, text) pairs remembered; past it they are forgotten (and read again)


def read_once(body: str) -> bool:
    """Whether an INFO line's body (after `NCCL INFO `) need be read only once per host."""
    tag = body[:4]
    return (tag in ONCE_TAGS or tag[:1].isdigit()) and not any(map(body.__contains__, NOT_ONCE))


# -- bytes (fast path) ---------------------------------------------------------------------------
# A run of lines that all begin with one thread's record header, found in one C-level match.
SAME_PREFIX_RUN_RE = re.compile(rb"([^\n]*? NCCL INFO )[^\n]*\n(?:\1[^\n]*\n)*")
