"""The HTML report in a real headless browser (Debian's chromium): it renders, the screenshot shows a
drawing, no console errors, and script/HTML from a bundle's logs shows up as text, not as elements."""

from __future__ import annotations

import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.bundle import read_bundle, write_bundle
from k3diag.cli import app
from k3diag.evidence import Evidence

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"
HOSTILE = b"<script>alert(1)</script><img src=x onerror=alert(2)>\n"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian's chromium is not installed (apt-get install -y chromium)")


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120,
    )


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the filtered scanlines of a PNG (enough to judge that it is not blank)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    bundle = read_bundle(BAD)
    evidence = list(bundle.evidence) + [Evidence(name="vendor-notes.txt", data=HOSTILE)]
    out = write_bundle(evidence, {"host": {"hostname": "<script>alert(3)</script>"}}, folder / "xss.tar.gz")
    html = folder / "report.html"
    result = CliRunner().invoke(app, ["audit", str(out), "--html", str(html)])
    assert result.exit_code == 2, result.output
    return html


def test_report_renders_and_shows_the_drawing(report_html: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,1000",
                     report_html.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    width, height, raw = _png_pixels(shot)
    assert (width, height) == (1400, 1000)
    # a blank page is one colour; the report has text, badges and the coloured drawing
    assert len(set(raw)) > 100
    assert shot.stat().st_size > 30_000
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
               or "Refused to" in line]
    assert console == [], console


def test_hostile_text_is_text_in_the_dom(report_html: Path, tmp_path: Path) -> None:
    done = _chromium(tmp_path / "profile", "--dump-dom", report_html.as_uri())
    dom = done.stdout
    assert "<svg" in dom and "The checklist" in dom
    assert not re.search(r"<script\b", dom, re.I), "a script element from the bundle reached the DOM"
    assert not re.search(r"<img\b", dom, re.I)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in dom
    assert dom.count('class="q"') == 12
