"""Reading a tar bundle (plain, gzip, bzip2 or xz) strictly forward into memory, under limits.

Nothing is extracted. Decompressed bytes are counted on their way through (headers, padding and
skipped data too), so a bomb stops the moment it crosses a limit; declared member sizes are checked
before a member is read, so an oversized bundle is refused at its first oversized header.
"""

from __future__ import annotations

import io
import lzma
import tarfile
import zlib
from pathlib import Path
from typing import BinaryIO

from k3diag.bundle.common import (
    EVIDENCE_DIR,
    MANIFEST_NAME,
    READ_CHUNK,
    TAR_BLOCK,
    BundleError,
    BundleLimits,
    Member,
    MiB,
    check_member_name,
    read_limited,
    safe_str,
)
from k3diag.bundle.detect import compression_of, decompressor, is_tar_header
from k3diag.evidence import InputError, open_input
from k3diag.model.words import counted


class _CountingReader(io.RawIOBase):
    """Counts bytes on their way through and stops the moment a limit is crossed.

    Wrapped around the decompressed stream so that tar headers, skipped member data and
    read member data all count: a bomb cannot hide in padding or in members we skip.
    """

    def __init__(self, inner: BinaryIO, raw_counter: "_RawCounter | None", display: str, limits: BundleLimits):
        super().__init__()
        self._inner = inner
        self._raw = raw_counter
        self._display = display
        self._limits = limits
        self.count = 0
        # headers and padding add up to a few KB per member on top of the data
        self._ceiling = limits.max_total_bytes + limits.max_manifest_bytes + (limits.max_members + 8) * 3 * TAR_BLOCK

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        wanted = min(len(buffer), READ_CHUNK)
        data = self._inner.read(wanted)
        n = len(data)
        buffer[:n] = data
        self.count += n
        if self.count > self._ceiling:
            raise BundleError(
                f"{self._display}: decompressed data passed {self._limits.max_total_bytes // MiB} MiB, the limit for "
                "a whole bundle; reading stopped (a decompression bomb or far more than a bundle holds), "
                "ask the sender for a smaller bundle or raise the limit"
            )
        if self._raw is not None and self.count > self._limits.ratio_check_after_bytes:
            compressed = max(self._raw.count, 1)
            if self.count / compressed > self._limits.max_compression_ratio:
                raise BundleError(
                    f"{self._display}: the archive expands more than {self._limits.max_compression_ratio:g} times "
                    f"({self.count // MiB} MiB from {compressed // 1024} KiB), which real evidence never does; "
                    "reading stopped as a decompression bomb, ask the sender to recreate the bundle"
                )
        return n


class _RawCounter(io.RawIOBase):
    def __init__(self, inner: BinaryIO):
        super().__init__()
        self._inner = inner
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self._inner.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        return n


def read_archive(path: Path | BinaryIO, display: str, limits: BundleLimits, warnings: list[str]) -> list[Member]:
    """Members of a tar archive at `path`, or in a seekable binary handle (a bundle piped to `-`)."""
    if isinstance(path, (str, Path)):
        try:
            handle, _ = open_input(Path(path))
        except InputError as exc:
            raise BundleError(f"{display} could not be opened ({exc.strerror}); check the path and its "
                              "permissions") from None
    else:
        handle = path
    with handle:
        head = handle.read(TAR_BLOCK * 2)
        handle.seek(0)
        kind = compression_of(head)
        raw_counter: _RawCounter | None = None
        if kind is None:
            if not is_tar_header(head[:TAR_BLOCK]):
                raise BundleError(f"{display} is not a bundle (neither a folder with manifest.json nor a tar "
                                  "archive); give the file `k3diag collect` wrote")
            stream: BinaryIO = handle
        else:
            raw_counter = _RawCounter(handle)
            stream = decompressor(kind, io.BufferedReader(raw_counter, buffer_size=64 * 1024))  # type: ignore[arg-type]
        counted = io.BufferedReader(_CountingReader(stream, raw_counter, display, limits), buffer_size=READ_CHUNK)
        try:
            return _read_tar_stream(counted, display, limits, warnings)
        except BundleError:
            raise
        except tarfile.TarError as exc:
            raise BundleError(f"{display} is a damaged or unsupported tar archive ({safe_str(str(exc))[0]}); ask the "
                              "sender to recreate it with `k3diag collect`") from None
        except (EOFError, OSError, lzma.LZMAError, zlib.error) as exc:
            # the library's words, not its class name (BadGzipFile, EOFError): they mean nothing to the user
            detail = safe_str(str(exc))[0] or "the data stops before the archive's end"
            raise BundleError(f"{display} ends early or is corrupt ({detail}); the download may be incomplete, ask "
                              "the sender for the file again") from None


