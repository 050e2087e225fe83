"""The bulk path: a log read as bytes in large chunks, one thread's run of lines at a time.

A chunk is cut into runs of consecutive lines that begin with the same record header (one C-level
regex match per run). In a run long enough the header is stripped and the lines are split with
C-level passes; one `startswith` map tells the `Channel` lines (connections, ring orders) from the
others, a few per rank and communicator, which go in order through the dispatch of the exact path
(decided once per distinct text, `_kind`). The run is cut at the lines that name `comm 0x`, the only
ones that change what the thread is initializing, and at those sent to the exact path; between two
cuts the `Channel` lines are folded with `map(bytes.partition, ...)` into (channel, connIndex)
codes per distinct `src -> dst via` while the thread's state is fixed, then the other lines of the
stretch are read (log-wide facts once per host: reading them again would change nothing).

Anything a fold cannot prove (a line that does not parse, glued records, a transport it does not
know, a bound reached) sends its stretch of lines through the exact path, as do runs with CR, NUL
or non-ASCII bytes, so the result is the same as reading every line.
"""

from __future__ import annotations

from itertools import compress, count, repeat
from operator import itemgetter

from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl.lines import _BATCH_WORDS, _FEW, _UNKNOWN, _UNPARSED, NO_ESC
from k3diag.parse.nccl.state import ConnAgg, channel_code
from k3diag.parse.text import strip_ansi

MIN_BLOCK_LINES = 8  # shorter runs of one header are not worth the set-up: exact path
# a run this long is read in bulk whatever its number of lines: counting them is a pass over its bytes
# (about 5 instructions a byte), and the split that reads it gives the count anyway
LONG_RUN_BYTES = 2048
SHORT_RUNS_BEFORE_SKIP = 32  # an interleaved stretch: stop looking for runs for a while
SKIP_BYTES = 256 << 10
# where init output (the next rank's block) resumes after a stretch of short runs
_INIT_AHEAD = b" NCCL INFO ncclCommInitRank comm "
_HEAD = itemgetter(0)
_REST = itemgetter(2)
_MIDDLE = itemgetter(1)
_SEP = b" : "
_VIA = b" via "
_CHAN = b"Chan"
_OPCOUNT = b": opCount "
_INVALID = -1
_TAG_ACTIONS = {tag[5:]: action for tag, action in P.TAG_ACTIONS.items()}  # by the body's first 4 characters
_TAG_NEEDS = {tag[5:]: need for tag, need in P.TAG_NEEDS.items()}
MAX_KINDS = 20_000
_COMM_STARTS = ("ncclCommInitRank comm 0x", "comm 0x")  # the communicator lines `_info` sends to `_comm`
# `_fold` remembers the plan of a stretch of `Channel` lines up to this many lines, and keeps at most this
# many bytes of lines in all as keys
MAX_PLAN_LINES = 256
MAX_PLANNED_BYTES = 4 << 20
MAX_CODE_SETS = 4096  # distinct sets of (channel, connIndex) codes the plans share
# words the exact path looks for in a whole line, which a launcher prefix could hold: such runs go there
_HEAD_WORDS = tuple(need.encode() for need in P.TAG_NEEDS.values()) + (P.COUNT_TAG_NEEDS.encode(), b" -> ")
# what a line other than a `Channel` line is, by its text alone (cached per distinct text)
_DROPPED, _COLL, _EXACT, _ONCE, _READ, _CUT = "dropped", "coll", "exact", "once", "read", "cut"


