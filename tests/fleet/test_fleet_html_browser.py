"""The fleet page in a real headless browser (Debian's chromium): the node grid is drawn in the state
colours, outliers' differences are there side by side, and a hostile node name stays text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app
from tests.browser import CHROMIUM, png_rows, run_chromium

FAIL_RGB = (0xC6, 0x28, 0x28)
OK_RGB = (0x2E, 0x7D, 0x32)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian's chromium is not installed (apt-get install -y chromium)")


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
    result = run_chromium(tmp_path / "profile", "--window-size=1200,900", f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), result.stderr[-2000:]
    width, height, rows = png_rows(shot)
    assert (width, height) == (1200, 900)
    top = rows[: height // 3]
    assert _count(top, FAIL_RGB) > 1000, "no failing node drawn red in the grid"
    assert _count(top, OK_RGB) > 3000, "no passing node drawn green in the grid"


def test_the_dom_has_the_outliers_side_by_side_and_no_injected_element(page: Path, tmp_path: Path) -> None:
    result = run_chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    dom = result.stdout
    assert dom.count('class="node') == 8
    assert "<th>gpu004</th><th>gpu006</th>" in dom
    assert "x8 of x16" in dom and "nvmlDeviceGetCurrPcieLinkWidth=8" in dom
    assert "<img" not in dom and "&lt;img src=x onerror=alert(1)&gt;" in dom
