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
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import re
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from k3diag import __version__
from k3diag.evidence import Evidence

SCHEMA = "k3diag.bundle/1"
MANIFEST_NAME = "manifest.json"
EVIDENCE_DIR = "evidence"

MiB = 1024 * 1024
GiB = 1024 * MiB

_GZIP_MAGIC = b"\x1f\x8b"
_BZIP2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_TAR_BLOCK = 512
# Hidden files a desktop adds when someone zips or copies a folder by hand: not evidence.
_JUNK_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}
_MAX_FOLDER_DEPTH = 16
_READ_CHUNK = 1 * MiB


class BundleError(Exception):
    """A bundle that cannot or must not be read; `str()` says what happened and what to do."""


@dataclass
class BundleLimits:
    """Hard limits for reading a bundle; every one stops reading the moment it is crossed."""

    max_members: int = 2000
    max_member_bytes: int = 256 * MiB
    max_total_bytes: int = 2 * GiB
    max_manifest_bytes: int = 4 * MiB
    # Decompressed bytes per compressed byte. Text logs compress 5-30x, gzip's ceiling is
    # ~1030x (long runs of one byte): a bundle above this ratio is a bomb, not evidence.
    max_compression_ratio: float = 250.0
    # The ratio is only judged once this much has been decompressed (small files compress oddly).
    ratio_check_after_bytes: int = 16 * MiB


DEFAULT_LIMITS = BundleLimits()


@dataclass
class Bundle:
    path: Path
    manifest: dict
    evidence: list[Evidence]
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- detection


def looks_like_bundle(path: Path) -> bool:
    """A folder holding manifest.json, or a (compressed) tar archive, judged by its bytes."""
    try:
        if path.is_dir():
            return (path / MANIFEST_NAME).is_file()
        if not path.is_file():
            return False
        with path.open("rb") as handle:
            head = handle.read(_TAR_BLOCK * 2)
    except OSError:
        return False
    kind = _compression_of(head)
    if kind is None:
        return _is_tar_header(head[:_TAR_BLOCK])
    # A compressed file is a bundle only when what it holds starts like a tar archive
    # (a gzipped NCCL log is evidence, not a bundle).
    try:
        with path.open("rb") as handle, _decompressor(kind, handle) as stream:
            inner = stream.read(_TAR_BLOCK)
    except (OSError, EOFError, lzma.LZMAError, ValueError):
        return False
    return _is_tar_header(inner)


def _compression_of(head: bytes) -> str | None:
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if head.startswith(_BZIP2_MAGIC):
        return "bzip2"
    if head.startswith(_XZ_MAGIC):
        return "xz"
    return None


def _decompressor(kind: str, raw: BinaryIO) -> BinaryIO:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    return lzma.LZMAFile(raw, mode="rb")  # type: ignore[return-value]


def _is_tar_header(block: bytes) -> bool:
    """ustar magic, or (for v7 archives without it) a header whose checksum adds up."""
    if len(block) < _TAR_BLOCK:
        return False
    if block[257:262] == b"ustar":
        return True
    stored = block[148:156].replace(b"\x00", b" ").strip()
    if not stored or not all(48 <= c <= 55 for c in stored):
        return False
    computed = sum(block[:148]) + 8 * 32 + sum(block[156:_TAR_BLOCK])
    return int(stored, 8) == computed and any(block[:100])


# --------------------------------------------------------------------------- reading


def read_bundle(path: Path, limits: BundleLimits = DEFAULT_LIMITS) -> Bundle:
    """Read a bundle folder or archive into evidence without writing anything to disk.

    Raises `BundleError` (one sentence: what happened, what to do) when the bundle is
    unreadable, crosses a limit, or holds members that could only be there to escape.
    """
    path = Path(path)
    display = path.name or str(path)
    if path.is_dir():
        members = _read_folder(path, display, limits)
    elif path.is_file():
        members = _read_archive(path, display, limits)
    elif path.exists():
        raise BundleError(f"{display} is neither a folder nor a regular file; give a bundle folder or a .tar.gz")
    else:
        raise BundleError(f"{display} does not exist; check the path")
    return _assemble(path, display, members, limits)


@dataclass
class _Member:
    name: str  # posix path inside the bundle, no leading "./"
    data: bytes


def _check_member_name(display: str, raw_name: str) -> str:
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
        self._ceiling = limits.max_total_bytes + limits.max_manifest_bytes + (limits.max_members + 8) * 3 * _TAR_BLOCK

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        wanted = min(len(buffer), _READ_CHUNK)
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


