"""How far each communicator's init got (`model.nccl_init`): stuck ranks, ranks never seen, `Init timings`.

Stuck ranks are read off the instances a run is built from (started, no `Init COMPLETE`, not destroyed). Two
things need the text again and are done only when a run has a stuck rank, after the last line (nothing is added
to the per-line paths): the last NCCL line of each stuck rank's process (its record header searched from the
end), and whether the text is visibly cut (a truncation mark such as `...` or `[truncated]` on a line of its
own). Both paths (lines and bytes) search the same way, so they give the same result.
"""

from __future__ import annotations

import re

from k3diag.model.nccl_init import INIT_PHASES, NcclInitState, NcclInitTiming, NcclInitTimings, NcclStuckRank
from k3diag.model.source import source_ref
from k3diag.parse.nccl import patterns as P
from k3diag.parse.text import strip_ansi

MAX_STUCK_EXAMPLES = 8  # stuck ranks quoted per communicator (the rest counted)
MAX_MISSING_LISTED = 64  # ranks never seen, listed per communicator (the rest counted)
# `Init timings` kept per communicator, slowest first: three say whether the slowest rank is alone (one waiting
# host) or one of several; each holds its line, so 8 of each of 4,096 communicators cost ~45 MB of peak RSS
MAX_SLOWEST = 3
# A file is searched again whole up to this size; past it, only its last this many bytes are (as bytes and as
# text, twice this in memory on top of the parse's state, which keeps a big log's peak RSS under 200 MB): a
# stuck rank's last line is usually near the end, and one that is not keeps its start line as the evidence.
MAX_REREAD_BYTES = 16 << 20
# Texts up to this size are searched for a truncation mark: a paste someone cut by hand is small, and each word
# of `_MARK_WORDS` is one pass over the text (about 1 ms a MiB each)
MAX_MARKED_CHARS = 8 << 20
MAX_TIMING_KEYS = 4_096  # communicators (or, unattributed, ranks) whose timings are kept
# A whole job's log shows 15 or more NCCL lines per rank for its init (version, Bootstrap, NET, comm lines,
# channels, connections, Init COMPLETE); a text with fewer NCCL lines than this is a quote, not a job's log.
FEW_NCCL_LINES = 20
# `Init timings - ncclCommInitRank: rank 0 nranks 8 total 1.52 (kernels 0.19, alloc 0.04, bootstrap 0.04, ...)`
INIT_TIMINGS_RE = re.compile(r"^Init timings - (?P<api>\w+): rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
                             r"total (?P<total>[\d.]+)(?: \((?P<phases>[^)]*)\))?")
_PHASE_RE = re.compile(r"(?P<name>[a-z]+) (?P<value>[\d.]+)")
_PHASES: dict[str, dict[str, float]] = {}  # phases text -> its phases, parsed once
# a line of its own that says the text was cut: `...`, `…`, `[...]`, `<truncated>`, `(snip)`, `... 1234 more lines`
TRUNCATION_RE = re.compile(
    r"^[ \t>|#*\[(<-]*(?:\.{3,}|…+|\[\.{3}\]|\(\.{3}\)|<\.{3}>|[\[(<]?(?:truncated|snip|snipped|omitted|cut)[\])>]?"
    r"|.{0,40}\b\d[\d,]* (?:more )?(?:lines?|rows?) (?:omitted|truncated|skipped|hidden|not shown)\b.{0,40}"
    r"|\.{3}.{0,40}\b(?:truncated|omitted|more lines)\b.{0,40})[ \t.]*\r?$", re.IGNORECASE | re.MULTILINE)


# -- stuck ranks -----------------------------------------------------------------------------------


def is_stuck(inst) -> bool:
    """A rank that started its init (a communicator line naming its rank) and printed no `Init COMPLETE`."""
    return inst.ptr is not None and inst.rank is not None and not inst.complete and not inst.ended


def init_state(insts: list, nranks: int | None) -> NcclInitState | None:
    """What the instances of one communicator show of its init; None when no rank printed an init line."""
    started: dict[int, object] = {}
    completed: set[int] = set()
    for inst in insts:
        if inst.ptr is None or inst.rank is None or (inst.ended and not inst.complete):
            continue
        if inst.complete:
            completed.add(inst.rank)
        known = started.get(inst.rank)
        if known is None or (inst.complete and not known.complete):
            started[inst.rank] = inst
    if not started:
        return None
    stuck = sorted((inst for rank, inst in started.items() if rank not in completed), key=lambda i: i.rank)
    state = NcclInitState(nranks=nranks, started=len(started), completed=len(completed), stuck_total=len(stuck))
    state.stuck = [NcclStuckRank(inst.rank, inst.host, inst.pid, inst.source) for inst in stuck[:MAX_STUCK_EXAMPLES]]
    if nranks:
        missing = [rank for rank in range(nranks) if rank not in started] if nranks <= 1 << 20 else []
        state.missing_total = len(missing)
        state.missing = missing[:MAX_MISSING_LISTED]
    return state


