"""`k3diag serving --html`: one self-contained page, checked as text and in headless Chromium."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app
from tests.browser import CHROMIUM, png_scanlines, run_chromium

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
SEED = FIXTURES / "seed-4x4090"
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("serving-html")
    results = folder / "results"
    shutil.copytree(SEED / "results", results)
    # a model name from hostile result files (and the log) must show as text
    for path in results.iterdir():
        if path.suffix in (".jsonl", ".log"):
            path.write_text(path.read_text().replace("Qwen/Qwen2.5-14B-Instruct", HOSTILE))
    html = folder / "serving.html"
    result = CliRunner().invoke(app, ["serving", str(results), "--from", str(SEED / "bundle"), "--slo-tpot-ms", "42",
                                      "--html", str(html)])
    assert result.exit_code == 0, result.output
    return html


def test_page_is_self_contained_and_escaped(page: Path) -> None:
    text = page.read_text()
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert not re.search(r'(?:src|href)\s*=\s*["\']?(?:https?:|//)', text)
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert text.count("<svg") == 2 and "<polyline" in text and "target 42 ms" in text
    assert "2x TP2 on GPUs 0,1 | 2,3 serves the most output tokens/s per GPU" in text
    assert "[bad] worst link inside the group: GPU0-GPU2 SYS" in text


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_page_renders_in_chromium_with_charts_and_no_console_errors(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = run_chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,1100", page.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    width, height, raw = png_scanlines(shot)
    assert (width, height) == (1400, 1100)
    assert len(set(raw)) > 100 and shot.stat().st_size > 40_000  # text, lines and bars, not a blank page
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
               or "Refused to" in line]
    assert console == [], console


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_hostile_text_stays_text_in_the_dom(page: Path, tmp_path: Path) -> None:
    done = run_chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    dom = done.stdout
    assert "<svg" in dom and "Serving benchmarks by layout" in dom
    assert "<script" not in dom and "<img" not in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in dom
