"""Report files (`--html`, `--md`, `--prom-file`, bundles) are written whole or not at all, and keep what a
plain write would give them: an existing file's mode, the umask for a new one, a symbolic link as a link."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from k3diag.render.output import write_text_atomic

REPO = Path(__file__).resolve().parents[2]
SERVING = REPO / "fixtures" / "serving" / "seed-4x4090"


def test_an_existing_private_report_stays_private(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    report.write_text("old")
    report.chmod(0o600)
    write_text_atomic(report, "new")
    assert report.read_text() == "new"
    assert report.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("umask, mode", [(0o077, 0o600), (0o022, 0o644), (0o002, 0o664)])
def test_a_new_report_follows_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    previous = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "a.html", "x")
    finally:
        os.umask(previous)
    assert (tmp_path / "a.html").stat().st_mode & 0o777 == mode


def test_a_symbolic_link_stays_a_link_and_its_target_is_replaced(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    target = archive / "2026-12-03.html"
    target.write_text("old")
    link = tmp_path / "latest.html"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    assert sorted(p.name for p in archive.iterdir()) == ["2026-12-03.html"]  # no temporary file left


def _file_size_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="POSIX file size limits")
@pytest.mark.parametrize("command", [
    ["fleet", str(REPO / "fixtures" / "bundles"), "--html"],
    ["fleet", str(REPO / "fixtures" / "bundles"), "--md"],
    ["serving", str(SERVING / "results"), "--from", str(SERVING / "bundle"), "--html"],
])
def test_a_write_that_fails_keeps_the_old_report_and_exits_64(tmp_path: Path, command: list[str]) -> None:
    out = tmp_path / "summary.out"
    out.write_text("OLD GOOD REPORT\n")
    result = subprocess.run([sys.executable, "-m", "k3diag", *command, str(out)], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120,
                            preexec_fn=_file_size_limit(2048))
    assert result.returncode == 64, result.stderr
    assert f"could not write {out} (File too large)" in result.stderr, result.stderr
    assert out.read_text() == "OLD GOOD REPORT\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.out"]  # no temporary file left


def test_a_bundle_written_under_umask_077_is_private(tmp_path: Path) -> None:
    # a bundle holds host names, serials and addresses: `umask 077` must keep it the owner's
    from k3diag.bundle import write_bundle
    from k3diag.evidence import Evidence

    previous = os.umask(0o077)
    try:
        write_bundle([Evidence(name="nvidia-smi topo -m", data=b"GPU0\n")], {"host": "gpu042"}, tmp_path / "b.tar.gz")
    finally:
        os.umask(previous)
    assert (tmp_path / "b.tar.gz").stat().st_mode & 0o777 == 0o600
