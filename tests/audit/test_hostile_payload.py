"""One hostile payload (HTML, Markdown links and images, a `javascript:` URL, autolinks, backticks, pipes,
terminal escape sequences, newlines that forge lines) put in every place bundle text reaches a report:
the manifest's host and time, member names (one not UTF-8), manifest commands and errors, GPU names, lspci
device names, a file of plain evidence. Each output format is checked for what a reader would get:
the HTML in headless Chromium with its Content-Security-Policy removed, the Markdown through a CommonMark
renderer, the terminal (plain and coloured) for escape sequences, the JSON for valid UTF-8.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.bundle import read_bundle, write_bundle
from k3diag.cli import app
from tests.browser import CHROMIUM, run_chromium
from k3diag.evidence import Evidence

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"

PAYLOAD = ("<script>alert(1)</script><img src=x onerror=alert(2)>[click](javascript:alert(3)) "
           "![pic](https://evil.example/p.png) https://evil.example/x www.evil.example `tick`` |pipe| "
           "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e")
FORGED = PAYLOAD + "\n# Forged heading\n- EVIDENCE forged line\n> quoted"
NAME = PAYLOAD.replace("/", "_")  # a file name cannot hold a slash; everything else it can
TERMINAL_BYTES = ("\x1b]0;pwned", "\x1b[2J", "\x07", "\x9b", "\u202e")

runner = CliRunner()


@pytest.fixture(scope="module")
def hostile_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile") / "bundle"
    evidence = []
    for item in read_bundle(BAD).evidence:
        data = item.data or b""
        if item.name.endswith("nvml-readings.json"):
            readings = json.loads(data)
            readings["devices"][0]["name"] = PAYLOAD
            data = json.dumps(readings).encode()
        elif item.name.endswith("lspci-vvv.txt"):
            data = data.replace(b"NVIDIA Corporation", b"NVIDIA Corporation " + PAYLOAD.encode(), 3)
        evidence.append(Evidence(name=item.name.rsplit(":", 1)[-1], data=data, kind=item.kind, command=item.command,
                                 format_hint=item.format_hint))
    evidence.append(Evidence(name="vendor-notes.txt", data=FORGED.encode(), kind="command", command=FORGED,
                             error=FORGED, stderr=FORGED))
    write_bundle(evidence, {"host": {"hostname": FORGED}, "created": FORGED}, folder)
    # Member names no writer of ours would make: the payload, and bytes that are not UTF-8.
    (folder / "evidence" / f"{NAME}.txt").write_bytes(FORGED.encode())
    os.mkdir(os.path.join(os.fsencode(folder), b"evidence", b"bad\xffname"))
    (Path(os.fsdecode(os.path.join(os.fsencode(folder), b"evidence", b"bad\xffname"))) / "x.txt").write_text("x")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["evidence"].append({"name": FORGED, "member": f"evidence/missing-{NAME}", "kind": "command",
                                 "command": FORGED, "error": FORGED, "stderr": FORGED})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _no_terminal_sequences(text: str) -> None:
    for sequence in TERMINAL_BYTES:
        assert sequence not in text, repr(sequence)
    assert "\\x1b]0;pwned\\x07" in text  # shown, escaped, so the reader sees it was there


def _no_forged_lines(text: str) -> None:
    for line in text.splitlines():
        assert not line.lstrip().startswith(("# Forged", "- EVIDENCE", "> quoted")), line


def test_markdown_renders_no_markup_from_the_bundle(hostile_bundle: Path, tmp_path: Path) -> None:
    from markdown_it import MarkdownIt

    md = tmp_path / "report.md"
    result = runner.invoke(app, ["audit", str(hostile_bundle), "--md", str(md), "--brief"])
    assert result.exit_code in (1, 2), result.output
    text = md.read_text(encoding="utf-8")
    _no_terminal_sequences(text)
    _no_forged_lines(text)
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert not re.search(r"<(script|img|iframe|a)\b", html), re.findall(r"<(?:script|img|iframe|a)\b[^>]*>", html)
    assert "javascript:" not in re.sub(r"<[^>]+>", "", html) or "href" not in html
    # The payload is there as text, where it was quoted (the host name, the hand-added file).
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    # Bare URLs are broken so no autolinking renderer (GitHub, GitLab) makes them links.
    assert "https://evil.example/x" not in text.replace("\\:", ":").replace("`", "") or "https\\://evil" in text


def test_terminal_plain_and_coloured_show_escapes_not_sequences(hostile_bundle: Path) -> None:
    from k3diag.audit.checklist import audit_bundle
    from k3diag.audit.terminal import render_terminal

    result = runner.invoke(app, ["audit", str(hostile_bundle)])
    _no_terminal_sequences(result.stdout)
    for sequence in TERMINAL_BYTES:
        assert sequence not in result.stderr, repr(sequence)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    os.environ.pop("NO_COLOR", None)
    render_terminal(audit_bundle(hostile_bundle), stream)
    coloured = stream.getvalue()
    assert "\x1b[" in coloured  # rich's own colours are there: the check below is not vacuous
    for sequence in TERMINAL_BYTES:
        assert sequence not in coloured, repr(sequence)


def test_json_is_valid_utf8_and_carries_the_payload_as_data(hostile_bundle: Path) -> None:
    for command in (["audit", str(hostile_bundle), "--json"], ["analyze", str(hostile_bundle), "--json"]):
        result = runner.invoke(app, command)
        text = result.stdout_bytes.decode("utf-8")  # strict: invalid UTF-8 raises here
        report = json.loads(text)
        assert "\ud800" not in text and not re.search("[\ud800-\udfff]", text)
        assert PAYLOAD.split("\x1b")[0] in json.dumps(report, ensure_ascii=False)


def test_analyze_terminal_output_shows_no_sequences(hostile_bundle: Path) -> None:
    result = runner.invoke(app, ["analyze", str(hostile_bundle)])
    assert "\\x1b]0;pwned" in result.stdout, result.stdout[-3000:]  # the payload, escaped
    for sequence in TERMINAL_BYTES:
        assert sequence not in result.stdout, repr(sequence)
        assert sequence not in result.stderr, repr(sequence)


def _chromium_dom(html_file: Path, profile: Path) -> str:
    done = run_chromium(profile, "--dump-dom", html_file.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_html_in_chromium_without_its_csp_has_no_element_from_the_bundle(hostile_bundle: Path, tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    result = runner.invoke(app, ["audit", str(hostile_bundle), "--html", str(html)])
    assert html.stat().st_size > 10_000, result.output
    page = html.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in page
    # Without its CSP the page's own escaping is all that stands between the payload and the reader.
    naked = tmp_path / "naked.html"
    naked.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page), encoding="utf-8")
    dom = _chromium_dom(naked, tmp_path / "profile")
    assert "Content-Security-Policy" not in dom
    assert "<script" not in dom.lower()
    assert not re.search(r'<img[^>]*src="x"', dom)
    assert "onerror=" not in dom.replace("onerror=alert(2)&gt;", "")
    assert 'href="javascript' not in dom.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # there, as text
    for sequence in ("\x1b", "\x07", "\x9b"):
        assert sequence not in page, repr(sequence)
