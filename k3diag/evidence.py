"""Raw evidence: what a command printed or a library returned, exactly as it came.

A live collector and a saved bundle both produce `Evidence`; the model is built from
evidence alone, so live and offline analysis take one path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

# A topology file is a few KB; an `lspci -vv` of a big server a few MB. Anything past this
# is read only by streaming parsers (NCCL logs), never loaded whole.
MAX_TEXT_BYTES = 64 * 1024 * 1024
# Longest line handed to a streaming parser; the rest of an overlong line is skipped.
MAX_LINE_CHARS = 64 * 1024


@dataclass
class Evidence:
    """One piece of raw evidence.

    `name` is how the user knows it (a path, or `bundle.tar.gz:member`). The content is
    either in `data` (bytes already read, e.g. from a bundle or a live command) or in the
    file at `path` (read lazily so gigabyte logs can be streamed).
    """

    name: str
    data: bytes | None = None
    path: Path | None = None
    kind: str = "file"  # file | command | reading
    command: str | None = None  # the command line that produced it, when known
    exit_code: int | None = None
    duration_s: float | None = None
    stderr: str = ""
    timed_out: bool = False
    error: str | None = None  # why it could not be produced/read, in one sentence
    format_hint: str | None = None  # readings know their format; text is always sniffed
    meta: dict = field(default_factory=dict)
    # The codec the content was saved in, found from its first bytes on first use.
    _encoding: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def size(self) -> int | None:
        if self.data is not None:
            return len(self.data)
        if self.path is not None:
            try:
                return self.path.stat().st_size
            except OSError:
                return None
        return None

    def head(self, limit: int = 65536) -> bytes:
        if self.data is not None:
            return self.data[:limit]
        if self.path is None:
            return b""
        with self.path.open("rb") as handle:
            return handle.read(limit)

    @property
    def encoding(self) -> str:
        """UTF-8 unless the content says otherwise (a byte order mark, UTF-16's NUL pattern)."""
        if self._encoding is None:
            from k3diag.textcodec import detect_encoding

            try:
                self._encoding = detect_encoding(self.head(4096))
            except OSError:
                self._encoding = "utf-8"
        return self._encoding

    def read_text(self, limit: int = MAX_TEXT_BYTES) -> tuple[str, bool]:
        """Decoded content up to `limit` bytes, and whether it was cut; undecodable bytes are replaced."""
        data, truncated = self.read_bytes(limit)
        return data.decode(self.encoding, errors="replace"), truncated

    def read_bytes(self, limit: int = MAX_TEXT_BYTES) -> tuple[bytes, bool]:
        """Content up to `limit` bytes, and whether it was cut."""
        if self.data is not None:
            return self.data[:limit], len(self.data) > limit
        if self.path is None:
            return b"", False
        with self.path.open("rb") as handle:
            data = handle.read(limit + 1)
        return data[:limit], len(data) > limit

    def iter_lines(self) -> Iterator[str]:
        """Decoded lines without their endings, streamed; undecodable bytes are replaced."""
        encoding = self.encoding
        if self.data is not None:
            text = self.data.decode(encoding, errors="replace")
            yield from text.splitlines()
            return
        if self.path is None:
            return
        with self.path.open("r", encoding=encoding, errors="replace", newline="") as handle:
            while True:
                line = handle.readline(MAX_LINE_CHARS)
                if not line:
                    return
                if len(line) == MAX_LINE_CHARS and not line.endswith("\n"):
                    # A "line" this long is binary junk or a log without newlines: keep its head,
                    # skip the rest, so memory stays bounded whatever the file holds.
                    while True:
                        rest = handle.readline(MAX_LINE_CHARS)
                        if not rest or rest.endswith("\n"):
                            break
                yield line.rstrip("\r\n")

    def to_manifest(self, member: str | None) -> dict:
        return {
            "name": self.name,
            "member": member,
            "kind": self.kind,
            "command": self.command,
            "exit_code": self.exit_code,
            "duration_s": self.duration_s,
            "stderr": self.stderr[-4000:],
            "timed_out": self.timed_out,
            "error": self.error,
            "format_hint": self.format_hint,
            "meta": self.meta,
        }