def _kind(body: bytes) -> str:
    """The dispatch of `lines._feed_selected` for an INFO line whose header holds none of `_HEAD_WORDS`:
    `_EXACT` lines go there (and, like `_CUT` lines, end the stretch folded before them)."""
    # read as text (a clean block's lines are ASCII): `in` on bytes first tries the word as an integer and
    # clears the TypeError, ~6 times the cost of the same search in a str
    text = body.decode()
    if ": opCount " in text:
        return _COLL
    tag = text[:4]
    action = _TAG_ACTIONS.get(tag)
    if action is None:
        if len(text) < 16 or text.startswith("-> ") or text.find(" -> ", len(text) - 16) >= 0:
            return _EXACT  # an error trace `misc/socket.cc:567 -> 2`, or a line too short to tell
        if not (tag[:1].isdigit() and P.COUNT_TAG_NEEDS in text):
            return _DROPPED
    elif action == 1:
        return _EXACT  # `Ring ...` (2.4-2.6) or a line that only looks like one
    else:
        need = _TAG_NEEDS.get(tag)
        if need is not None and need not in text:
            return _DROPPED
    if "comm 0x" in text:
        return _CUT  # may start, end or adopt a communicator
    if P.read_once(text):
        return _ONCE
    return _READ


class _Codes(dict):
    """Connection head (`Channel 03/1`, `Ring 00`) -> channel_code, parsed on first use; -1 if not one."""

    def __missing__(self, head: bytes) -> int:
        match = P.CONN_HEAD_RE.match(head.decode("ascii", "replace"))
        value = _INVALID
        if match is not None:
            conn = match.group("conn")
            try:
                value = channel_code(int(match.group("ch")), int(conn) if conn is not None else None)
            except ValueError:  # a channel number no int holds: the exact path reads (and skips) the line
                pass
        P.remember(self, head, value, 4096, head)
        return value


