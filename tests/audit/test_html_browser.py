"""The HTML report in a real headless browser (Debian's chromium): it renders, the screenshot shows a
drawing, no console errors, and script/HTML from a bundle's logs shows up as text, not as elements."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.bundle import read_bundle, write_bundle
from k3diag.cli import app
from tests.browser import CHROMIUM, png_scanlines, run_chromium
from k3diag.evidence import Evidence

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"
HOSTILE = b"<script>alert(1)</script><img src=x onerror=alert(2)>\n"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian's chromium is not installed (apt-get install -y chromium)")


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
    done = run_chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,1000",
                     report_html.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    width, height, raw = png_scanlines(shot)
    assert (width, height) == (1400, 1000)
    # a blank page is one colour; the report has text, badges and the coloured drawing
    assert len(set(raw)) > 100
    assert shot.stat().st_size > 30_000
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
               or "Refused to" in line]
    assert console == [], console


def test_hostile_text_is_text_in_the_dom(report_html: Path, tmp_path: Path) -> None:
    done = run_chromium(tmp_path / "profile", "--dump-dom", report_html.as_uri())
    dom = done.stdout
    assert "<svg" in dom and "The checklist" in dom
    assert not re.search(r"<script\b", dom, re.I), "a script element from the bundle reached the DOM"
    assert not re.search(r"<img\b", dom, re.I)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in dom
    assert dom.count('class="q"') == 12


_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
# Measures every badge in the page as laid out: a badge whose text is wider than its box is clipped or spills.
_MEASURE = ("<script>addEventListener('load',()=>{const bad=[...document.querySelectorAll('.badge')].filter("
            "b=>b.scrollWidth>b.clientWidth+1||b.getBoundingClientRect().height>30).map(b=>b.textContent);"
            "const out=document.createElement('pre');out.id='measured';out.textContent="
            "'badges='+document.querySelectorAll('.badge').length+' clipped='+JSON.stringify(bad);"
            "document.body.appendChild(out);});</script>")


def _measured(page: Path, tmp_path: Path, width: int) -> str:
    probe = tmp_path / f"probe-{width}.html"
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    probe.write_text(text.replace("</body>", _MEASURE + "</body>"))
    done = run_chromium(tmp_path / f"profile-{width}", f"--window-size={width},1200", "--virtual-time-budget=3000",
                     "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="measured">([^<]*)</pre>', done.stdout)
    assert found, done.stderr[-2000:]
    return found.group(1)


@pytest.mark.parametrize("width", [1280, 820])
def test_no_badge_is_clipped(report_html: Path, tmp_path: Path, width: int) -> None:
    assert _measured(report_html, tmp_path, width) == "badges=12 clipped=[]"


def test_english_by_default_chinese_on_request(report_html: Path, tmp_path: Path) -> None:
    """Without CJK fonts the seed's Chinese wording is boxes: the default report has none; `--lang zh` adds it."""
    dom = run_chromium(tmp_path / "profile", "--dump-dom", report_html.as_uri()).stdout
    assert "Does every GPU run at PCIe x16 with all cards installed?" in dom
    assert not _CJK.search(dom), _CJK.search(dom)
    zh = tmp_path / "zh.html"
    out = report_html.parent / "xss.tar.gz"
    result = CliRunner().invoke(app, ["audit", str(out), "--html", str(zh), "--lang", "zh"])
    assert result.exit_code == 2, result.output
    dom = run_chromium(tmp_path / "profile-zh", "--dump-dom", zh.as_uri()).stdout
    assert dom.count('<div class="seed" lang="zh">') == 12
    assert '<div class="seed" lang="zh">每張 GPU 實際運行在 PCIe x16 還是 x8' in dom
    refused = CliRunner().invoke(app, ["audit", str(out), "--lang", "fr"])
    assert refused.exit_code == 64 and "--lang must be en or zh, not 'fr'" in refused.stderr
