"""The exact path: lines one by one, for any log (interleaved ranks, prefixes, CRLF, junk).

Lines are narrowed in batches by C-level filters (map/compress over `str.find`) so only lines that
name NCCL/RCCL reach Python code; each is classified once by the 9 characters after ` NCCL `,
connection lines are folded into their instance's `ConnAgg`, the rest go to one handler each.
"""

from __future__ import annotations

from itertools import compress, count, islice, repeat
from operator import and_, contains, not_, or_
from typing import Iterable

from k3diag.model.nccl import transport_of
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl.state import ConnAgg, Thread, channel_code
from k3diag.parse.text import strip_ansi

_UNPARSED = "unparsed"
_FEW = 8  # up to this many lines, `feed` reads them one by one (`_feed_few`)
# what a line outside any NCCL record may hold and still be read (`_other`: NULs, bad bytes, SHM paths)
_ODD_WORDS = ("\x00", "\ufffd", "/dev/shm")
# words `feed` looks for in every line, which a caller can rule out for a whole text at once
# ESC: a log saved from a coloured terminal (`grep --color=always`, a launcher's coloured prefixes)
_ESC = "\x1b"
_BATCH_WORDS = ("Pid", ": opCount ", _ESC) + _ODD_WORDS
NO_ESC = frozenset((_ESC,))  # `absent` for text whose colour codes were dropped already (`FastFeed.feed_bytes`)
_UNKNOWN = "unknown"