class FastFeed:
    """Mixin of `NcclLogParser`: the bytes reader."""

    def feed_bytes(self, chunk: bytes, first_line: int) -> int:
        """Parse a chunk of whole lines (ending in a newline); returns the line number after it."""
        if not hasattr(self, "_codes"):
            self._codes = _Codes()
            self._rest_bytes: dict[bytes, object] = {}
            self._kinds: dict[bytes, str] = {}
            self._plain_prefix: dict[bytes, bool] = {}  # record header -> holds one ` NCCL ` and no `_HEAD_WORDS`
            self._plans: dict[tuple, object] = {}
            self._code_sets: dict[frozenset, frozenset] = {}
            self._plan_bytes = 0
        if b"\x1b" in chunk:
            # colour codes (`grep --color=always`, coloured launcher prefixes) go before anything is read, as
            # on the exact path; no sequence spans a newline, so line numbers stay; undecodable bytes stay
            chunk = strip_ansi(chunk.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        clean = chunk.isascii() and b"\x00" not in chunk and b"\r" not in chunk
        match = P.SAME_PREFIX_RUN_RE.match
        find = chunk.find
        n = len(chunk)
        lineno = first_line
        exact_from = pos = 0
        short = 0
        jumped = False  # the last skip went to the next init line and found no run there: skip far
        while pos < n:
            found = match(chunk, pos)
            if found is None:
                nl = find(b"\n", pos)
                pos = n if nl < 0 else nl + 1
                continue
            end = found.end()
            if end - pos < LONG_RUN_BYTES and chunk.count(b"\n", pos, end) < MIN_BLOCK_LINES:
                pos = end
                short += 1
                if short >= SHORT_RUNS_BEFORE_SKIP:
                    short = 0
                    ahead = -1 if jumped else find(_INIT_AHEAD, pos, pos + SKIP_BYTES)
                    jumped = True
                    if ahead >= 0:
                        pos = max(pos, chunk.rfind(b"\n", pos, ahead) + 1)
                    else:
                        nl = find(b"\n", pos + SKIP_BYTES)
                        pos = n if nl < 0 else nl + 1
                continue
            short = 0
            jumped = False
            if exact_from < pos:
                lineno = self._exact_bytes(chunk[exact_from:pos], lineno)
            lineno = self._block(chunk[pos:end], found.group(1), lineno, clean)
            exact_from = pos = end
        if exact_from < n:
            lineno = self._exact_bytes(chunk[exact_from:], lineno)
        return lineno

    def _exact_bytes(self, data: bytes, lineno: int) -> int:
        text = data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        before = self.lines_total
        # a word absent from the whole text (one C-level search) need not be looked for line by line
        self.feed(lines, lineno, frozenset(word for word in _BATCH_WORDS if word not in text)
                  if len(lines) > _FEW else NO_ESC)  # `feed_bytes` dropped the colour codes
        return lineno + (self.lines_total - before)

    def _block(self, block: bytes, prefix: bytes, lineno: int, clean: bool) -> int:
        """One thread's run of lines, all beginning with `prefix` (`... NCCL INFO `)."""
        plain = self._plain_prefix.get(prefix)
        if plain is None:  # a thread's header recurs on each of its runs: checked once
            plain = prefix.count(b" NCCL ") == 1 and not any(map(prefix.__contains__, _HEAD_WORDS))
            P.remember(self._plain_prefix, prefix, plain, P.MAX_PREFIX_CACHE, prefix)
        if not plain or (not clean and (not block.isascii() or b"\x00" in block or b"\r" in block)):
            return self._exact_bytes(block, lineno)
        # every line begins with the prefix: cut at each line end followed by it, so the prefix goes at
        # the line starts only (a glued record of the same thread inside a line stays as it is), with no
        # copy of the block made first
        lines = block.split(b"\n" + prefix)
        nlines = len(lines)  # no line holds a newline: one piece per line, the last ending with one
        lines[0] = lines[0][len(prefix):]
        lines[-1] = lines[-1][:-1]  # the block ends with a newline
        lines.append(b"")  # sentinel
        chan = list(map(bytes.startswith, lines, repeat(_CHAN)))
        pre = prefix[:-11].decode()
        head = prefix.decode()
        thread = self.prefix_cache.get(pre) or self._thread(pre)
        # the other lines (a few per rank and communicator), by a C-level scan for False
        others = []
        index = chan.index(False)
        while index < nlines:
            others.append(index)
            index = chan.index(False, index + 1)
        first = 0
        while first < nlines and lines[first].find(_OPCOUNT) >= 0:  # (`find`: see `_kind`)
            first += 1
        if first < nlines:
            body = lines[first]
            if (chan[first] or body[:4] == b"Ring") and body.find(_VIA) >= 0 and body.find(b"  ") >= 0:
                # records glued on that line: the exact path splits them and quotes the first alone as
                # where the host was seen (rare: a terminal's wrap), so it reads this block
                return self._exact_bytes(block, lineno)
            # the host of this thread, named first on the block's first line that is not a COLL line (the
            # line's text is made only for a host not seen yet)
            if thread.host not in self.hosts_seen:
                self._host_seen(thread, lineno + first, head + body.decode())
        bodies = list(map(lines.__getitem__, others))
        kinds = list(map(self._kinds.get, bodies))
        if None in kinds:
            for j, kind in enumerate(kinds):
                if kind is None:
                    kinds[j] = self._kind_of(bodies[j])
        counted = 0  # lines counted here (the exact path counts those it reads)
        start = 0  # the current stretch: lines [start, cut) with no state change in between
        facts: list[tuple] = []  # its lines to read once its `Channel` lines are folded
        skipped = dropped = 0  # its other lines: left out (COLL), counted only
        for index, body, kind in zip(others, bodies, kinds):
            if kind is _DROPPED:
                dropped += 1
            elif kind is _COLL:
                skipped += 1
            elif kind is _READ or kind is _ONCE:
                facts.append((index, body, kind))
            else:  # a line that may change what the thread is initializing, or one for the exact path
                if facts or index - start > skipped + dropped:
                    counted += self._stretch(thread, head, pre, lines, chan, start, index,
                                             skipped + dropped + len(facts), dropped, facts, lineno)
                    facts = []
                else:
                    counted += dropped  # nothing to fold or read there
                skipped = dropped = 0
                if kind is _CUT:
                    counted += 1
                    self._read(body, head, pre, lineno + index)
                else:
                    self._feed_selected(((lineno + index, head + body.decode()),))
                start = index + 1
        counted += self._stretch(thread, head, pre, lines, chan, start, nlines, skipped + dropped + len(facts),
                                 dropped, facts, lineno)
        self.lines_nccl += counted
        self.lines_total += nlines
        return lineno + nlines

    def _kind_of(self, body: bytes) -> str:
        kind = _kind(body)
        if kind is not _CUT:  # a communicator line names its own pointer: its text does not recur
            P.remember(self._kinds, body, kind, MAX_KINDS, body)
        return kind

    def _stretch(self, thread, head: str, pre: str, lines: list[bytes], chan: list[bool], start: int, end: int,
                 n_others: int, dropped: int, facts: list[tuple], lineno: int) -> int:
        """Lines [start, end) of one thread, no state change in between: fold the `Channel` lines, then
        read the `facts`; or all of them through the exact path. Returns the lines counted here."""
        n_conn = end - start - n_others
        if n_conn > 0:
            conn = list(compress(lines[start:end], chan[start:end])) if n_others else lines[start:end]
            if not self._fold(thread, head, conn, start, end, chan, lineno):
                # ring orders (`Channel 00/16 :   0   1 ...`, no ` via `) are read like the facts
                # ` via ` or nothing, for each line (`partition` takes its argument as is: see `_kind`)
                with_via = list(map(_MIDDLE, map(bytes.partition, conn, repeat(_VIA))))
                if all(with_via):
                    self._fold_exact(lines, head, start, end, lineno)
                    return 0
                positions = list(compress(range(start, end), chan[start:end])) if n_others else range(start, end)
                rings = [(i, lines[i], _READ) for i, via in zip(positions, with_via) if not via]
                if any(body.find(_OPCOUNT) >= 0 for _, body, _ in rings) or (any(with_via) and not self._fold(
                        thread, head, list(compress(conn, with_via)), start, end, chan, lineno, with_via)):
                    self._fold_exact(lines, head, start, end, lineno)
                    return 0
                n_conn -= len(rings)
                facts = sorted(facts + rings) if facts else rings
        counted = n_conn + dropped
        once = self.once_read  # the exact path's memo too (keyed there by text, here by bytes)
        host = thread.host
        for index, body, kind in facts:
            if kind is _ONCE:
                key = (host, body)
                if key in once:
                    counted += 1
                    continue  # read before for this thread's host: nothing would change
                P.remember(once, key, True, P.MAX_ONCE, body)
            counted += 1
            self._read(body, head, pre, lineno + index)
        return counted

    def _read(self, body: bytes, head: str, pre: str, lineno: int) -> None:
        text = body.decode()
        try:
            if text.startswith(_COMM_STARTS):
                # what `_info` does with such a line (no other branch before it takes one): straight there
                self._comm(head + text, text.rstrip(), pre, lineno)
                return
            # what `_record` does for an INFO line, less the counting and host (done for the block)
            self._info(head + text, text.rstrip(), pre, lineno)
        except ValueError:  # a number no int holds: skipped and counted, as on the exact path
            self._skip(lineno)

    def _fold(self, thread, head: str, conn: list[bytes], start: int, end: int, chan: list[bool], lineno: int,
              among: list[bool] | None = None) -> bool:
        """Fold the `Channel` lines `conn` of lines [start, end) (those of them marked in `among`, when
        given); False (and nothing changed) if the exact path must read them."""
        # The same stretch of lines recurs, prefix aside: every job on a cluster, every tensor-parallel group
        # of a job (local ranks print the same peers). Its plan is made once per distinct stretch.
        if len(conn) > MAX_PLAN_LINES:
            plan = self._plan(conn)  # an all-to-all's thousands of lines: too big to keep, unlikely to recur
        else:
            plans = self._plans
            stretch = tuple(conn)
            plan = plans.get(stretch)
            if plan is None:
                plan = self._plan(conn)
                # bounded by the bytes the keys hold, so the memory does not depend on the log; a line longer
                # than any cache keeps (`patterns.MAX_CACHED_TEXT`) is not one that recurs
                if max(map(len, conn)) <= P.MAX_CACHED_TEXT:
                    size = sum(map(len, conn))
                    self._plan_bytes += size
                    if self._plan_bytes > MAX_PLANNED_BYTES:
                        plans.clear()
                        self._plan_bytes = size
                    plans[stretch] = plan
        if plan is False:
            return False
        inst = thread.current
        target = inst.conns if inst is not None else thread.pending
        if len(target) + len(plan) > P.MAX_CONN_KEYS_PER_INSTANCE:
            return False  # the bound decides which keys are kept: line by line
        numbers = None
        for first, group_codes, parsed in plan:
            key = parsed[0]
            agg = target.get(key)
            if agg is None:
                if numbers is None:  # line number of the k-th `Channel` line of the stretch
                    numbers = list(compress(range(start, end), chan[start:end])) if len(conn) != end - start \
                        else range(start, end)
                    if among is not None:
                        numbers = list(compress(numbers, among))
                line = conn[first]
                src, dst, via, direction = key
                # the plan's frozenset, shared (`ConnAgg.codes`)
                target[key] = ConnAgg("Ring" if line[:4] == b"Ring" else "Channel", src, dst, parsed[1],
                                      parsed[2], direction, via, parsed[3], parsed[4], lineno + numbers[first],
                                      head + line.decode(), group_codes)
            elif agg.codes.__class__ is frozenset:
                if not group_codes <= agg.codes:
                    agg.codes = agg.codes | group_codes
            else:
                agg.codes.update(group_codes)
        return True

    def _plan(self, conn: list[bytes]) -> "tuple | bool":
        """What folding the lines `conn` does, whatever thread printed them: per distinct text after
        ` : ` (in the order first seen), its first line's index, the (channel, connIndex) codes of its
        lines and the parsed connection; False if the exact path must read them."""
        parts = list(map(bytes.partition, conn, repeat(_SEP)))
        codes = list(map(self._codes.__getitem__, map(_HEAD, parts)))
        if _INVALID in codes:
            return False
        rest_list = list(map(_REST, parts))
        first_rest = rest_list[0]
        if rest_list.count(first_rest) == len(rest_list):
            groups = {first_rest: [0, codes]}
        else:
            groups = {}
            for index, rest, code in zip(count(), rest_list, codes):
                group = groups.get(rest)
                if group is None:
                    groups[rest] = [index, [code]]
                else:
                    group[1].append(code)
        cache = self._rest_bytes
        plan = []
        for rest, (first, group_codes) in groups.items():
            parsed = cache.get(rest)
            if parsed is None:
                parsed = self.parse_rest(rest.decode())
                if parsed is _UNPARSED or parsed is _UNKNOWN or b"  " in rest or not rest[:1].isdigit() \
                        or _OPCOUNT in rest:
                    parsed = _UNPARSED  # for the exact path to read (and count) line by line
                P.remember(cache, rest, parsed, P.MAX_REST_CACHE, rest)
            if parsed is _UNPARSED:
                return False
            # one frozenset per distinct set of codes, whatever plan holds it: the plans of a job's ranks differ
            # in their peers, not in their channels (8,192 ranks made ~37,000 equal sets, ~12 MB)
            codes = frozenset(group_codes)
            shared = self._code_sets.get(codes)
            if shared is None:
                if len(self._code_sets) >= MAX_CODE_SETS:
                    self._code_sets.clear()
                shared = self._code_sets[codes] = codes
            plan.append((first, shared, parsed))
        return tuple(plan)

    def _fold_exact(self, lines: list[bytes], head: str, start: int, end: int, lineno: int) -> None:
        self._feed_selected((lineno + i, head + lines[i].decode()) for i in range(start, end)
                            if _OPCOUNT not in lines[i])
