"""Bundles: a folder or tar archive holding `manifest.json` and the raw evidence a collector saved.

A bundle usually comes from someone else (a vendor answering a buyer), so reading one is
treated like parsing hostile input: nothing is ever extracted to disk or executed, member
data is read into memory under size limits while it is decompressed (a decompression bomb
stops as soon as it crosses a limit, not after), and members that could only exist to
escape or confuse (absolute paths, `..`, links, device files) make the whole bundle refused.

Layout (schema `k3diag.bundle/1`)::

    <name>/manifest.json         host, time, k3diag/tool/driver versions, one entry per evidence
    <name>/evidence/<file>       what each command printed or each library returned

A `.tar.gz` holds the same tree under one top folder; readers also accept the files at the
archive's root.

Modules: `common` (names, limits, errors, safe strings), `detect` (is it a bundle), `archive` and
`folder` (members into memory), `manifest` (members to evidence), `write` (writing one).
"""

from __future__ import annotations

from pathlib import Path

from k3diag.bundle.archive import read_archive
from k3diag.bundle.common import (
    DEFAULT_LIMITS,
    EVIDENCE_DIR,
    MANIFEST_NAME,
    SCHEMA,
    Bundle,
    BundleError,
    BundleLimits,
    safe_str,
)
from k3diag.bundle.detect import looks_like_bundle
from k3diag.bundle.folder import read_folder
from k3diag.bundle.manifest import assemble
from k3diag.bundle.write import ARCHIVE_SUFFIXES, check_output, is_archive_name, write_bundle

__all__ = [
    "ARCHIVE_SUFFIXES", "DEFAULT_LIMITS", "EVIDENCE_DIR", "MANIFEST_NAME", "SCHEMA", "Bundle", "BundleError",
    "BundleLimits", "check_output", "is_archive_name", "looks_like_bundle", "read_bundle", "read_bundle_bytes",
    "write_bundle", "bytes_look_like_bundle",
]


def bytes_look_like_bundle(data: bytes) -> bool:
    """Whether bytes read from a stream (`-`, a FIFO) are a tar archive, compressed or not."""
    import io

    from k3diag.bundle.common import TAR_BLOCK
    from k3diag.bundle.detect import compression_of, decompressor, is_tar_header

    kind = compression_of(data)
    if kind is None:
        return is_tar_header(data[:TAR_BLOCK])
    try:
        with decompressor(kind, io.BytesIO(data)) as stream:
            return is_tar_header(stream.read(TAR_BLOCK))
    except (OSError, EOFError, ValueError):
        return False


def read_bundle_bytes(data: bytes, display: str, limits: BundleLimits = DEFAULT_LIMITS) -> Bundle:
    """A bundle archive that came through a pipe, read from memory under the same limits."""
    import io

    warnings: list[str] = []
    members = read_archive(io.BytesIO(data), display, limits, warnings)
    return assemble(Path(display), display, members, limits, warnings)


def read_bundle(path: Path, limits: BundleLimits = DEFAULT_LIMITS) -> Bundle:
    """Read a bundle folder or archive into evidence without writing anything to disk.

    Raises `BundleError` (one sentence: what happened, what to do) when the bundle is
    unreadable, crosses a limit, or holds members that could only be there to escape.
    """
    path = Path(path)
    display = safe_str(path.name or str(path))[0]
    warnings: list[str] = []
    if path.is_dir():
        members = read_folder(path, display, limits, warnings)
    elif path.is_file():
        members = read_archive(path, display, limits, warnings)
    elif path.exists():
        raise BundleError(f"{display} is neither a folder nor a regular file; give a bundle folder or a .tar.gz")
    else:
        raise BundleError(f"{display} does not exist; check the path")
    return assemble(path, display, members, limits, warnings)