def settle(result, lines: list[str] | None = None, data=None, first_line: int = 1, excerpt: str = "",
           whole: bool = True) -> None:
    """For the runs with a stuck rank: the last line of each stuck rank's process, and whether the log is
    visibly cut. `lines` (the text's lines, numbered from `first_line`) or `data` (the whole text as bytes)
    give the text again (with `whole` False, `data` is only the tail of a file: no truncation mark is looked
    for); with neither, the start lines stay the only evidence."""
    runs = [run for run in result.runs if run.init is not None and run.init.stuck_total]
    if not runs:
        return
    # one text for both paths (line endings as the bytes path splits them), searched at C speed
    if lines is not None:
        text: str | None = "\n".join(line[:-1] if line.endswith("\n") else line for line in lines)
    else:
        text = _text_of(data) if data is not None else None
    why = excerpt
    if not why and result.lines_nccl < FEW_NCCL_LINES:
        why = f"the text holds only {result.lines_nccl} NCCL lines, fewer than a whole job's init prints"
    if not why and whole and text is not None and len(text) <= MAX_MARKED_CHARS:  # (a tail is not a paste)
        mark = _truncation_mark(text, first_line)
        if mark:
            why = f"line {mark[0]} (`{mark[1]}`) marks the text as cut"
    for run in runs:
        run.init.excerpt, run.init.excerpt_why = bool(why), why
        for stuck in run.init.stuck:
            if stuck.host is None or text is None:
                continue
            found = _last_line(stuck.host, stuck.pid, text, first_line)
            if found is not None:
                stuck.last = source_ref(result.input_name, found[0], found[1])


def settle_file(result, path) -> object:
    """`settle` for a log file (read again only when a run has a stuck rank: the whole file up to
    `MAX_REREAD_BYTES`, else its last `MAX_REREAD_BYTES`, numbered from where they start); returns the result."""
    if not any(run.init is not None and run.init.stuck_total for run in result.runs):
        return result
    data, first_line, whole = None, 1, True
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            start = max(0, size - MAX_REREAD_BYTES)
            if start:
                whole = False
                newlines = _count_newlines(handle, start)
                handle.seek(start - 1)
                data = handle.read(MAX_REREAD_BYTES + 1)
                # from the first whole line of the tail on (the line holding `start` is cut)
                cut = 1 if data[:1] == b"\n" else data.find(b"\n") + 1
                first_line = 1 + newlines + (0 if cut == 1 else 1)
                data = data[cut:] if cut > 0 else b""
            else:
                handle.seek(0)
                data = handle.read(MAX_REREAD_BYTES + 1)
    except OSError:
        data = None
    settle(result, data=data, first_line=first_line, whole=whole)
    return result


def _count_newlines(handle, end: int) -> int:
    """Newlines in the file's first `end` bytes, a chunk at a time (bounded memory)."""
    handle.seek(0)
    total, left = 0, end
    while left > 0:
        chunk = handle.read(min(8 << 20, left))
        if not chunk:
            break
        total += chunk.count(b"\n")
        left -= len(chunk)
    return total


# the words a truncation mark holds, in the cases people type them: candidate lines are found with `str.find`
_MARK_WORDS = tuple(dict.fromkeys(variant for word in ("...", "…", "truncat", "snip", "omit", "cut", "more line",
                                                         "more row", "skipped", "hidden", "not shown")
                                  for variant in (word, word.capitalize(), word.upper())))


def _truncation_mark(text: str, first_line: int) -> tuple[int, str] | None:
    """The first short line of its own that says the text was cut (`TRUNCATION_RE`)."""
    best: tuple[int, str] | None = None
    for word in _MARK_WORDS:
        position = 0
        while True:
            at = text.find(word, position, best[0] if best is not None else len(text))
            if at < 0:
                break
            start = text.rfind("\n", 0, at) + 1
            stop = text.find("\n", at)
            stop = len(text) if stop < 0 else stop
            line = text[start:stop]
            if len(line.rstrip("\r")) < 120 and TRUNCATION_RE.match(line):
                best = (start, line.strip())
                break
            position = stop + 1
    if best is None:
        return None
    return first_line + text.count("\n", 0, best[0]), best[1]


def _text_of(data) -> str:
    """The bytes as the fast path reads them (UTF-8, bad bytes replaced)."""
    return bytes(data).decode("utf-8", errors="replace") if not isinstance(data, str) else data


def _header_matches(line: str, host: str, pid: int | None) -> bool:
    """Whether `line` is an NCCL record printed by that process (its header right before ` NCCL `)."""
    k = line.find(P.MARK)
    if k <= 0:
        return False
    pre = line[:k][-P.MAX_HEADER_CHARS:]
    found = P.PREFIX_RE.search(pre) if pid is not None else P.PREFIX_NOPID_RE.search(pre)
    return found is not None and found.group("host") == host and (pid is None or int(found.group("pid")) == pid)


