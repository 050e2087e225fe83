"""nccl-tests and rccl-tests output (`all_reduce_perf`, `all_gather_perf`, ... `sendrecv_perf`).

    # nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 ...
    #  Rank  0 Group  0 Pid  28307 on      gpu59 device  0 [0x16] NVIDIA GeForce RTX 4090
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
           8             2     float     sum      -1    42.56    0.00    0.00      0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 6.13096

Column sets differ by build and collective: older builds print `error` (a max deviation such as
`0e+00`) where newer ones print `#wrong` (a count); all_gather/alltoall had no redop/root
before they printed `none`/`-1`; broadcast/reduce have root; `-O 0` prints only in-place;
`-C 1` says `cputime`; builds that add columns (algo, proto, nchannels) are read by the
header. Launchers add prefixes (`[1,0]<stdout>:`, ` 0: `, `[0]` even in mid-line); people
trim tables with `...`; NCCL INFO lines interleave. The table is read by the header when there
is one, by the shape of the numbers when the header was cut off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.bench_records import NcclTestsBenchmark, NcclTestsDevice, NcclTestsMeasure, NcclTestsRow
from k3diag.model.source import SourceRef
from k3diag.parse import nccl_log
from k3diag.parse.nccl_log import TESTS_RANK_RE, bus_id_from_tests_header
from k3diag.model.words import counted

# A line that starts one test's output (the build cuts files holding several outputs here).
START_RE = re.compile(
    r"^(?:\[[^\]]*\](?:<std\w+>)?:|\s*\d+:\s)?\s*#?\s*(?:nThreads?:?\s+\d+\s+nGpus|Collective test starting:)"
    # or the command line that ran the test (`./build/all_reduce_perf -b 8 ...`, `NCCL_ALGO=TREE ./all_reduce_perf`)
    r"|^\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?(?:all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce"
    r"|sendrecv|scatter|gather|hypercube)_perf\b"
)
_NTHREAD_RE = re.compile(
    r"nThreads?:?\s+(?P<nthread>\d+)\s+nGpus:?\s+(?P<ngpus>\d+)(?:\s+nRanks:?\s+(?P<nranks>\d+))?"
)
_STARTING_RE = re.compile(r"Collective test (?P<what>starting|concluded):\s*(?P<op>\S+)")
_VERSION_RE = re.compile(r"(?:nccl-tests version\s+(?P<v1>\S+)|rccl-tests:\s*Version\s+(?P<v2>\S+))")
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<state>OK|FAILED)?")
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*(?P<v>[-+\d.eE]+|nan|inf)")
_OP_FROM_BINARY_RE = re.compile(r"\b(?P<op>[a-z_]+?)_perf(?:_mpi)?\b")
# launcher prefixes: `[1,0]<stdout>:`, `[rank3]:`, Slurm `--label` ` 0: `, MPI `--tag-output` `[0]`
_LEAD_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<std\w+>:|\[rank\d+\]:|\s*\d+:\s(?=\s*[#\d]))")
_TAG_RE = re.compile(r"\[\d+(?:,\d+)?\](?:<std\w+>:)?")
# nccl-tests' NCCLCHECK/CUDACHECK when a call fails: `%s: Test NCCL failure %s:%d '%s / %s'` (host, file:line,
# ncclGetErrorString, ncclGetLastError; before 2.13 without host and last error), then ` .. host pid N: Test
# failure file:line` for each caller; NCCL 1.x tests printed `NCCL failure all_reduce.cu:95 '...'`
_FAILURE_RE = re.compile(
    r"^(?:(?P<host>[^\s:]+): )?(?:Test )?(?P<lib>NCCL|CUDA) failure (?P<where>\S+:\d+) '(?P<msg>.*?)(?:'\s*)?$"
)
_FAILURE_STACK_RE = re.compile(r"^\.\. \S+ pid \d+: Test failure \S+:\d+\s*$")
_INT_RE = re.compile(r"^-?\d+$")
# `\d+(?:\.\d*)?`, not `\d+\.?\d*`: the same numbers, without two digit repeats that meet (a 20,000-digit
# token was quadratic: 8.7 s a file)
_NUM_RE = re.compile(r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?\*?$")
_REDOPS = frozenset({"sum", "prod", "max", "min", "avg", "none", "mulsum", "premulsum"})
_TYPES = frozenset({
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "fp8_e4m3", "fp8_e5m2", "char", "int", "f8e4m3", "f8e5m2",
})
_KNOWN_OPS = (
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv",
    "scatter", "gather", "hypercube", "alltoallv",
)


@dataclass
class NcclTestsResult:
    benchmarks: list[NcclTestsBenchmark] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # NCCL INFO/WARN lines printed by the test (NCCL_DEBUG=INFO): what NCCL chose for this run
    nccl: nccl_log.NcclLogResult | None = None


def sniff(text: str) -> float:
    lines = text.split("\n", 3000)[:3000]
    header = 0
    rows = 0
    nccl = 0
    for line in lines:
        if " NCCL " in line:
            nccl += 1
            continue
        stripped = _strip_prefix(line)
        if _NTHREAD_RE.search(stripped) or "Collective test starting" in stripped:
            header += 2
        elif stripped.lstrip("# ").startswith("size") and "busbw" in stripped:
            header += 2
        elif "Avg bus bandwidth" in stripped or "Out of bounds values" in stripped:
            header += 1
        elif _looks_like_row(stripped.split()):
            rows += 1
    if header >= 2:
        return 0.95
    if header and rows:
        return 0.9
    if rows >= 3:
        # A table whose header was cut, under NCCL_DEBUG=INFO lines: the NCCL log reader would take it and
        # drop the rows; this parser reads the rows and hands the NCCL lines to that reader.
        return 0.96 if nccl else 0.7
    if any(START_RE.match(line) for line in lines[:5]):
        return 0.55  # only the command that ran a test: it names the test that follows
    return 0.0


def _strip_prefix(line: str) -> str:
    line = _LEAD_PREFIX_RE.sub("", line, count=1)
    if "[" in line and "]" in line and not line.lstrip().startswith("#"):
        # `[0]` tags that mpirun --tag-output drops into the middle of a row
        line = _TAG_RE.sub(" ", line)
    return line


def _looks_like_row(tokens: list[str]) -> bool:
    return (
        len(tokens) >= 7
        and _INT_RE.match(tokens[0]) is not None
        and _INT_RE.match(tokens[1]) is not None
        and tokens[2] in _TYPES
    )


class _Block:
    def __init__(self, input_name: str) -> None:
        self.bench = NcclTestsBenchmark(input=input_name)
        self.columns: list[str] | None = None
        self.seen_ranks: set[int] = set()
        self.duplicate_ranks = False
        self.has_content = False
        self.closed = False


def parse(section, input_name: str) -> NcclTestsResult:
    result = NcclTestsResult()
    lines = section.text.split("\n")
    first = section.first_line
    blocks: list[_Block] = []
    block: _Block | None = None
    pending_op: str | None = _op_from_command(section.command)
    command = section.command
    skipped: list[int] = []
    skipped_count = 0
    nccl_lines = 0

    def current() -> _Block:
        nonlocal block, pending_op
        if block is None or block.closed:
            block = _Block(input_name)
            block.bench.command = command
            if pending_op:
                block.bench.op = pending_op
                pending_op = None
            blocks.append(block)
        return block

    for offset, raw in enumerate(lines):
        lineno = first + offset
        if " NCCL " in raw or raw.startswith("NCCL "):
            nccl_lines += 1
            if "NCCL INFO" in raw or "NCCL WARN" in raw or "version" in raw:
                continue
        line = _strip_prefix(raw.rstrip())
        stripped = line.strip()
        if not stripped:
            continue
        content = stripped.lstrip("#").strip()

        failure = _FAILURE_RE.match(stripped)
        if failure:
            blk = block if block is not None else current()
            host = failure.group("host")
            if host and host not in blk.bench.failure_hosts:
                blk.bench.failure_hosts.append(host)
            if blk.bench.failure is None:
                blk.bench.failure = _failure_text(failure)
                blk.bench.failure_source = SourceRef(input_name, lineno, raw.rstrip())
            continue
        if _FAILURE_STACK_RE.match(stripped):
            continue

        # a new test: `# nThread ...` (markdown may have eaten the `#`), rccl `# nThreads: 1 nGpus: 2 ...`
        match = _NTHREAD_RE.search(content)
        if match and content.startswith("nThread"):
            if block is not None and block.has_content:
                block.closed = True
            blk = current()
            blk.has_content = True
            blk.bench.n_threads = int(match.group("nthread"))
            blk.bench.n_gpus_per_thread = int(match.group("ngpus"))
            blk.bench.header_source = SourceRef(input_name, lineno, raw.rstrip())
            continue
        match = _STARTING_RE.search(content)
        if match:
            op = _normalize_op(match.group("op"))
            if match.group("what") == "starting":
                if block is not None and not block.closed and not block.has_content:
                    block.bench.op = op  # same test: only a version line came before
                elif block is None:
                    pending_op = op
                else:
                    if block is not None:
                        block.closed = True
                    pending_op = op
            elif block is not None and block.bench.op is None:
                block.bench.op = op
            continue
        match = _VERSION_RE.search(content)
        if match:
            blk = current()
            if match.group("v2"):
                blk.bench.variant = "rccl-tests"
                blk.bench.version = match.group("v2")
            else:
                blk.bench.variant = blk.bench.variant or "nccl-tests"
                blk.bench.version = match.group("v1")
            continue
        match = TESTS_RANK_RE.match(content if content.startswith("Rank") else stripped)
        if match:
            blk = current()
            blk.has_content = True
            rank = int(match.group("rank"))
            if rank in blk.seen_ranks:
                blk.duplicate_ranks = True
            blk.seen_ranks.add(rank)
            blk.bench.devices.append(NcclTestsDevice(
                rank=rank,
                host=match.group("host"),
                pid=int(match.group("pid")),
                device=int(match.group("dev")),
                bus_id=bus_id_from_tests_header(match.group("bus")),
                name=match.group("name") or None,
                source=SourceRef(input_name, lineno, raw.rstrip()),
            ))
            continue
        if content.startswith("size") and "busbw" in content:
            if block is not None and block.bench.rows:
                block.closed = True  # a second table without its own `# nThread` header
            blk = current()
            blk.has_content = True
            blk.columns = _columns(content)
            blk.bench.columns = list(blk.columns)
            continue
        match = _OOB_RE.search(content)
        if match:
            blk = current()
            blk.has_content = True
            blk.bench.out_of_bounds = int(match.group("n"))
            blk.bench.oob_source = SourceRef(input_name, lineno, raw.rstrip())
            continue
        match = _AVG_RE.search(content)
        if match:
            blk = current()
            blk.has_content = True
            try:
                blk.bench.avg_busbw = float(match.group("v"))
            except ValueError:
                blk.bench.avg_busbw = None
            blk.bench.avg_source = SourceRef(input_name, lineno, raw.rstrip())
            # the footer closes a test; what follows belongs to the next one
            blk.closed = True
            continue
        tokens = stripped.split()
        if tokens and _INT_RE.match(tokens[0]) and len(tokens) >= 5:
            blk = current()
            row = _row(tokens, blk.columns, SourceRef(input_name, lineno, raw.rstrip()))
            if row is None:
                skipped_count += 1
                if len(skipped) < 10:
                    skipped.append(lineno)
                blk.bench.skipped_lines += 1
                continue
            blk.has_content = True
            blk.bench.rows.append(row)
            continue
        if stripped.startswith("#") or stripped in ("...", "…") or stripped.startswith("..."):
            continue
        op = _op_from_command(stripped)
        if op and ("_perf" in stripped):
            # a prompt or launcher line naming the binary: applies to the next test
            if block is not None and block.has_content:
                block.closed = True
            pending_op = op
            command = stripped
            continue
        if tokens and (_NUM_RE.match(tokens[0]) or tokens[0] == "N/A") and len(tokens) >= 4:
            # the tail of a row whose start is on another line (wrapped or cut)
            skipped_count += 1
            if len(skipped) < 10:
                skipped.append(lineno)

    if pending_op and (block is None or block.closed):
        # the command (or `Collective test starting`) of a test whose output is in the next section
        current()
    for blk in blocks:
        bench = blk.bench
        if not (bench.rows or bench.devices or bench.avg_busbw is not None or bench.out_of_bounds is not None
                or bench.op or bench.header_source):
            continue
        shared = _bus_ids_shared_on_a_host(bench.devices)
        if shared:
            result.warnings.append(
                f"the test header gives {len(shared)} GPUs on one host the same PCI bus "
                f"({shared[0].source.text.split('[', 1)[-1].split(']', 1)[0]}): old nccl-tests print only the bus "
                "number, and in a VM every GPU may sit on bus 0; their bus ids are left unknown")
            for device in shared:
                device.bus_id = None
        if bench.devices and not blk.duplicate_ranks:
            bench.nranks = len({d.rank for d in bench.devices})
        elif bench.n_threads and bench.n_gpus_per_thread and not blk.duplicate_ranks and not bench.devices:
            bench.nranks = None
        if blk.duplicate_ranks:
            result.warnings.append(
                "the same rank number appears twice in one test header: several single-process runs were "
                "interleaved (nccl-tests built without MPI=1 but launched with mpirun?); each process tested alone"
            )
            bench.nranks = 1
        if bench.variant is None:
            amd = any(d.name and ("AMD" in d.name or "Radeon" in d.name or "Instinct" in d.name) for d in bench.devices)
            bench.variant = "rccl-tests" if amd else "nccl-tests"
        if bench.failure:
            last = bench.rows[-1].size_bytes if bench.rows else None
            result.warnings.append(
                f"{'the ' + bench.op + ' test' if bench.op else 'nccl-tests'} aborted (line "
                f"{bench.failure_source.line}): {bench.failure}"
                + (f" on {', '.join(bench.failure_hosts)}" if bench.failure_hosts else "")
                + (f"; the table stops after {counted(len(bench.rows), 'size')}, the last {last} bytes" if bench.rows
                   else "; no size finished")
            )
        sizes = [row.size_bytes for row in bench.rows]
        if any(b < a for a, b in zip(sizes, sizes[1:])) and not bench.op == "sendrecv":
            result.warnings.append(
                f"message sizes in the {bench.op or 'test'} table go back down (line "
                f"{next(r.source.line for a, r in zip(bench.rows, bench.rows[1:]) if r.size_bytes < a.size_bytes)}): "
                "two runs' output is interleaved or several tests share one table"
            )
        result.benchmarks.append(bench)
    if skipped_count:
        result.warnings.append(
            f"1 table line could not be read (cut, wrapped or misaligned): line {skipped[0]}" if skipped_count == 1
            else f"{skipped_count} table lines could not be read (cut, wrapped or misaligned); first at lines "
            + ", ".join(str(n) for n in skipped)
        )
    if nccl_lines:
        result.nccl = nccl_log.parse_stream(lines, input_name, first_line=first, command=section.command,
                                            excerpt=getattr(section, "excerpt", ""))
        result.warnings.extend(result.nccl.warnings if result.nccl.runs else [])
    if not result.benchmarks or all(not b.rows and not b.devices and b.avg_busbw is None for b in result.benchmarks):
        if not (len(result.benchmarks) == 1 and result.benchmarks[0].op and not result.benchmarks[0].header_source):
            result.warnings.append("no nccl-tests result table found")
    return result


def _failure_text(match: re.Match) -> str:
    """`Test NCCL failure common.cu:392 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'`: the
    error string, and NCCL's last error after it when it printed one (`'... / <last error>'`)."""
    message = match.group("msg").strip()
    error, _, last = message.partition(" / ")
    error = error.rstrip(" /")
    last = last.strip()
    words = f"{error}: {last}" if last and last != error else error
    return f"{match.group('lib')} error at {match.group('where')}: '{words}'"


