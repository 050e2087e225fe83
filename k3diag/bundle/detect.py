"""Is this path a bundle? Judged from its bytes (a folder holding manifest.json, or a tar archive,
compressed or not), never from its name."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from pathlib import Path
from typing import BinaryIO

from k3diag.bundle.common import MANIFEST_NAME, TAR_BLOCK
from k3diag.compression import compressed
from k3diag.evidence import open_input



def looks_like_bundle(path: Path) -> bool:
    """A folder holding manifest.json, or a (compressed) tar archive, judged by its bytes."""
    try:
        if path.is_dir():
            return (path / MANIFEST_NAME).is_file()
        if not path.is_file():
            return False
        handle, _ = open_input(path)
        with handle:
            head = handle.read(TAR_BLOCK * 2)
    except OSError:
        return False
    kind = compression_of(head)
    if kind is None:
        return is_tar_header(head[:TAR_BLOCK])
    # A compressed file is a bundle only when what it holds starts like a tar archive
    # (a gzipped NCCL log is evidence, not a bundle).
    try:
        handle, _ = open_input(path)
        with handle, decompressor(kind, handle) as stream:
            inner = stream.read(TAR_BLOCK)
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError):  # corrupt data after a good magic
        return False
    return is_tar_header(inner)


def compression_of(head: bytes) -> str | None:
    """`gzip`, `bzip2` or `xz` for a file whose first bytes are that compressor's (`compression.compressed`);
    None for any other (zstd and zip are compressed too, but no bundle is)."""
    found = compressed(head)
    return found[0] if found is not None else None


def decompressor(kind: str, raw: BinaryIO) -> BinaryIO:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    return lzma.LZMAFile(raw, mode="rb")  # type: ignore[return-value]


def is_tar_header(block: bytes) -> bool:
    """ustar magic, or (for v7 archives without it) a header whose checksum adds up."""
    if len(block) < TAR_BLOCK:
        return False
    if block[257:262] == b"ustar":
        return True
    stored = block[148:156].replace(b"\x00", b" ").strip()
    if not stored or not all(48 <= c <= 55 for c in stored):
        return False
    computed = sum(block[:148]) + 8 * 32 + sum(block[156:TAR_BLOCK])
    return int(stored, 8) == computed and any(block[:100])
