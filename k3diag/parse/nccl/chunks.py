"""A byte stream cut into chunks of whole lines for `FastFeed.feed_bytes`: one reader for a file's
part (`pool`) and for a log held in memory (`parse_bytes`), so both treat a giant line alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from k3diag.parse.nccl import patterns as P

CHUNK_BYTES = 8 << 20


def whole_line_chunks(read: Callable[[int], bytes], left: int) -> Iterator[bytes]:
    """Up to `left` bytes of `read(n)`, as chunks that each end with a newline (one is added to an
    unterminated last line). A run of bytes with no newline in a whole chunk (binary junk, one
    giant line) is kept as its first `MAX_LINE_CHARS` bytes, one line; the rest of it is skipped."""
    carry = b""
    skipping = False  # inside a run of bytes without newline whose head was already yielded
    while left > 0:
        data = read(min(CHUNK_BYTES, left))
        if not data:
            break
        left -= len(data)
        if skipping:
            newline = data.find(b"\n")
            if newline < 0:
                continue
            data, skipping = data[newline + 1:], False
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            if len(buf) > P.MAX_LINE_CHARS:
                yield buf[: P.MAX_LINE_CHARS] + b"\n"
                carry, skipping = b"", True
            else:
                carry = buf
            continue
        yield buf if cut == len(buf) else buf[:cut]
        carry = buf[cut:]
    if carry and not skipping:
        yield carry[: P.MAX_LINE_CHARS] + b"\n"