def _bus_ids_shared_on_a_host(devices: list[NcclTestsDevice]) -> list[NcclTestsDevice]:
    """Devices of one host whose `[0x00]`-style header (bus number only) names the same bus: such a bus id
    is no GPU's (`0000:00:00.0` is the host bridge), so it must not be kept as one."""
    seen: dict[tuple[str | None, str], list[NcclTestsDevice]] = {}
    for device in devices:
        if device.bus_id and device.source is not None and re.search(r"\[0x[0-9a-fA-F]+\]", device.source.text):
            seen.setdefault((device.host, device.bus_id), []).append(device)
    return [d for group in seen.values() if len({d.device for d in group}) > 1 for d in group]


def _normalize_op(name: str) -> str:
    op = name.strip().rstrip(".")
    if op.endswith("_perf"):
        op = op[: -len("_perf")]
    return op


def _op_from_command(command: str | None) -> str | None:
    if not command:
        return None
    match = _OP_FROM_BINARY_RE.search(command)
    if not match:
        return None
    op = match.group("op")
    for known in _KNOWN_OPS:
        if op.endswith(known):
            return known
    return op


def _columns(content: str) -> list[str]:
    names = []
    for token in content.split():
        token = token.lstrip("#").lower()
        if token == "cputime":
            token = "time"
        names.append(token)
    return names


