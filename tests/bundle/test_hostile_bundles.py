"""Bundles crafted to escape, stall or confuse: each is refused (nothing extracted) with a clear message."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from k3diag.bundle import BundleError, BundleLimits, read_bundle

MiB = 1024 * 1024


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], compress: bool = True) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                archive.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    raw = buffer.getvalue()
    path.write_bytes(gzip.compress(raw, mtime=0) if compress else raw)
    return path


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _special(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.devmajor, info.devminor = 1, 3
    return info


def _nothing_written(tmp_path: Path, before: set[str]) -> None:
    after = {str(p) for p in tmp_path.rglob("*")}
    assert after == before, "reading a bundle must never write to disk"


@pytest.mark.parametrize("name, expected", [
    ("../../etc/passwd", "points outside the bundle with '..'"),
    ("node/../../../tmp/evil", "points outside the bundle with '..'"),
    ("/etc/passwd", "has an absolute path"),
    ("C:\\Windows\\evil.txt", "has an absolute path"),
    ("node\\..\\..\\evil", "points outside the bundle with '..'"),
])
def test_traversal_and_absolute_paths_are_refused(tmp_path: Path, name: str, expected: str) -> None:
    bundle = _tar(tmp_path / "evil.tar.gz", [("manifest.json", b"{}"), (name, b"root:x:0:0")])
    before = {str(p) for p in tmp_path.rglob("*")}
    with pytest.raises(BundleError, match=expected) as caught:
        read_bundle(bundle)
    assert "nothing was extracted" in str(caught.value)
    _nothing_written(tmp_path, before)
    assert not Path("/tmp/evil").exists()


@pytest.mark.parametrize("kind, word", [(tarfile.SYMTYPE, "symbolic link"), (tarfile.LNKTYPE, "hard link")])
def test_link_members_are_refused(tmp_path: Path, kind: bytes, word: str) -> None:
    bundle = _tar(tmp_path / "links.tar.gz", [("manifest.json", b"{}"), _link("evidence/topo.txt", "/etc/shadow", kind)])
    with pytest.raises(BundleError, match=word) as caught:
        read_bundle(bundle)
    assert "/etc/shadow" in str(caught.value) and "never hold links" in str(caught.value)


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_device_and_fifo_members_are_refused(tmp_path: Path, kind: bytes) -> None:
    bundle = _tar(tmp_path / "dev.tar.gz", [("manifest.json", b"{}"), _special("evidence/zero", kind)])
    with pytest.raises(BundleError, match="device file or FIFO"):
        read_bundle(bundle)


def test_decompression_bomb_stops_while_reading(tmp_path: Path) -> None:
    # 100 MB of zeros in one member compresses to about 100 KB.
    zeros = b"\x00" * (100 * MiB)
    bomb = _tar(tmp_path / "bomb.tar.gz", [("manifest.json", b"{}"), ("evidence/zeros.txt", zeros)])
    del zeros
    assert bomb.stat().st_size < 200 * 1024
    limits = BundleLimits(max_member_bytes=512 * MiB, max_total_bytes=512 * MiB, ratio_check_after_bytes=8 * MiB,
                          max_compression_ratio=100)
    started = time.monotonic()
    with pytest.raises(BundleError, match="decompression bomb") as caught:
        read_bundle(bomb, limits)
    assert "expands more than 100 times" in str(caught.value)
    assert time.monotonic() - started < 10


def test_bomb_with_small_total_limit_stops_at_the_limit(tmp_path: Path) -> None:
    many = [("manifest.json", b"{}")] + [(f"evidence/z{i}.txt", b"\x00" * (4 * MiB)) for i in range(8)]
    bomb = _tar(tmp_path / "bomb2.tar.gz", many)
    limits = BundleLimits(max_total_bytes=10 * MiB, max_compression_ratio=1e9)
    with pytest.raises(BundleError, match="limit for one bundle|limit for a whole bundle"):
        read_bundle(bomb, limits)


def test_huge_member_is_refused_before_it_is_read(tmp_path: Path) -> None:
    bundle = _tar(tmp_path / "huge.tar.gz", [("manifest.json", b"{}"), ("evidence/big.log", b"a" * (3 * MiB))])
    limits = BundleLimits(max_member_bytes=1 * MiB)
    with pytest.raises(BundleError, match=r"'evidence/big.log' is 3 MiB, over the 1 MiB limit for one member"):
        read_bundle(bundle, limits)


def test_too_many_members_is_refused(tmp_path: Path) -> None:
    bundle = _tar(tmp_path / "many.tar.gz", [(f"evidence/{i}.txt", b"x") for i in range(30)])
    with pytest.raises(BundleError, match="more than 10 members"):
        read_bundle(bundle, BundleLimits(max_members=10))


def test_oversized_manifest_is_ignored_with_a_warning(tmp_path: Path) -> None:
    bundle = _tar(tmp_path / "m.tar.gz", [("manifest.json", b" " * 4096 + b"{}"), ("evidence/a.txt", b"GPU0")])
    result = read_bundle(bundle, BundleLimits(max_manifest_bytes=1024))
    assert any("manifest.json is over" in w for w in result.warnings)
    assert [e.data for e in result.evidence] == [b"GPU0"]


def test_folder_with_a_symlink_is_refused_without_following_it(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    (folder / "evidence").mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    os.symlink("/etc/passwd", folder / "evidence" / "topo.txt")
    with pytest.raises(BundleError, match="symbolic link.*'/etc/passwd'.*never") as caught:
        read_bundle(folder)
    assert "root:" not in str(caught.value)


def test_folder_with_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    os.symlink("/etc", folder / "evidence")
    with pytest.raises(BundleError, match="symbolic link"):
        read_bundle(folder)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_folder_with_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    os.mkfifo(folder / "pipe")
    started = time.monotonic()
    with pytest.raises(BundleError, match="device file, FIFO or socket"):
        read_bundle(folder)
    assert time.monotonic() - started < 5


def test_folder_member_over_the_limit_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    (folder / "big.log").write_bytes(b"a" * (2 * MiB))
    with pytest.raises(BundleError, match="over the 1 MiB limit"):
        read_bundle(folder, BundleLimits(max_member_bytes=MiB))


def test_script_tags_in_logs_are_data_not_markup(tmp_path: Path) -> None:
    # Neutralized rather than refused: the text is evidence; renderers escape it (see tests/audit).
    payload = b"<script>alert(1)</script><img src=x onerror=alert(2)>\n"
    bundle = _tar(tmp_path / "xss.tar.gz", [("manifest.json", b"{}"), ("evidence/log.txt", payload)])
    result = read_bundle(bundle)
    assert result.evidence[0].data == payload


def test_nothing_in_a_bundle_is_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = f"#!/bin/sh\ntouch {marker}\n".encode()
    info = tarfile.TarInfo("evidence/run.sh")
    info.size = len(script)
    info.mode = 0o755
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.addfile(info, io.BytesIO(script))
    bundle = tmp_path / "exec.tar"
    bundle.write_bytes(buffer.getvalue())
    result = read_bundle(bundle)
    assert result.evidence[0].data == script
    assert not marker.exists()