def _read_tar_stream(stream: BinaryIO, display: str, limits: BundleLimits, warnings: list[str]) -> list[Member]:
    members: list[Member] = []
    seen: set[str] = set()
    manifests: list[str] = []
    total = 0
    count = 0
    replaced = 0
    # "r|" reads strictly forward: no seeking, so nothing can make us re-read or jump. Names that
    # are not UTF-8 are decoded with replacement, never with surrogates that break every writer.
    with tarfile.open(fileobj=stream, mode="r|", encoding="utf-8", errors="replace") as archive:
        for info in archive:
            count += 1
            if count > limits.max_members:
                raise BundleError(f"{display} holds more than {limits.max_members} members, more than any bundle "
                                  "k3diag writes; reading stopped, ask the sender for the bundle `k3diag collect` made")
            raw_name, bad = safe_str(info.name)
            replaced += bad
            name = check_member_name(display, raw_name)
            if info.issym() or info.islnk():
                kind = "symbolic link" if info.issym() else "hard link"
                raise BundleError(f"{display}: member {raw_name!r} is a {kind} (to {safe_str(info.linkname)[0]!r}); "
                                  "bundles never hold links, so the bundle was refused (nothing was extracted), ask "
                                  "the sender to recreate it with `k3diag collect`")
            if info.ischr() or info.isblk() or info.isfifo():
                raise BundleError(f"{display}: member {raw_name!r} is a device file or FIFO; bundles hold only "
                                  "plain files, so the bundle was refused, ask the sender to recreate it with "
                                  "`k3diag collect`")
            if info.isdir():
                continue
            if not info.isreg():
                raise BundleError(f"{display}: member {raw_name!r} is not a plain file (tar type {info.type!r}); "
                                  "the bundle was refused, ask the sender to recreate it with `k3diag collect`")
            check_unique(display, name, seen, manifests)
            if info.size > limits.max_member_bytes:
                raise BundleError(f"{display}: member {raw_name!r} is {info.size // MiB} MiB, over the "
                                  f"{limits.max_member_bytes // MiB} MiB limit for one member; reading stopped, "
                                  "ask the sender to leave it out or cut it, or raise the limit")
            if total + info.size > limits.max_total_bytes:
                raise BundleError(f"{display} holds more than {limits.max_total_bytes // MiB} MiB of evidence, "
                                  "the limit for one bundle; reading stopped, ask the sender for a smaller bundle")
            source = archive.extractfile(info)
            if source is None:
                continue
            data = read_limited(source, info.size, name, display, limits)
            total += len(data)
            members.append(Member(name=name, data=data))
    if replaced:
        warnings.append(f"{display}: {counted(replaced, 'member name')} held bytes that are not UTF-8; "
                        + ("it is shown with \ufffd in its place" if replaced == 1 else "they are shown with \ufffd in their place"))
    return members


def check_unique(display: str, name: str, seen: set[str], manifests: list[str]) -> None:
    """A second member of the same name (the last copy would silently win) or a second manifest
    (which one is the bundle's?) refuses the bundle."""
    key = name.lower()
    if key in seen:
        raise BundleError(f"{display} holds two members named {name!r}; a reader would see only one of them, so "
                          "the bundle was refused, ask the sender to recreate it with `k3diag collect`")
    seen.add(key)
    top, _, rest = name.partition("/")
    if name == MANIFEST_NAME or (rest == MANIFEST_NAME and top != EVIDENCE_DIR):
        manifests.append(name)
        if len(manifests) > 1:
            raise BundleError(f"{display} holds two manifests ({manifests[0]!r} and {name!r}); which one describes "
                              "the evidence is ambiguous, so the bundle was refused, ask the sender to recreate it")
