"""Raw evidence: what a command printed or a library returned, exactly as it came.

A live collector and a saved bundle both produce `Evidence`; the model is built from
evidence alone, so live and offline analysis take one path.

Every user path is opened by `open_input` (one place: `O_NONBLOCK`, `fstat` after opening,
every `OSError` turned into a sentence), and every read is bounded by its cut: the bytes read
from a file never pass the limit, and a line longer than its cap (64 KiB streamed, 1 MiB read
whole) keeps its head and skips the rest while it is read, so a 500 MiB line costs a MiB, not
gigabytes.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from k3diag.model.words import counted

# A topology file is a few KB; an `lspci -vv` of a big server a few MB. Anything past this
# is read only by streaming parsers (NCCL logs), never loaded whole.
MAX_TEXT_BYTES = 64 * 1024 * 1024
# Longest line handed to a streaming parser; the rest of an overlong line is skipped while reading.
MAX_LINE_CHARS = 64 * 1024
# Longest line of a file read whole: one-line JSON (`amd-smi --json`) of a big host fits, a 500 MiB
# line of junk after a `topo -m` costs 1 MiB.
MAX_WHOLE_LINE_CHARS = 1024 * 1024
_CHUNK_BYTES = 1024 * 1024
# Pieces checked for control bytes (`has_c0_controls`): each is searched once for every control byte, so
# it should stay in the core's cache between the searches (L2 is 1 to 4 MiB a core on today's servers).
_CHECK_BYTES = 256 * 1024
MiB = 1024 * 1024
# Control characters dropped from text (NUL padding, backspaces, bells); TAB, LF, CR and ESC stay
# (ESC sequences are stripped by `k3diag.parse.text.normalize`). The same class as text.py's CONTROL_RE,
# without the C1 range (8-bit CSI/OSC introducers are stripped as sequences there).
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
# The same characters as bytes (C0 controls and DEL): in UTF-8 they are single bytes that never occur
# inside another character, so a chunk holds one exactly when its decoded text does (a test holds the
# two equal). `k3diag.parse.text` checks ASCII text for them with `has_c0_controls` too.
C0_BYTES = bytes(code for code in range(0x80) if (code < 0x20 and code not in (9, 10, 13, 27)) or code == 0x7F)
_C0_NEEDLES_BYTES = tuple(bytes((code,)) for code in C0_BYTES)
_C0_NEEDLES_TEXT = tuple(chr(code) for code in C0_BYTES)


class InputError(OSError):
    """A user path that could not be opened or read; `str()` is the whole sentence, naming the path,
    and `strerror` the reason alone (for messages that name the path themselves)."""

    def __init__(self, sentence: str, reason: str, code: int = errno.EIO) -> None:
        super().__init__(code, reason)
        self.sentence = sentence

    def __str__(self) -> str:
        return self.sentence


def open_input(path: Path, *, allow_stream: bool = False, follow_links: bool = True) -> tuple[BinaryIO, bool]:
    """Open a user path for reading; (binary handle, whether it is a stream rather than a regular file).

    Opened with `O_NONBLOCK` and checked with `fstat` on the open descriptor, so a file swapped for
    a FIFO, a device or a folder after it was listed ends in a sentence, never a hang: a FIFO opened
    this way returns at once. With `allow_stream` (a path the user named: `-`'s `/dev/stdin`, a
    FIFO, `<(cmd)`), a pipe, FIFO or character device is read as a stream, blocking, as `cat` would:
    a FIFO waits for its writer. Without `follow_links` a symbolic link is refused
    (files found by walking a folder). Raises `InputError`.
    """
    name = os.path.abspath(str(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise input_error_for(name, exc) from None
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise input_error_for(name, exc) from None
    mode = info.st_mode
    if stat.S_ISREG(mode):
        _set_blocking(fd)
        return os.fdopen(fd, "rb", buffering=0), False
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise InputError(f"{name} is a folder, not a file (was it replaced while k3diag ran?)",
                         "it is a folder, not a file", errno.EISDIR)
    is_stream = stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)
    if not (allow_stream and is_stream):
        os.close(fd)
        what = "a pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device or socket" if is_stream else "not a regular file"
        raise InputError(f"{name} is {what}, not a regular file, and was not read; save the output to a file",
                         f"it is {what}, not a regular file")
    if stat.S_ISFIFO(mode) and not name.startswith(("/dev/fd/", "/proc/")) and name != "/dev/stdin":
        # A named FIFO opened non-blocking returns at once, and lets through a writer already waiting in
        # its open(): this descriptor is kept (closing it to reopen blocking dropped what a fast writer had
        # written, and the reopen then waited for a writer that never came), and the read waits, as `cat`
        # would, until a writer has written or has come and gone; with no writer yet it is not empty.
        _wait_for_a_writer(fd)
    _set_blocking(fd)
    return os.fdopen(fd, "rb", buffering=0), True


def _wait_for_a_writer(fd: int) -> None:
    """Block until the FIFO open for reading on `fd` has bytes, or a writer opened and closed it. Linux's
    poll reports a hang-up on a FIFO's read end only once a writer has come since this open, so a FIFO
    nobody has written to yet waits here rather than reading as end of file."""
    import select

    if not hasattr(select, "poll"):
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while not poller.poll():  # no timeout: a FIFO waits for its writer, as `cat` does; Ctrl-C stops it
        pass


def _set_blocking(fd: int) -> None:
    try:
        os.set_blocking(fd, True)
    except (OSError, AttributeError):
        pass


def input_error_for(name: str, exc: OSError) -> InputError:
    """The one sentence every command gives for a path `name` that `exc` says it cannot open or read."""
    code = exc.errno or errno.EIO
    if code == errno.ENOENT:
        if os.path.islink(name):
            try:
                target = os.readlink(name)
            except OSError:
                target = "a path"
            return InputError(f"{name} is a symbolic link to {target}, which does not exist; check the path",
                              f"it is a symbolic link to {target}, which does not exist", code)
        return InputError(f"{name} does not exist; check the path", "it does not exist", code)
    if code in (errno.EACCES, errno.EPERM):
        return InputError(f"permission denied reading {name}; check its permissions or run as its owner",
                          "permission denied", code)
    if code == errno.ELOOP:
        return InputError(f"{name} is a symbolic link and was not followed", "it is a symbolic link", code)
    if code == errno.EISDIR:
        return InputError(f"{name} is a folder, not a file", "it is a folder, not a file", code)
    if code == errno.ENXIO:
        return InputError(f"{name} is a socket or a device with nothing behind it and could not be read",
                          "it is a socket or a device with nothing behind it", code)
    reason = exc.strerror or type(exc).__name__
    return InputError(f"could not read {name}: {reason}", reason, code)


def read_stream(handle: BinaryIO, limit: int = MAX_TEXT_BYTES) -> tuple[bytes, bool]:
    """Up to `limit` bytes from a pipe or FIFO, and whether more came (then it is cut, never buffered)."""
    chunks: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = handle.read(min(_CHUNK_BYTES, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    data = b"".join(chunks)
    return data[:limit], len(data) > limit


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
    # False for files found by walking a folder: a file swapped for a link after the walk is refused.
    follow_links: bool = field(default=True, compare=False)
    # Sentences about what reading dropped or cut (NUL bytes, overlong lines); `take_notes()` hands them on.
    notes: list[str] = field(default_factory=list, compare=False, repr=False)
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

    def _open(self) -> BinaryIO:
        assert self.path is not None
        handle, _ = open_input(self.path, follow_links=self.follow_links)
        return handle

    def head(self, limit: int = 65536) -> bytes:
        """The first `limit` bytes; raises `InputError` (an OSError) when the file cannot be read."""
        if self.data is not None:
            return self.data[:limit]
        if self.path is None:
            return b""
        with self._open() as handle:
            return _read_up_to(handle, limit)

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
        """Decoded content from the first `limit` bytes, and whether it was cut.

        Undecodable bytes are replaced, control bytes dropped and lines over `MAX_WHOLE_LINE_CHARS` cut,
        all while reading (each noted in `notes`), so memory never passes the cut. A file that
        cannot be read gives "" and sets `error` to the sentence; it never raises.
        """
        read = self.read_whole_text(limit)
        return read.text, read.truncated

    def read_whole_text(self, limit: int = MAX_TEXT_BYTES, *, drop_final_newline: bool = False,
                        defer_control_check: bool = False) -> "TextRead":
        """`read_text`, with two savings for a caller that reads the text in full afterwards (what
        `join.build.read_sections` does). Each copy of a 25 MB text costs ~18 ms here, mostly
        first-touch page faults, and the control-byte check of 25 MB ~25 ms:

        `drop_final_newline`: the text without its last character when that is a newline (the last
        section of a file loses it anyway), left out while decoding (a view of the bytes), not cut off
        a copy. `defer_control_check`: a text that is all ASCII and holds no ESC comes back without
        the C0 control check (`controls_checked` False): the caller looks for them (in the distinct
        lines it holds anyway) and, if it finds one, reads again without deferring, so that the
        control bytes are dropped and noted as `read_text` drops and notes them.
        """
        data = None
        if self.encoding in ("utf-8", "utf-8-sig"):
            data = self._read_whole(limit)
            if data is not None:
                drop = drop_final_newline and data.endswith(b"\n")
                read = _whole_utf8(data, self.encoding, drop, defer_control_check)
                if read is not None:
                    return read
        pieces: list[str] = []
        truncated = False
        for piece, cut in self._pieces(limit, MAX_WHOLE_LINE_CHARS, data):
            pieces.append(piece)
            truncated = truncated or cut
        drop = drop_final_newline and bool(pieces) and pieces[-1].endswith("\n")
        if drop:
            pieces[-1] = pieces[-1][:-1]
        return TextRead("".join(pieces), truncated, drop, True)

    def _read_whole(self, limit: int) -> bytes | None:
        """All the bytes when there are at most `limit` (read at once: the common case, a file that fits);
        None when there are more or reading failed (the pieces path then reads, cuts and reports)."""
        if self.data is not None:
            return self.data if len(self.data) <= limit else None
        if self.path is None:
            return None
        chunks: list[bytes] = []
        got = 0
        try:
            with self._open() as handle:
                if os.fstat(handle.fileno()).st_size > limit:
                    return None  # the pieces path cuts it: reading `limit` bytes here would be thrown away
                # One read of the whole file into one buffer, not a join of MiB chunks: each copy of a
                # 25 MB text costs ~15 ms of first-touch page faults on top of the copying.
                while got <= limit:
                    chunk = handle.read(limit + 1 - got)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    got += len(chunk)
        except OSError:
            return None
        if got > limit:
            return None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_bytes(self, limit: int = MAX_TEXT_BYTES) -> tuple[bytes, bool]:
        """Content up to `limit` bytes, and whether it was cut; "" with `error` set when unreadable."""
        if self.data is not None:
            return self.data[:limit], len(self.data) > limit
        if self.path is None:
            return b"", False
        try:
            with self._open() as handle:
                data = _read_up_to(handle, limit + 1)
        except OSError as exc:
            self._failed(exc)
            return b"", False
        return data[:limit], len(data) > limit

    def iter_lines(self, limit: int | None = None) -> Iterator[str]:
        """Decoded lines without their endings, streamed in bounded memory (see `read_text`)."""
        carry = ""
        for piece, _ in self._pieces(limit, MAX_LINE_CHARS):
            if carry:
                piece = carry + piece
            lines = piece.split("\n")
            carry = lines.pop()
            for line in lines:
                if "\r" in line:
                    line = line.rstrip("\r")
                    if "\r" in line:  # a progress bar redrawn with bare CRs: each redraw is a line
                        yield from line.split("\r")
                        continue
                yield line
        if carry:
            yield carry.rstrip("\r")

    def take_notes(self) -> list[str]:
        """The reading notes so far, once: the first input record of this evidence carries them."""
        notes, self.notes = self.notes, []
        return notes

    # -- reading ------------------------------------------------------------------------------
    def _failed(self, exc: OSError) -> None:
        sentence = str(exc) if isinstance(exc, InputError) else (
            f"reading {self.name} failed: {exc.strerror or exc}")
        if self.error is None:
            self.error = sentence

    def _pieces(self, limit: int | None, max_line: int, data: bytes | None = None) -> Iterator[tuple[str, bool]]:
        """Decoded text in pieces of about a MiB: controls dropped, overlong lines cut, bytes bounded.
        `data`: the whole content, already read."""
        if data is None:
            data = self.data
        if data is None and self.path is None:
            return
        decoder = codecs.getincrementaldecoder(self.encoding)(errors="replace")
        budget = limit if limit is not None else -1
        nuls = controls = long_lines = 0
        line_len = 0  # characters of the current line seen so far
        skipping = False  # inside the dropped tail of an overlong line
        try:
            handle: BinaryIO
            if data is not None:
                import io

                handle = io.BytesIO(data)
            else:
                handle = self._open()
        except OSError as exc:
            self._failed(exc)
            return
        cut = False
        # UTF-8: look for control bytes in the raw chunk (`has_c0_controls`: C, a byte a cycle); the
        # regex engine takes several cycles a character and was most of the time of reading.
        bytewise = self.encoding in ("utf-8", "utf-8-sig")
        try:
            with handle:
                while True:
                    want = _CHUNK_BYTES if budget < 0 else min(_CHUNK_BYTES, budget)
                    chunk = handle.read(want) if want > 0 else b""
                    if budget >= 0:
                        budget -= len(chunk)
                    final = not chunk
                    if final and budget == 0 and limit is not None:
                        cut = bool(handle.read(1))
                    text = decoder.decode(chunk, final=final)
                    if text:
                        if has_c0_controls(chunk) if bytewise else _CONTROL_RE.search(text) is not None:
                            found = text.count("\x00")
                            text, dropped = _CONTROL_RE.subn("", text)
                            nuls += found
                            controls += dropped - found
                        text, line_len, skipping, cut_here = _cap_lines(text, line_len, skipping, max_line)
                        long_lines += cut_here
                        if text:
                            yield text, False
                    if final:
                        break
        except OSError as exc:
            self._failed(exc)
        if cut:
            yield "", True
        self._note_reading(nuls, controls, long_lines, max_line)

    def _note_reading(self, nuls: int, controls: int, long_lines: int, max_line: int) -> None:
        if nuls or controls:
            parts = []
            if nuls:
                parts.append(counted(nuls, "NUL byte"))
            if controls:
                parts.append(counted(controls, "other control byte"))
            one = nuls + controls == 1
            self._note(f"{' and '.join(parts)} in {self.name} {'was' if one else 'were'} dropped (padding from a "
                       f"crash or a serial console?); the text around {'it' if one else 'them'} was read")
        if long_lines:
            size = f"{max_line // MiB} MiB" if max_line >= MiB else f"{max_line // 1024} KiB"
            one = long_lines == 1
            self._note(f"{counted(long_lines, 'line')} of {self.name} {'was' if one else 'were'} longer than {size}; "
                       + (f"only its first {size} was read" if one else f"only the first {size} of each was read"))

    def _note(self, sentence: str) -> None:
        if sentence not in self.notes:
            self.notes.append(sentence)

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


def has_c0_controls(data: bytes | str) -> bool:
    """Whether `data` holds a C0 control or DEL (`C0_BYTES`), in bytes or in text.

    Each of the 28 control characters is looked for with `find` on a piece in place: one character is
    found with `memchr`, which reads many bytes an instruction, so 28 searches take fewer instructions
    than one table look-up a byte (`bytes.translate`, then a search for NUL: 17 M against 56 M on 5 MB of
    `lspci -vv`, 16 ms against 24 ms on 25 MB), and nothing is copied. The regex engine takes several
    cycles a character."""
    needles = _C0_NEEDLES_TEXT if isinstance(data, str) else _C0_NEEDLES_BYTES
    find = data.find
    for start in range(0, len(data), _CHECK_BYTES):
        end = start + _CHECK_BYTES
        for needle in needles:
            if find(needle, start, end) >= 0:  # type: ignore[arg-type]
                return True
    return False


@dataclass(frozen=True)
class TextRead:
    """What `Evidence.read_whole_text` read."""

    text: str
    truncated: bool  # only the first `limit` bytes were read
    final_newline_dropped: bool  # the text's last character, a newline, was left out
    controls_checked: bool  # False: C0 controls were not looked for (`defer_control_check`)


def _clean_utf8(data: bytes, encoding: str) -> str | None:
    """`data` decoded in one step, when the pieces path would neither drop nor cut anything in it: no
    control byte (`has_c0_controls`) and no line over `MAX_WHOLE_LINE_CHARS`; None otherwise. A 25 MB
    `lspci -vv` reads in half the time the pieces take (their decoder, their checks and the final
    join each went over the text again)."""
    read = _whole_utf8(data, encoding)
    return None if read is None else read.text


def _whole_utf8(data: bytes, encoding: str, drop_last: bool = False, defer_check: bool = False) -> TextRead | None:
    """`_clean_utf8`, as a `TextRead`. `drop_last`: without the last byte (a newline), decoded from a
    view of the bytes, not a copy. `defer_check`: see `Evidence.read_whole_text`."""
    if not defer_check and has_c0_controls(data):
        return None
    text = str(memoryview(data)[:-1], encoding, "replace") if drop_last else data.decode(encoding, errors="replace")
    checked = not defer_check
    if not checked and not (text.isascii() and "\x1b" not in text):
        if has_c0_controls(data):  # deferred only where nothing before the caller's look would drop them
            return None
        checked = True
    # Every full stretch of half the longest line holds a newline, so no line runs past the longest.
    half = MAX_WHOLE_LINE_CHARS // 2
    for start in range(0, len(text) - half + 1, half):
        if text.find("\n", start, start + half) < 0:
            return None
    return TextRead(text, False, drop_last, checked)


def _read_up_to(handle: BinaryIO, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = handle.read(min(_CHUNK_BYTES, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _cap_lines(text: str, line_len: int, skipping: bool, max_line: int) -> tuple[str, int, bool, int]:
    """`text` with every line cut at `max_line` characters (state carried across pieces); lines cut here."""
    first_nl = text.find("\n")
    tail_start = text.rfind("\n") + 1
    if not skipping:
        # Fast path: no line in this piece (counting what came before it) is too long. A line between
        # the first and the last newline is shorter than the piece: no need to measure each.
        head_len = (first_nl if first_nl >= 0 else len(text)) + line_len
        if head_len <= max_line and len(text) - tail_start <= max_line:
            if first_nl < 0 or len(text) <= max_line or \
                    max(map(len, text[first_nl + 1:tail_start].split("\n"))) <= max_line:
                line_len = line_len + len(text) if first_nl < 0 else len(text) - tail_start
                return text, line_len, False, 0
    out: list[str] = []
    cut = 0
    position = 0
    while position < len(text):
        newline = text.find("\n", position)
        end = newline if newline >= 0 else len(text)
        if skipping:
            if newline < 0:
                break
            skipping = False
            out.append("\n")
            line_len = 0
            position = newline + 1
            continue
        room = max_line - line_len
        if end - position > room:
            out.append(text[position:position + room])
            cut += 1
            line_len = 0
            if newline < 0:
                skipping = True
                break
            out.append("\n")
            position = newline + 1
            continue
        if newline < 0:
            out.append(text[position:])
            line_len += len(text) - position
            break
        out.append(text[position:newline + 1])
        line_len = 0
        position = newline + 1
    return "".join(out), line_len, skipping, cut
