"""The fleet page in a real headless browser (Debian's chromium): the node grid is drawn in the state
colours, outliers' differences are there side by side, and a hostile node name stays text."""

from __future__ import annotations

import json
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

CHROMIUM = Path("/usr/bin/chromium")
FAIL_RGB = (0xC6, 0x28, 0x28)
OK_RGB = (0x2E, 0x7D, 0x32)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian's chromium is not installed (apt-get install -y chromium)")


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120,
    )


def _pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered RGB(A) rows of an 8-bit PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, colour = 8, b"", 0, 0, 2
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 4 if colour == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - bpp] if x >= bpp else 0
            up = previous[x]
            corner = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
        previous = line
    return width, height, rows


def _count(rows: list[bytes], rgb: tuple[int, int, int]) -> int:
    wanted = bytes(rgb)
    return sum(row[i:i + 3] == wanted for row in rows for i in range(0, len(row), 3))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, fleet_dir: Path) -> Path:
    folder = tmp_path_factory.mktemp("fleet-html")
    report = json.loads(CliRunner().invoke(app, ["check", "--from", str(fleet_dir / "gpu001"), "--format", "json",
                                                 "--node", "<img src=x onerror=alert(1)>"]).stdout)
    hostile = folder / "hostile.json"
    hostile.write_text(json.dumps(report))
    html = folder / "fleet.html"
    result = CliRunner().invoke(app, ["fleet", str(fleet_dir), str(hostile), "--html", str(html)])
    assert result.exit_code == 2, result.output
    return html


def test_grid_is_drawn_in_state_colours(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "fleet.png"
    result = _chromium(tmp_path / "profile", "--window-size=1200,900", f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), result.stderr[-2000:]
    width, height, rows = _pixels(shot)
    assert (width, height) == (1200, 900)
    top = rows[: height // 3]
    assert _count(top, FAIL_RGB) > 1000, "no failing node drawn red in the grid"
    assert _count(top, OK_RGB) > 3000, "no passing node drawn green in the grid"


def test_the_dom_has_the_outliers_side_by_side_and_no_injected_element(page: Path, tmp_path: Path) -> None:
    result = _chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    dom = result.stdout
    assert dom.count('class="node') == 8
    assert "<th>gpu004</th><th>gpu006</th>" in dom
    assert "x8 of x16" in dom and "nvmlDeviceGetCurrPcieLinkWidth=8" in dom
    assert "<img" not in dom and "&lt;img src=x onerror=alert(1)&gt;" in dom
