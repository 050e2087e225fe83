"""Writing a report file: never half-written, never a crash over one undecodable character.

A report is written to a temporary file beside its final name and renamed into place, so an
error, a full disk, Ctrl-C or SIGTERM leaves either the old file or the new one, never a 0-byte or
cut report. Text is encoded so that it cannot fail: a lone surrogate (an undecodable byte that got
through as `surrogateescape`) is written as `\\udcff`, not raised as UnicodeEncodeError.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from k3diag.filemode import new_file_mode


def encode_text(text: str) -> bytes:
    """UTF-8 that always succeeds: lone surrogates become their `\\uXXXX` escape."""
    return text.encode("utf-8", errors="backslashreplace")


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename; raises OSError with nothing left behind.

    The file keeps what a plain write would give it: an existing file its mode (a 0600 report stays
    private), a new one 0666 less the umask (`umask 077` is honoured); a symbolic link stays a link and
    its target is replaced (a `latest.html` pointing into an archive)."""
    path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    data = encode_text(text)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mode = new_file_mode()
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename: a crash leaves the old file, not an empty one
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