def _read_archive(path: Path, display: str, limits: BundleLimits) -> list[_Member]:
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise BundleError(f"{display} could not be opened ({exc.strerror or exc}); check the path and its permissions") from None
    with handle:
        head = handle.read(_TAR_BLOCK * 2)
        handle.seek(0)
        kind = _compression_of(head)
        raw_counter: _RawCounter | None = None
        if kind is None:
            if not _is_tar_header(head[:_TAR_BLOCK]):
                raise BundleError(f"{display} is not a bundle (neither a folder with manifest.json nor a tar "
                                  "archive); give the file `k3diag collect` wrote")
            stream: BinaryIO = handle
        else:
            raw_counter = _RawCounter(handle)
            stream = _decompressor(kind, io.BufferedReader(raw_counter, buffer_size=64 * 1024))  # type: ignore[arg-type]
        counted = io.BufferedReader(_CountingReader(stream, raw_counter, display, limits), buffer_size=_READ_CHUNK)
        try:
            return _read_tar_stream(counted, display, limits)
        except BundleError:
            raise
        except tarfile.TarError as exc:
            raise BundleError(f"{display} is a damaged or unsupported tar archive ({exc}); ask the sender to "
                              "recreate it with `k3diag collect`") from None
        except (EOFError, OSError, lzma.LZMAError, zlib.error) as exc:
            raise BundleError(f"{display} ends early or is corrupt ({type(exc).__name__}: {exc}); the download "
                              "may be incomplete, ask the sender for the file again") from None


def _read_tar_stream(stream: BinaryIO, display: str, limits: BundleLimits) -> list[_Member]:
    members: list[_Member] = []
    total = 0
    count = 0
    # "r|" reads strictly forward: no seeking, so nothing can make us re-read or jump.
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for info in archive:
            count += 1
            if count > limits.max_members:
                raise BundleError(f"{display} holds more than {limits.max_members} members, more than any bundle "
                                  "k3diag writes; reading stopped, ask the sender for the bundle `k3diag collect` made")
            name = _check_member_name(display, info.name)
            if info.issym() or info.islnk():
                kind = "symbolic link" if info.issym() else "hard link"
                raise BundleError(f"{display}: member {info.name!r} is a {kind} (to {info.linkname!r}); bundles "
                                  "never hold links, so the bundle was refused (nothing was extracted), ask the "
                                  "sender to recreate it with `k3diag collect`")
            if info.ischr() or info.isblk() or info.isfifo():
                raise BundleError(f"{display}: member {info.name!r} is a device file or FIFO; bundles hold only "
                                  "plain files, so the bundle was refused, ask the sender to recreate it with "
                                  "`k3diag collect`")
            if info.isdir():
                continue
            if not info.isreg():
                raise BundleError(f"{display}: member {info.name!r} is not a plain file (tar type {info.type!r}); "
                                  "the bundle was refused, ask the sender to recreate it with `k3diag collect`")
            if info.size > limits.max_member_bytes:
                raise BundleError(f"{display}: member {info.name!r} is {info.size // MiB} MiB, over the "
                                  f"{limits.max_member_bytes // MiB} MiB limit for one member; reading stopped, "
                                  "ask the sender to leave it out or cut it, or raise the limit")
            if total + info.size > limits.max_total_bytes:
                raise BundleError(f"{display} holds more than {limits.max_total_bytes // MiB} MiB of evidence, "
                                  "the limit for one bundle; reading stopped, ask the sender for a smaller bundle")
            source = archive.extractfile(info)
            if source is None:
                continue
            data = _read_limited(source, info.size, name, display, limits)
            total += len(data)
            members.append(_Member(name=name, data=data))
    return members


def _read_limited(source: BinaryIO, declared: int, name: str, display: str, limits: BundleLimits) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while True:
        chunk = source.read(min(_READ_CHUNK, limits.max_member_bytes + 1 - got))
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