def _value(token: str) -> float | None:
    cleaned = token.rstrip("*")
    if cleaned in ("N/A", "n/a", "-", "nan", "inf"):
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _measure(time_tok: str, algbw_tok: str, busbw_tok: str, check_tok: str | None, check_name: str | None) -> NcclTestsMeasure:
    wrong: int | None = None
    error: float | None = None
    if check_tok is not None:
        cleaned = check_tok.rstrip("*")
        if check_name == "error" or ("e" in cleaned.lower() and not cleaned.isdigit()):
            error = _value(cleaned)
        elif _INT_RE.match(cleaned):
            wrong = int(cleaned)
    return NcclTestsMeasure(_value(time_tok), _value(algbw_tok), _value(busbw_tok), wrong, error)


def _row(tokens: list[str], columns: list[str] | None, source: SourceRef) -> NcclTestsRow | None:
    if not _INT_RE.match(tokens[0]) or len(tokens) < 5:
        return None
    if columns and "size" in columns:
        if len(tokens) == len(columns):
            return _row_by_header(tokens, columns, source)
        first_time = columns.index("time") if "time" in columns else len(columns)
        if first_time + 3 <= len(tokens) < len(columns):
            # a row cut after its out-of-place columns (a paste that stopped mid-line)
            return _row_by_header(tokens, columns[: len(tokens)], source, cut=True)
    return _row_by_shape(tokens, source)