class LineFeed:
    """Mixin of `NcclLogParser`: the per-line reader and the connection-line folding."""

    def feed(self, lines: Iterable[str], first_line: int, absent: frozenset[str] = frozenset()) -> None:
        """Read lines (with or without their endings) numbered from `first_line`. `absent`: words of
        `_BATCH_WORDS` the caller knows no line holds (it searched their whole text once), whose
        per-line passes are then left out."""
        if lines.__class__ is list and len(lines) <= _FEW:
            if _ESC not in absent:
                lines = [strip_ansi(raw) if _ESC in raw else raw for raw in lines]
            self._feed_few(lines, first_line)
            return
        iterator = iter(lines)
        base = first_line
        check_pid = "Pid" not in absent
        check_coll = ": opCount " not in absent
        check_esc = _ESC not in absent
        odd_words = [word for word in _ODD_WORDS if word not in absent]
        while True:
            batch = list(islice(iterator, P.BATCH))
            if not batch:
                break
            if check_esc and any(map(contains, batch, repeat(_ESC))):
                # colour codes around single words would hide them from every pattern: the lines are read,
                # and quoted, without them (as `SourceRef.text` promises)
                batch = [strip_ansi(raw) if _ESC in raw else raw for raw in batch]
            mask = map(contains, batch, repeat("CCL"))
            if check_pid:
                mask = map(or_, mask, map(contains, batch, repeat("Pid")))
            if check_coll:
                mask = map(and_, mask, map(not_, map(contains, batch, repeat(": opCount "))))
            self._feed_selected(compress(zip(count(base), batch), mask))
            if any(any(map(contains, batch, repeat(word))) for word in odd_words):
                self._feed_odd(batch, base)
            base += len(batch)
        self.lines_total += base - first_line

    def _feed_few(self, lines: list[str], first_line: int) -> None:
        """`feed` for a handful of lines (a main thread's two lines between two ranks' init blocks):
        the same filters line by line, without the batch's fixed cost of a dozen C-level passes."""
        self._feed_selected([(first_line + offset, raw) for offset, raw in enumerate(lines)
                             if ("CCL" in raw or "Pid" in raw) and ": opCount " not in raw])
        self._feed_odd(lines, first_line)
        self.lines_total += len(lines)

    def _feed_odd(self, lines: list[str], first_line: int) -> None:
        """The lines outside any NCCL record that hold one of `_ODD_WORDS`, read by `_other`."""
        for offset, raw in enumerate(lines):
            if "CCL" not in raw and "Pid" not in raw and ("\x00" in raw or "\ufffd" in raw or "/dev/shm" in raw):
                try:
                    self._other(raw, first_line + offset)
                except ValueError:  # see `_feed_selected`
                    self._skip(first_line + offset)

    def _feed_selected(self, numbered: Iterable[tuple[int, str]]) -> None:
        mark = P.MARK
        threads_get = self.prefix_cache.get
        actions = P.TAG_ACTIONS
        record = self._record
        host_seen = self._host_seen
        hosts = self.hosts_seen  # `_host_seen` is called only for a thread whose host is not there yet
        conn_line = self._conn_line
        note_host = self._note_host
        head_codes = self.head_cache.get
        rests = self.rest_cache.get
        tails = self.conn_tails
        tail_of = tails.get
        dropped = 0
        for lineno, raw in numbered:
            try:
                # one `partition` (its argument taken as is) rather than `find` and two slices: `find` parses its
                # optional arguments from a format string on every call
                pre, marked, rest = raw.partition(mark)
                if marked:
                    known = tail_of(rest)
                    if known is not None:
                        # a connection line whose text (after its mark) was read before: only its thread is new
                        thread = threads_get(pre)
                        if thread is not None:
                            dropped += 1
                            if thread.host not in hosts:
                                host_seen(thread, lineno, raw)
                            inst = thread.current
                            agg = (inst.conns if inst is not None else thread.pending).get(known[1])
                            if agg is not None:
                                try:
                                    agg.codes.add(known[0])
                                except AttributeError:  # a frozenset the bulk path shares (`ConnAgg.codes`)
                                    agg.codes = agg.codes | {known[0]}
                            else:
                                conn_line(thread, rest[5:], raw, lineno)
                            continue
                else:
                    if raw.startswith("NCCL INFO ") or raw.startswith("NCCL WARN "):
                        record(" " + raw, 0, lineno)  # a record whose prefix was lost (wrapped terminal, cut paste)
                    else:
                        self._other(raw, lineno)
                    continue
                tag = rest[:9]
                action = actions.get(tag)
                if action == 1:
                    body = rest[5:]
                    if " via " in body:
                        thread = threads_get(pre)
                        if thread is None:
                            thread = self._thread(pre)
                        if "  " in body:
                            # several records glued on one line (terminal wrap), or trailing blanks
                            self._split_and_feed(raw, lineno)
                            continue
                        dropped += 1  # counted with the dropped lines: an NCCL line either way
                        if thread.host not in hosts:
                            host_seen(thread, lineno, raw)
                        # most lines repeat a known head and rest for a key the instance has: one more code
                        head, _, conn_rest = body.partition(" : ")
                        code = head_codes(head)
                        if code is not None:
                            parsed = rests(conn_rest)
                            if parsed.__class__ is tuple:
                                inst = thread.current
                                P.remember(tails, rest, (code[1], parsed[0]), P.MAX_REST_CACHE, rest)
                                agg = (inst.conns if inst is not None else thread.pending).get(parsed[0])
                                if agg is not None:
                                    try:
                                        agg.codes.add(code[1])
                                    except AttributeError:  # a frozenset the bulk path shares
                                        agg.codes = agg.codes | {code[1]}
                                    continue
                        conn_line(thread, body, raw, lineno)
                        continue
                    record(raw, len(pre), lineno)
                    continue
                if action is None:
                    # WARN, version, garbled records; an error trace `misc/socket.cc:567 -> 2`; a count line
                    wanted = not tag.startswith("INFO") or raw.find(" -> ", len(raw) - 16) >= 0 \
                        or (tag[5:6].isdigit() and P.COUNT_TAG_NEEDS in raw)
                else:
                    need = P.TAG_NEEDS.get(tag)
                    wanted = need is None or need in raw
                if wanted:
                    record(raw, len(pre), lineno)
                else:
                    dropped += 1
                    thread = threads_get(pre)
                    if thread is None or thread.host not in hosts:
                        note_host(raw, len(pre), lineno)
            except ValueError:
                # a number no int holds (a run of over 4,300 digits: a damaged or glued line): this line is
                # skipped and counted, the log read on (it ended the whole log's reading)
                self._skip(lineno)
        self.lines_nccl += dropped

    def _note_host(self, raw: str, k: int, lineno: int) -> None:
        """A line counted but not read (`raw[:k]` is its record prefix): its host is still where it was seen."""
        pre = raw[:k]
        thread = self.prefix_cache.get(pre) or self._thread(pre)
        if thread.host not in self.hosts_seen:
            self._host_seen(thread, lineno, raw)

    def _conn_line(self, thread: Thread, body: str, raw: str, lineno: int) -> None:
        """Fold one connection line into the instance its thread is initializing (or its pending lines)."""
        head, sep, rest = body.partition(" : ")
        code = self.head_cache.get(head)
        if code is None:
            match = P.CONN_HEAD_RE.match(head)
            if not sep or not match:
                self._skip(lineno)
                return
            conn = match.group("conn")
            code = (match.group("kind"), channel_code(int(match.group("ch")), int(conn) if conn is not None else None))
            P.remember(self.head_cache, head, code, 4096, head)
        parsed = self.parse_rest(rest)
        if parsed is _UNPARSED:
            self._skip(lineno)
            return
        if parsed is _UNKNOWN:
            self.unknown_conn += 1
            return
        inst = thread.current
        target = inst.conns if inst is not None else thread.pending
        key = parsed[0]
        agg = target.get(key)
        if agg is None:
            if len(target) >= P.MAX_CONN_KEYS_PER_INSTANCE:
                self.not_kept["connection_lines"] += 1
                return
            src, dst, via, direction = key
            agg = target[key] = ConnAgg(code[0], src, dst, parsed[1], parsed[2], direction, via, parsed[3], parsed[4],
                                        lineno, raw.rstrip("\r\n"))
        try:
            agg.codes.add(code[1])
        except AttributeError:  # a frozenset the bulk path shares (`ConnAgg.codes`)
            agg.codes = agg.codes | {code[1]}

    def parse_rest(self, rest: str):
        """`0[0] -> 1[1] [send] via P2P/IPC comm 0x.. nRanks 08` -> (key, sb, db, transport, nranks)."""
        parsed = self.rest_cache.get(rest)
        if parsed is not None:
            return parsed
        match = P.CONN_REST_RE.match(rest)
        if not match:
            parsed = _UNPARSED
        else:
            via = match.group("via").strip()
            transport = transport_of(via)
            if transport is None:
                parsed = _UNKNOWN
            else:
                nr = match.group("nr")
                if nr:
                    self.rccl_hints += 1  # only RCCL appends `comm 0x.. nRanks NN` to connection lines
                try:
                    key = (int(match.group("src")), int(match.group("dst")), via, match.group("dir"))
                    parsed = (key, match.group("sb").strip(), match.group("db").strip(), transport,
                              int(nr) if nr else None)
                except ValueError:  # a rank of thousands of digits: no connection line NCCL prints
                    parsed = _UNPARSED
        P.remember(self.rest_cache, rest, parsed, P.MAX_REST_CACHE, rest)
        return parsed

    def _split_and_feed(self, raw: str, lineno: int) -> None:
        for piece in P.SPLIT_RECORDS_RE.split(raw.strip()):
            if "NCCL" not in piece:
                continue
            k = piece.find(P.MARK)
            if k < 0:
                if not piece.startswith("NCCL "):
                    continue
                piece = " " + piece
                k = 0
            body = piece[k + 11 :]
            if piece.startswith("INFO Channel ", k + 6) or piece.startswith("INFO Ring ", k + 6):
                head, sep, rest = body.partition(" : ")
                if " via " in body and sep and P.CONN_HEAD_RE.match(head) and P.CONN_REST_RE.match(rest):
                    thread = self._thread(piece[:k])
                    self.lines_nccl += 1
                    self._host_seen(thread, lineno, piece)
                    self._conn_line(thread, body, piece, lineno)
                    continue
                self._skip(lineno)
                continue
            self._record(piece, k, lineno)