def _last_line(host: str, pid: int | None, text: str, first_line: int) -> tuple[int, str] | None:
    """The last NCCL record of that process: its header searched from the end of the text."""
    needle = f"{host}:{pid}:" if pid is not None else f"{host} ["
    end = len(text)
    while True:
        at = text.rfind(needle, 0, end)
        if at < 0:
            return None
        start = text.rfind("\n", 0, at) + 1
        stop = text.find("\n", at)
        line = text[start: stop if stop >= 0 else len(text)]
        clean = strip_ansi(line) if "\x1b" in line else line
        if _header_matches(clean, host, pid):
            return first_line + text.count("\n", 0, start), _quoted(clean)
        end = start


def _quoted(line: str) -> str:
    text = line.rstrip("\r\n")
    return text[:2000] + "..." if len(text) > 2000 else text


# -- Init timings ----------------------------------------------------------------------------------


def read_init_timings(parser, thread, raw: str, body: str, lineno: int) -> None:
    """One `Init timings` line, kept with the communicator its thread just completed (else with its rank).

    Every line is counted; the record (its phases, its quoted line) is built only for one among the
    `MAX_SLOWEST` slowest so far: a big log has one such line per rank and communicator, and building
    each was ~14% of its parse."""
    match = INIT_TIMINGS_RE.match(body)
    if match is None:
        return
    phases_text = match.group("phases") or ""
    phases = _PHASES.get(phases_text)  # the same breakdown recurs across ranks and jobs
    try:
        total = float(match.group("total"))
        if phases is None:
            phases = {m.group("name"): float(m.group("value")) for m in _PHASE_RE.finditer(phases_text)
                      if m.group("name") in INIT_PHASES}
            P.remember(_PHASES, phases_text, phases, 4096, phases_text)
    except ValueError:
        parser._skip(lineno)
        return
    rank, nranks = int(match.group("rank")), int(match.group("nranks"))
    key = thread.done or ("rank", thread.host, thread.pid, rank, nranks)
    table = parser.init_timings
    entry = table.get(key)
    if entry is None:
        if not parser._room(table, MAX_TIMING_KEYS, "init_timings"):
            return
        entry = table[key] = NcclInitTimings()
    slowest = entry.slowest
    if len(slowest) >= MAX_SLOWEST:
        last = slowest[-1]
        last_line = last.source.line if last.source and last.source.line else 0
        if total < last.total or (total == last.total and lineno >= last_line):
            # not among the slowest (ties stay in line order): counted, as `add_timing` would
            entry.ranks_timed += 1
            if entry.fastest_total is None or total < entry.fastest_total:
                entry.fastest_total = total
            return
    add_timing(entry, NcclInitTiming(rank, nranks, match.group("api"), total, dict(phases), thread.host,
                                     thread.pid, parser._source(lineno, raw)))


def add_timing(entry: NcclInitTimings, timing: NcclInitTiming, count: int = 1) -> None:
    entry.ranks_timed += count
    if entry.fastest_total is None or timing.total < entry.fastest_total:
        entry.fastest_total = timing.total
    slowest = entry.slowest
    slowest.append(timing)
    # slowest first; ties in line order, so every path keeps the same ones
    slowest.sort(key=lambda t: (-t.total, t.source.line if t.source and t.source.line else 0))
    del slowest[MAX_SLOWEST:]


def merge_init_timings(a, b) -> None:
    """Part `b`'s timings folded into `a` (a file read in parts): what one pass would have kept."""
    for key, theirs in b.init_timings.items():
        mine = a.init_timings.get(key)
        if mine is None:
            if not a._room(a.init_timings, MAX_TIMING_KEYS, "init_timings"):
                continue
            mine = a.init_timings[key] = NcclInitTimings()
        fastest = theirs.fastest_total
        for timing in theirs.slowest:
            add_timing(mine, timing, 0)
        mine.ranks_timed += theirs.ranks_timed
        if fastest is not None and (mine.fastest_total is None or fastest < mine.fastest_total):
            mine.fastest_total = fastest


def timings_of(parser, key: str, run) -> NcclInitTimings | None:
    """The `Init timings` of a run: those kept under its key, with those kept under its ranks (a line whose
    thread had not been seen completing: read right after a cut of the file, or its thread forgotten)."""
    table = parser.init_timings
    if not table:
        return None
    found = [table[key]] if key in table else []
    found.extend(table[k] for k in (("rank", info.host, info.pid, info.rank, run.nranks) for info in run.ranks)
                 if k in table)
    if len(found) <= 1:
        return found[0] if found else None
    entry = NcclInitTimings()
    for part in found:
        for timing in part.slowest:
            add_timing(entry, timing, 0)
        entry.ranks_timed += part.ranks_timed
        if part.fastest_total is not None and (entry.fastest_total is None or part.fastest_total < entry.fastest_total):
            entry.fastest_total = part.fastest_total
    return entry


def done_key(inst) -> str | None:
    """The key of the run an instance belongs to (`runs._group_key`), for the `Init timings` line after it."""
    if inst.comm_id:
        return "id:" + inst.comm_id
    return f"nranks:{inst.nranks}" if inst.nranks is not None else None