def _row_by_header(tokens: list[str], columns: list[str], source: SourceRef, cut: bool = False) -> NcclTestsRow | None:
    row = NcclTestsRow(size_bytes=int(tokens[0]), count=None, type=None, source=source)
    groups: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for name, token in zip(columns, tokens):
        if name in ("time", "algbw", "busbw", "wrong", "error"):
            if name == "time" and current:
                groups.append(current)
                current = {}
            current[name] = token
            continue
        if name == "size":
            continue
        if name == "count":
            row.count = int(token) if _INT_RE.match(token) else None
        elif name == "type":
            row.type = token
        elif name == "redop":
            row.redop = token
        elif name == "root":
            row.root = int(token) if _INT_RE.match(token) else None
        else:
            row.extra[name] = token
    if current:
        groups.append(current)
    if not groups or row.type is None:
        return None
    measures = []
    for group in groups:
        check_name = "error" if "error" in group else "wrong"
        measures.append(_measure(group.get("time", ""), group.get("algbw", ""), group.get("busbw", ""),
                                 group.get(check_name), check_name))
    if len(measures) == 1 and not cut:
        row.in_place = measures[0]  # `-O 0` builds print the in-place columns only
    elif len(measures) == 1:
        row.out_of_place = measures[0]
    else:
        row.out_of_place, row.in_place = measures[0], measures[1]
    return row