def _read_folder(root: Path, display: str, limits: BundleLimits) -> list[_Member]:
    members: list[_Member] = []
    total = 0

    def walk(folder: Path, prefix: str, depth: int) -> None:
        nonlocal total
        if depth > _MAX_FOLDER_DEPTH:
            raise BundleError(f"{display}: folders nest deeper than {_MAX_FOLDER_DEPTH} levels at {prefix!r}; "
                              "bundles are flat, ask the sender for the bundle `k3diag collect` made")
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise BundleError(f"{display}: could not list {prefix or '.'} ({exc.strerror or exc}); "
                              "check its permissions") from None
        for entry in entries:
            name = f"{prefix}{entry.name}"
            if entry.is_symlink():
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    target = "?"
                raise BundleError(f"{display}: {name!r} is a symbolic link (to {target!r}); links are never "
                                  "followed in a bundle, so it was refused: replace the link with the file "
                                  "itself or ask the sender to recreate the bundle")
            if entry.is_dir(follow_symlinks=False):
                walk(Path(entry.path), name + "/", depth + 1)
                continue
            if not entry.is_file(follow_symlinks=False):
                raise BundleError(f"{display}: {name!r} is a device file, FIFO or socket; bundles hold only plain "
                                  "files, so it was refused (nothing was opened)")
            if len(members) + 1 > limits.max_members:
                raise BundleError(f"{display} holds more than {limits.max_members} files, more than any bundle "
                                  "k3diag writes; reading stopped")
            data = _read_regular_file(Path(entry.path), name, display, limits)
            total += len(data)
            if total > limits.max_total_bytes:
                raise BundleError(f"{display} holds more than {limits.max_total_bytes // MiB} MiB of evidence, "
                                  "the limit for one bundle; reading stopped, ask the sender for a smaller bundle")
            members.append(_Member(name=name, data=data))

    walk(root, "", 0)
    return members


def _read_regular_file(path: Path, name: str, display: str, limits: BundleLimits) -> bytes:
    # O_NOFOLLOW and O_NONBLOCK: if the file is swapped for a link or FIFO after it was
    # listed, opening fails or returns at once instead of following or blocking.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise BundleError(f"{display}: {name!r} could not be opened ({exc.strerror or exc}); links are not "
                          "followed and unreadable files stop the read, check the file") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BundleError(f"{display}: {name!r} is not a plain file; it was refused")
        if info.st_size > limits.max_member_bytes:
            raise BundleError(f"{display}: {name!r} is {info.st_size // MiB} MiB, over the "
                              f"{limits.max_member_bytes // MiB} MiB limit for one member; reading stopped, "
                              "leave it out or cut it, or raise the limit")
        return _read_limited(handle, info.st_size, name, display, limits)


# --------------------------------------------------------------------------- manifest -> evidence


