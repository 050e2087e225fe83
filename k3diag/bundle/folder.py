"""Reading a bundle folder into memory: no link followed, no hard link read, nothing but plain files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from k3diag.bundle.archive import check_unique
from k3diag.bundle.common import (
    MAX_FOLDER_DEPTH,
    BundleError,
    BundleLimits,
    Member,
    MiB,
    read_limited,
    safe_str,
)
from k3diag.model.words import counted


def read_folder(root: Path, display: str, limits: BundleLimits, warnings: list[str]) -> list[Member]:
    members: list[Member] = []
    seen: set[str] = set()
    manifests: list[str] = []
    total = 0
    replaced = 0

    def walk(folder: Path, prefix: str, depth: int) -> None:
        nonlocal total, replaced
        if depth > MAX_FOLDER_DEPTH:
            raise BundleError(f"{display}: folders nest deeper than {MAX_FOLDER_DEPTH} levels at {prefix!r}; "
                              "bundles are flat, ask the sender for the bundle `k3diag collect` made")
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise BundleError(f"{display}: could not list {safe_str(prefix)[0] or '.'} ({exc.strerror or exc}); "
                              "check its permissions") from None
        for entry in entries:
            shown, bad = safe_str(entry.name)
            replaced += bad
            name = f"{prefix}{shown}"
            if entry.is_symlink():
                try:
                    target = safe_str(os.readlink(entry.path))[0]
                except OSError:
                    target = "a path that could not be read"
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
            check_unique(display, name, seen, manifests)
            data = _read_regular_file(Path(entry.path), name, display, limits)
            total += len(data)
            if total > limits.max_total_bytes:
                raise BundleError(f"{display} holds more than {limits.max_total_bytes // MiB} MiB of evidence, "
                                  "the limit for one bundle; reading stopped, ask the sender for a smaller bundle")
            members.append(Member(name=name, data=data))

    walk(root, "", 0)
    if replaced:
        warnings.append(f"{display}: {counted(replaced, 'file name')} held bytes that are not UTF-8; "
                        + ("it is shown with \ufffd in its place" if replaced == 1 else "they are shown with \ufffd in their place"))
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
        if info.st_nlink > 1:
            # A hard link is another name for a file anywhere on the same file system (/etc/shadow):
            # a bundle someone sent never needs one, and reading it would quote that file.
            raise BundleError(f"{display}: {name!r} is a hard link ({info.st_nlink} names for one file); bundles "
                              "never hold links, so it was refused without reading it: copy the file itself into "
                              "the bundle or ask the sender to recreate it")
        if info.st_size > limits.max_member_bytes:
            raise BundleError(f"{display}: {name!r} is {info.st_size // MiB} MiB, over the "
                              f"{limits.max_member_bytes // MiB} MiB limit for one member; reading stopped, "
                              "leave it out or cut it, or raise the limit")
        return read_limited(handle, info.st_size, name, display, limits)
