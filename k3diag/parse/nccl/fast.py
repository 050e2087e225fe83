"""The bulk path: a log read as bytes in large chunks, one thread's run of lines at a time.

A chunk is cut into runs of consecutive lines that begin with the same record header (one C-level
regex match per run). A run long enough is proven self-contained with C-level passes (ASCII, no CR
or NUL, exactly one ` NCCL ` per line, no arrow other than the connection lines'), its header
stripped, its lines classified with C-level maps (`startswith` with a tuple of tags), and then:

- the lines that carry a fact other than a connection go one by one, in order, to the handlers of
  the exact path (a few per rank and communicator);
- the connection lines between two such lines, where the thread's state cannot change, are folded
  with `set(map(bytes.partition, ...))` into (channel, connIndex) codes per distinct `src -> dst via`.

Anything that does not pass a proof (interleaved ranks, CRLF, non-ASCII, glued records, a line the
exact path would skip) goes through the exact path, so the result is the same as reading every line.
"""

from __future__ import annotations

from itertools import compress, count, groupby, repeat
from operator import and_, contains, itemgetter, not_, or_

from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl.lines import _UNKNOWN, _UNPARSED
from k3diag.parse.nccl.state import ConnAgg, channel_code

CHUNK_BYTES = 8 << 20
MIN_BLOCK_LINES = 8  # shorter runs of one header are not worth the proofs: exact path
SHORT_RUNS_BEFORE_SKIP = 32  # an interleaved stretch: stop looking for runs for a while
SKIP_BYTES = 256 << 10
_HEAD = itemgetter(0)
_REST = itemgetter(2)
_SEP = b" : "
_VIA = b" via "
_INVALID = -1


class _Codes(dict):
    """Connection head (`Channel 03/1`, `Ring 00`) -> channel_code, parsed on first use; -1 if not one."""

    def __missing__(self, head: bytes) -> int:
        match = P.CONN_HEAD_RE.match(head.decode("ascii", "replace"))
        if match is None:
            value = _INVALID
        else:
            conn = match.group("conn")
            value = channel_code(int(match.group("ch")), int(conn) if conn is not None else None)
        if len(self) < 4096:
            self[head] = value
        return value