def _assemble(path: Path, display: str, members: list[_Member], limits: BundleLimits) -> Bundle:
    warnings: list[str] = []
    root = _bundle_root(members)
    relative: list[tuple[str, bytes]] = []
    for member in members:
        name = member.name
        if root and name.startswith(root + "/"):
            name = name[len(root) + 1:]
        relative.append((name, member.data))

    by_name = {name: data for name, data in relative}
    manifest: dict = {}
    manifest_data = by_name.get(MANIFEST_NAME)
    if manifest_data is None:
        warnings.append(f"{display} has no manifest.json; every file was read as plain evidence without the "
                        "commands and exit codes that produced it")
    elif len(manifest_data) > limits.max_manifest_bytes:
        warnings.append(f"{display}: manifest.json is over {limits.max_manifest_bytes // MiB} MiB and was ignored; "
                        "every file was read as plain evidence")
    else:
        try:
            loaded = json.loads(manifest_data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            warnings.append(f"{display}: manifest.json is not valid JSON ({exc}); every file was read as plain "
                            "evidence")
        else:
            if isinstance(loaded, dict):
                manifest = loaded
            else:
                warnings.append(f"{display}: manifest.json is not a JSON object; every file was read as plain "
                                "evidence")
    if manifest:
        schema = manifest.get("schema")
        if schema != SCHEMA:
            warnings.append(f"{display}: manifest schema is {schema!r}, not {SCHEMA!r}; read as far as it matches")

    evidence: list[Evidence] = []
    claimed: set[str] = {MANIFEST_NAME}
    entries = manifest.get("evidence") if manifest else None
    if entries is not None and not isinstance(entries, list):
        warnings.append(f"{display}: manifest 'evidence' is not a list; its entries were ignored")
        entries = None
    for position, entry in enumerate(entries or []):
        if not isinstance(entry, dict):
            warnings.append(f"{display}: manifest evidence entry {position} is not an object; skipped")
            continue
        item = _evidence_from_entry(display, entry, by_name, warnings, position)
        if item is None:
            continue
        member = entry.get("member")
        if isinstance(member, str):
            claimed.add(_clean_manifest_member(member) or member)
        evidence.append(item)

    extras = [(name, data) for name, data in relative if name not in claimed and not _is_junk(name)]
    if extras and manifest:
        listed = ", ".join(name for name, _ in extras[:5]) + (" ..." if len(extras) > 5 else "")
        warnings.append(f"{display}: {len(extras)} file(s) not listed in the manifest were read as plain evidence "
                        f"(added by hand?): {listed}")
    for name, data in extras:
        evidence.append(Evidence(name=f"{display}:{name}", data=data, kind="file",
                                 meta={"bundle_member": name, "in_manifest": False}))
    return Bundle(path=path, manifest=manifest, evidence=evidence, warnings=warnings)


def _bundle_root(members: list[_Member]) -> str:
    """The top folder when every member sits under one (how tar archives usually look)."""
    names = [m.name for m in members]
    if MANIFEST_NAME in names or not names:
        return ""
    tops = {name.split("/", 1)[0] for name in names}
    if len(tops) == 1:
        top = tops.pop()
        # Only a folder holding the manifest is a bundle root; `evidence/` alone is not.
        if all("/" in name for name in names) and f"{top}/{MANIFEST_NAME}" in names:
            return top
    return ""


def _is_junk(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base in _JUNK_NAMES or base.startswith("._") or name.startswith("__MACOSX/")


def _clean_manifest_member(member: str) -> str | None:
    try:
        return _check_member_name("manifest", member)
    except BundleError:
        return None


def _evidence_from_entry(display: str, entry: dict, by_name: dict[str, bytes], warnings: list[str],
                         position: int) -> Evidence | None:
    member = entry.get("member")
    data: bytes | None = None
    error = _opt_str(entry.get("error"))
    if member is not None:
        if not isinstance(member, str):
            warnings.append(f"{display}: manifest entry {position} has a member that is not a string; skipped")
            return None
        cleaned = _clean_manifest_member(member)
        if cleaned is None:
            warnings.append(f"{display}: manifest entry {position} names member {member!r} outside the bundle; "
                            "it was ignored")
            return None
        data = by_name.get(cleaned)
        if data is None:
            warnings.append(f"{display}: manifest lists {cleaned!r} but the bundle does not hold it")
            error = error or f"{cleaned} is listed in the manifest but missing from the bundle"
        name = f"{display}:{cleaned}"
    else:
        original = _opt_str(entry.get("name")) or f"entry-{position}"
        name = f"{display}:{original}"
    kind = entry.get("kind") if entry.get("kind") in ("file", "command", "reading") else "file"
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    meta = dict(meta)
    if isinstance(entry.get("name"), str):
        meta.setdefault("collected_as", entry["name"])
    if member is not None:
        meta.setdefault("bundle_member", member)
    return Evidence(
        name=name,
        data=data,
        kind=kind,
        command=_opt_str(entry.get("command")),
        exit_code=entry.get("exit_code") if isinstance(entry.get("exit_code"), int)
        and not isinstance(entry.get("exit_code"), bool) else None,
        duration_s=float(entry["duration_s"]) if isinstance(entry.get("duration_s"), (int, float))
        and not isinstance(entry.get("duration_s"), bool) else None,
        stderr=_opt_str(entry.get("stderr")) or "",
        timed_out=entry.get("timed_out") is True,
        error=error,
        format_hint=_opt_str(entry.get("format_hint")),
        meta=meta,
    )


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# --------------------------------------------------------------------------- writing


def write_bundle(evidence: list[Evidence], manifest: dict, out: Path) -> Path:
    """Write a bundle: `out` ending in .tar.gz/.tgz is an archive, anything else a folder.

    `manifest` carries what the caller knows (host, tools, driver versions); the schema,
    k3diag version, creation time and one entry per evidence are added here. Member order
    and archive metadata are deterministic, so the same evidence gives the same archive.
    """
    out = Path(out)
    members, full_manifest = _plan_members(evidence, manifest)
    manifest_bytes = (json.dumps(full_manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode("utf-8")
    lowered = out.name.lower()
    if lowered.endswith((".tar.gz", ".tgz")):
        _write_archive(out, manifest_bytes, members, full_manifest)
    else:
        _write_folder(out, manifest_bytes, members)
    return out


def check_output(out: Path) -> None:
    """Raise BundleError now if `write_bundle(..., out)` could not write there, so that `collect`
    fails before minutes of collection and benchmarks rather than after. Folders that do not exist
    yet are fine (they are created); nothing is left behind."""
    out = Path(out)
    is_archive = out.name.lower().endswith((".tar.gz", ".tgz"))
    if out.is_dir():
        if is_archive:
            raise BundleError(f"{out} is a folder; give a file name for the archive")
        if any(out.iterdir()):
            raise BundleError(f"{out} already exists and is not an empty folder; choose another name or remove it")
    elif out.exists() and not is_archive:
        raise BundleError(f"{out} already exists and is not a folder; choose another name or end it in .tar.gz")
    ancestor = out.parent if str(out.parent) else Path(".")
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise BundleError(f"could not write {out}: {ancestor} is a file, not a folder; check the path")
    try:
        fd, probe = tempfile.mkstemp(prefix=".k3diag-", suffix=".tmp", dir=ancestor)
    except OSError as exc:
        raise BundleError(f"could not write {out}: {ancestor} is not writable ({exc.strerror or exc}); "
                          "choose another folder") from None
    os.close(fd)
    _remove_quietly(probe)


def _plan_members(evidence: list[Evidence], manifest: dict) -> tuple[list[tuple[str, Evidence]], dict]:
    full = dict(manifest)
    full["schema"] = SCHEMA
    full.setdefault("k3diag_version", __version__)
    full.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    used: set[str] = set()
    members: list[tuple[str, Evidence]] = []
    entries: list[dict] = []
    for item in evidence:
        has_content = item.data is not None or item.path is not None
        member = None
        if has_content:
            member = f"{EVIDENCE_DIR}/{_unique(_safe_file_name(item), used)}"
            members.append((member, item))
        entries.append(item.to_manifest(member))
    full["evidence"] = entries
    return members, full


def _safe_file_name(item: Evidence) -> str:
    base = item.name.replace("\\", "/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._") or "evidence"
    base = base[:100]
    if "." not in base:
        base += ".json" if item.kind == "reading" else ".txt"
    return base


def _unique(name: str, used: set[str]) -> str:
    candidate = name
    stem, dot, suffix = name.partition(".")
    counter = 2
    while candidate.lower() in used:
        candidate = f"{stem}-{counter}{dot}{suffix}"
        counter += 1
    used.add(candidate.lower())
    return candidate


def _content(item: Evidence) -> bytes:
    if item.data is not None:
        return item.data
    data, _ = item.read_bytes()
    return data


def _write_folder(out: Path, manifest_bytes: bytes, members: list[tuple[str, Evidence]]) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"{out} already exists and is not an empty folder; choose another name or remove it")
    try:
        (out / EVIDENCE_DIR).mkdir(parents=True, exist_ok=True)
        (out / MANIFEST_NAME).write_bytes(manifest_bytes)
        for member, item in members:
            (out / member).write_bytes(_content(item))
    except OSError as exc:
        raise BundleError(f"could not write the bundle folder {out} ({exc.strerror or exc}); check the path and "
                          "free space") from None


def _write_archive(out: Path, manifest_bytes: bytes, members: list[tuple[str, Evidence]], manifest: dict) -> None:
    top = out.name
    for suffix in (".tar.gz", ".tgz"):
        if top.lower().endswith(suffix):
            top = top[: -len(suffix)]
    top = re.sub(r"[^A-Za-z0-9._-]+", "_", top).strip("._") or "bundle"
    mtime = _manifest_mtime(manifest)
    directory = out.parent if str(out.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(prefix=".k3diag-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise BundleError(f"could not write {out} ({exc.strerror or exc}); check the folder exists and is "
                          "writable") from None
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
            with tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as archive:
                _add_dir(archive, top, mtime)
                _add_bytes(archive, f"{top}/{MANIFEST_NAME}", manifest_bytes, mtime)
                if members:
                    _add_dir(archive, f"{top}/{EVIDENCE_DIR}", mtime)
                for member, item in members:
                    _add_bytes(archive, f"{top}/{member}", _content(item), mtime)
        os.replace(temp_name, out)
    except OSError as exc:
        _remove_quietly(temp_name)
        raise BundleError(f"could not write {out} ({exc.strerror or exc}); check free space and permissions") from None
    except BaseException:
        _remove_quietly(temp_name)
        raise
    try:
        os.chmod(out, 0o644)
    except OSError:
        pass


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def _manifest_mtime(manifest: dict) -> int:
    created = manifest.get("created") or manifest.get("collected_at")
    if isinstance(created, str):
        try:
            return int(datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())
        except ValueError:
            pass
    return 0


def _tar_info(name: str, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_dir(archive: tarfile.TarFile, name: str, mtime: int) -> None:
    info = _tar_info(name, mtime)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    archive.addfile(info)


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = _tar_info(name, mtime)
    info.size = len(data)
    info.mode = 0o644
    archive.addfile(info, io.BytesIO(data))
