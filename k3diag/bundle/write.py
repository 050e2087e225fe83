"""Writing a bundle: `NAME.tar.gz`/`NAME.tgz` is an archive, a name without an archive suffix a folder.

Nothing half-written is ever left under the final name: the archive or folder is written under a
hidden temporary name beside it and renamed into place at the end; any failure, Ctrl-C or SIGTERM
(which `collect` turns into an exception) removes the temporary. An existing output is replaced only
with `force`, and a folder only when it is a bundle itself. Missing parent folders are not created.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from k3diag import __version__
from k3diag.filemode import new_file_mode
from k3diag.bundle.common import EVIDENCE_DIR, MANIFEST_NAME, SCHEMA, BundleError
from k3diag.evidence import Evidence
from k3diag.model import json_text

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
# Suffixes of archives k3diag does not write: `-o out.zip` must not become a folder named out.zip.
_OTHER_ARCHIVES = (".zip", ".tar", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tbz", ".tar.zst", ".tzst", ".gz",
                   ".xz", ".bz2", ".zst", ".7z", ".rar")
TEMP_PREFIX = ".k3diag-"
TEMP_SUFFIX = ".tmp"


def is_archive_name(out: Path) -> bool:
    return out.name.lower().endswith(ARCHIVE_SUFFIXES)


def check_output(out: Path, force: bool = False) -> None:
    """Raise BundleError now if `write_bundle(..., out, force)` could not or must not write there,
    so that `collect` fails before minutes of collection rather than after. Nothing is left behind."""
    out = Path(out)
    lowered = out.name.lower()
    is_archive = is_archive_name(out)
    if not is_archive and lowered.endswith(_OTHER_ARCHIVES):
        suffix = next(s for s in _OTHER_ARCHIVES if lowered.endswith(s))
        raise BundleError(f"{out}: k3diag writes a .tar.gz archive or a folder, not {suffix}; name it "
                          f"{out.name[: -len(suffix)] or 'bundle'}.tar.gz, or give a folder name")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        ancestor = parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if ancestor.exists() and not ancestor.is_dir():
            raise BundleError(f"could not write {out}: {ancestor} is a file, not a folder; check the path")
        raise BundleError(f"the folder {parent.absolute()} does not exist; create it first (k3diag does not create "
                          "missing folders) or choose another place")
    if not parent.is_dir():
        raise BundleError(f"could not write {out}: {parent} is a file, not a folder; check the path")
    if out.is_dir():
        if is_archive:
            raise BundleError(f"{out} is a folder; give a file name for the archive")
        if any(out.iterdir()):
            if not force:
                raise BundleError(f"{out} already exists and is not an empty folder; choose another name, or pass "
                                  "--force to replace a bundle folder")
            if not (out / MANIFEST_NAME).is_file():
                raise BundleError(f"{out} is a folder that is not a k3diag bundle (no manifest.json); --force "
                                  "replaces only bundles, choose another name")
    elif out.exists() or out.is_symlink():
        if not is_archive:
            raise BundleError(f"{out} already exists and is not a folder; choose another name or end it in .tar.gz")
        if not force:
            raise BundleError(f"{out} already exists; choose another name, or pass --force to replace it")
        if not out.is_file():
            raise BundleError(f"{out} exists and is not a regular file; it was left alone, choose another name")
    try:
        fd, probe = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=parent)
    except OSError as exc:
        raise BundleError(f"could not write {out}: {parent} is not writable ({exc.strerror or exc}); "
                          "choose another folder") from None
    os.close(fd)
    _remove_quietly(probe)


def write_bundle(evidence: list[Evidence], manifest: dict, out: Path, force: bool = False,
                 top: str | None = None) -> Path:
    """Write a bundle: `out` ending in .tar.gz/.tgz is an archive, anything else a folder.

    `manifest` carries what the caller knows (host, tools, driver versions); the schema,
    k3diag version, creation time and one entry per evidence are added here. Member order
    and archive metadata are deterministic, so the same evidence gives the same archive.
    `top` names the archive's top folder (default: the file name without its suffix); a
    redacted bundle passes a redacted one, since every member name carries it.
    """
    out = Path(out)
    check_output(out, force)
    members, full_manifest = _plan_members(evidence, manifest)
    manifest_bytes = (json_text.dumps(full_manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode(
        "utf-8", errors="backslashreplace")
    if is_archive_name(out):
        _write_archive(out, manifest_bytes, members, full_manifest, top)
    else:
        _write_folder(out, manifest_bytes, members, force)
    return out


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


def _write_folder(out: Path, manifest_bytes: bytes, members: list[tuple[str, Evidence]], force: bool) -> None:
    parent = out.parent if str(out.parent) else Path(".")
    try:
        temp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=parent))
    except OSError as exc:
        raise BundleError(f"could not write the bundle folder {out} ({exc.strerror or exc}); check the path") from None
    old: Path | None = None
    try:
        (temp / EVIDENCE_DIR).mkdir()
        (temp / MANIFEST_NAME).write_bytes(manifest_bytes)
        for member, item in members:
            (temp / member).write_bytes(_content(item))
        os.chmod(temp, 0o755)
        if out.is_dir() and any(out.iterdir()):
            if not force:  # checked before collection too; the folder may have filled since
                raise BundleError(f"{out} already exists and is not an empty folder; choose another name or "
                                  "pass --force")
            old = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, suffix=".old", dir=parent))
            os.rmdir(old)
            os.rename(out, old)
        os.replace(temp, out)
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        if old is not None and not out.exists():
            os.rename(old, out)  # put the previous bundle back
            old = None
        raise BundleError(f"could not write the bundle folder {out} ({exc.strerror or exc}); check the path and "
                          "free space") from None
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        if old is not None and not out.exists():
            os.rename(old, out)
            old = None
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_archive(out: Path, manifest_bytes: bytes, members: list[tuple[str, Evidence]], manifest: dict,
                   top: str | None) -> None:
    if top is None:
        top = out.name
        for suffix in ARCHIVE_SUFFIXES:
            if top.lower().endswith(suffix):
                top = top[: -len(suffix)]
    top = re.sub(r"[^A-Za-z0-9._-]+", "_", top).strip("._") or "bundle"
    mtime = _manifest_mtime(manifest)
    directory = out.parent if str(out.parent) else Path(".")
    try:
        fd, temp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=directory)
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
        os.chmod(temp_name, new_file_mode())  # mkstemp's 0600 would ignore the umask
        os.replace(temp_name, out)
    except OSError as exc:
        _remove_quietly(temp_name)
        raise BundleError(f"could not write {out} ({exc.strerror or exc}); check free space and permissions") from None
    except BaseException:
        _remove_quietly(temp_name)
        raise


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
