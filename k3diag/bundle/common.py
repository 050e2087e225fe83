"""What every part of bundle reading and writing shares: names, limits, errors, safe strings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from k3diag.evidence import Evidence

SCHEMA = "k3diag.bundle/1"
MANIFEST_NAME = "manifest.json"
EVIDENCE_DIR = "evidence"

MiB = 1024 * 1024
GiB = 1024 * MiB

TAR_BLOCK = 512
# Hidden files a desktop adds when someone zips or copies a folder by hand: not evidence.
JUNK_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}
MAX_FOLDER_DEPTH = 16
READ_CHUNK = 1 * MiB
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class BundleError(Exception):
    """A bundle that cannot or must not be read; `str()` says what happened and what to do."""


@dataclass
class BundleLimits:
    """Hard limits for reading a bundle; every one stops reading the moment it is crossed.

    Members are held in memory while the bundle is read, so the limits bound memory: a member
    is at most a little over what the collector ever writes (64 MiB of command output), and
    the whole bundle at most 512 MiB. Declared sizes are checked before a member is read, so a
    bundle over them is refused at its first oversized header, not after gigabytes."""

    max_members: int = 2000
    max_member_bytes: int = 80 * MiB
    max_total_bytes: int = 512 * MiB
    max_manifest_bytes: int = 4 * MiB
    # Decompressed bytes per compressed byte. Text logs compress 5-30x, gzip's ceiling is
    # ~1030x (long runs of one byte): a bundle above this ratio is a bomb, not evidence.
    max_compression_ratio: float = 250.0
    # The ratio is only judged once this much has been decompressed (small files compress oddly).
    ratio_check_after_bytes: int = 16 * MiB
    # The manifest is parsed only when its nesting and numbers stay within these.
    max_manifest_depth: int = 32
    max_number_chars: int = 40


DEFAULT_LIMITS = BundleLimits()


@dataclass
class Bundle:
    path: Path
    manifest: dict
    evidence: list[Evidence]
    warnings: list[str] = field(default_factory=list)


@dataclass
class Member:
    name: str  # posix path inside the bundle, no leading "./"
    data: bytes


def safe_str(text: str) -> tuple[str, bool]:
    """`text` with lone surrogates (undecodable bytes under `surrogateescape`, or `\\udcff` escapes
    in JSON) replaced by U+FFFD, and whether any were: the result always encodes as UTF-8."""
    if _SURROGATE_RE.search(text) is None:
        return text, False
    return _SURROGATE_RE.sub("\ufffd", text), True


def check_member_name(display: str, raw_name: str) -> str:
    """The cleaned member name, or BundleError for names that point outside the bundle."""
    name = raw_name.replace("\\", "/") if "\\" in raw_name else raw_name
    if "\x00" in name:
        raise BundleError(f"{display}: a member name holds a NUL byte; the bundle was refused, "
                          "ask the sender to recreate it with `k3diag collect`")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise BundleError(f"{display}: member {raw_name!r} has an absolute path; the bundle was refused "
                          "(nothing was extracted), ask the sender to recreate it with `k3diag collect`")
    parts = [part for part in PurePosixPath(name).parts if part not in ("", ".")]
    if ".." in parts:
        raise BundleError(f"{display}: member {raw_name!r} points outside the bundle with '..'; the bundle was "
                          "refused (nothing was extracted), ask the sender to recreate it with `k3diag collect`")
    return "/".join(parts)


def read_limited(source, declared: int, name: str, display: str, limits: BundleLimits) -> bytes:
    """A member's bytes, stopping the moment they pass the one-member limit."""
    chunks: list[bytes] = []
    got = 0
    while True:
        chunk = source.read(min(READ_CHUNK, limits.max_member_bytes + 1 - got))
        if not chunk:
            break
        got += len(chunk)
        if got > limits.max_member_bytes:
            raise BundleError(f"{display}: member {name!r} is over the {limits.max_member_bytes // MiB} MiB limit "
                              "for one member; reading stopped, ask the sender to leave it out or cut it")
        chunks.append(chunk)
        if got >= declared:
            break
    return b"".join(chunks)