class FastFeed:
    """Mixin of `NcclLogParser`: the bytes reader."""

    def feed_bytes(self, chunk: bytes, first_line: int) -> int:
        """Parse a chunk of whole lines (ending in a newline); returns the line number after it."""
        if not hasattr(self, "_codes"):
            self._codes = _Codes()
            self._rest_bytes: dict[bytes, object] = {}
        match = P.SAME_PREFIX_RUN_RE.match
        find = chunk.find
        n = len(chunk)
        lineno = first_line
        exact_from = pos = 0
        short = 0
        while pos < n:
            found = match(chunk, pos)
            if found is None:
                nl = find(b"\n", pos)
                pos = n if nl < 0 else nl + 1
                continue
            end = found.end()
            nlines = chunk.count(b"\n", pos, end)
            if nlines < MIN_BLOCK_LINES:
                pos = end
                short += 1
                if short >= SHORT_RUNS_BEFORE_SKIP:
                    short = 0
                    nl = find(b"\n", pos + SKIP_BYTES)
                    pos = n if nl < 0 else nl + 1
                continue
            short = 0
            if exact_from < pos:
                lineno = self._exact_bytes(chunk[exact_from:pos], lineno)
            lineno = self._block(chunk[pos:end], found.group(1), nlines, lineno)
            exact_from = pos = end
        if exact_from < n:
            lineno = self._exact_bytes(chunk[exact_from:], lineno)
        return lineno

    def _exact_bytes(self, data: bytes, lineno: int) -> int:
        lines = data.decode("utf-8", errors="replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        before = self.lines_total
        self.feed(lines, lineno)
        return lineno + (self.lines_total - before)

    def _block(self, block: bytes, prefix: bytes, nlines: int, lineno: int) -> int:
        """One thread's run of `nlines` lines, all beginning with `prefix` (`... NCCL INFO `)."""
        if (not block.isascii() or b"\x00" in block or b"\r" in block or block.count(b" NCCL ") != nlines
                or block.count(b" -> ") != block.count(_VIA)):
            return self._exact_bytes(block, lineno)
        lines = block.replace(prefix, b"").split(b"\n")
        lines.pop()  # the block ends with a newline
        pre = prefix[:-11].decode()
        head = prefix.decode()
        thread = self.prefix_cache.get(pre) or self._thread(pre)
        coll = block.count(b": opCount ")
        if coll < nlines:
            # the host of this thread, first named on the block's first line that is not a COLL line
            first = 0
            while b": opCount " in lines[first]:
                first += 1
            self._host_seen(thread, lineno + first, head + lines[first].decode())
        is_conn = list(map(contains, lines, repeat(_VIA)))
        # a Channel/Ring line without ` via ` is a ring order: read, not folded
        ring_order = map(and_, map(bytes.startswith, lines, repeat(P.CONN_BODY_STARTS)), map(not_, is_conn))
        tagged = map(bytes.startswith, lines, repeat(P.HANDLED_BODY_STARTS))
        picked = list(compress(count(), map(or_, tagged, ring_order)))
        base_nccl = self.lines_nccl
        info = self._info
        needs = P.HANDLED_BODY_NEEDS
        gap_from = 0
        for index in picked:
            if index > gap_from:
                self._fold(thread, head, lines, gap_from, index, is_conn, lineno)
            gap_from = index + 1
            body = lines[index]
            need = needs.get(body[:4])
            if (need is not None and need not in body) or b": opCount " in body:
                continue  # dropped by the exact path too (only counted)
            if body[:1].isdigit() and b" coll channels" not in body:
                continue
            text = body.decode()
            # what `_record` does for an INFO line, less the counting and host (done for the block)
            info(head + text, text.rstrip(), pre, lineno + index)
        if gap_from < len(lines):
            self._fold(thread, head, lines, gap_from, len(lines), is_conn, lineno)
        self.lines_nccl = base_nccl + nlines - coll
        self.lines_total += nlines
        return lineno + nlines

    def _fold(self, thread, head: str, lines: list[bytes], start: int, end: int, is_conn: list[bool],
              lineno: int) -> None:
        """Lines [start, end) of one thread with no state change in between: fold the connection lines
        (the others there are dropped by the exact path too)."""
        conn = list(compress(lines[start:end], is_conn[start:end]))
        if not conn:
            return
        parts = set(map(bytes.partition, conn, repeat(_SEP)))
        rests = set(map(_REST, parts))
        codes_of = self._codes.__getitem__
        cache = self._rest_bytes
        parsed_of = {}
        for rest in rests:
            parsed = cache.get(rest)
            if parsed is None:
                parsed = self.parse_rest(rest.decode())
                if len(cache) >= P.MAX_REST_CACHE:
                    cache.clear()
                cache[rest] = parsed
            if parsed is _UNPARSED or parsed is _UNKNOWN or b"  " in rest or not rest[:1].isdigit():
                self._fold_exact(thread, head, lines, start, end, lineno)
                return
            parsed_of[rest] = parsed
        if len(rests) == 1:
            groups = [(next(iter(rests)), set(map(codes_of, map(_HEAD, parts))))]
        else:
            groups = [(rest, set(map(codes_of, map(_HEAD, items))))
                      for rest, items in groupby(sorted(parts, key=_REST), key=_REST)]
        if any(_INVALID in codes for _, codes in groups):
            self._fold_exact(thread, head, lines, start, end, lineno)
            return
        inst = thread.current
        target = inst.conns if inst is not None else thread.pending
        for rest, codes in groups:
            parsed = parsed_of[rest]
            key = parsed[0]
            agg = target.get(key)
            if agg is None:
                tail = _SEP + rest
                if len(target) >= P.MAX_CONN_KEYS_PER_INSTANCE:
                    self.conn_overflow += sum(1 for line in conn if line.endswith(tail))
                    continue
                index = next(i for i in range(start, end) if is_conn[i] and lines[i].endswith(tail)
                             and lines[i].partition(_SEP)[2] == rest)
                line = lines[index]
                src, dst, via, direction = key
                agg = target[key] = ConnAgg("Ring" if line.startswith(b"Ring") else "Channel", src, dst, parsed[1],
                                            parsed[2], direction, via, parsed[3], parsed[4], lineno + index,
                                            head + line.decode())
            agg.codes.update(codes)

    def _fold_exact(self, thread, head: str, lines: list[bytes], start: int, end: int, lineno: int) -> None:
        saved = self.lines_nccl
        self._feed_selected((lineno + i, head + lines[i].decode()) for i in range(start, end)
                            if b": opCount " not in lines[i])
        self.lines_nccl = saved  # the block counts its lines itself