def _row_by_shape(tokens: list[str], source: SourceRef) -> NcclTestsRow | None:
    """No (matching) header: size count type [redop] [root] then groups of time algbw busbw check."""
    if len(tokens) < 6 or not _INT_RE.match(tokens[1]) or tokens[2] in ("N/A",) or _NUM_RE.match(tokens[2]):
        return None
    row = NcclTestsRow(size_bytes=int(tokens[0]), count=int(tokens[1]), type=tokens[2], source=source)
    rest = tokens[3:]
    if rest and rest[0] in _REDOPS:
        row.redop = rest[0]
        rest = rest[1:]
    if len(rest) % 4 == 1 and rest and _INT_RE.match(rest[0]):
        row.root = int(rest[0])
        rest = rest[1:]
    if len(rest) not in (4, 8) or not all(_NUM_RE.match(t) or t.rstrip("*") in ("N/A",) for t in rest):
        return None
    check_name = "error" if any("e" in t.lower() and not t.rstrip("*").isdigit() for t in rest[3::4]) else "wrong"
    if len(rest) == 8:
        row.out_of_place = _measure(*rest[0:4], check_name)
        row.in_place = _measure(*rest[4:8], check_name)
    else:
        row.in_place = _measure(*rest[0:4], check_name)
    return row
