"""A bundle's manifest or a result file is someone else's file: a host name holding `ESC [31m` or an OSC
title sequence must reach no terminal, Nagios status line, Markdown or HTML file as a control character;
it is shown escaped (`\\x1b`), as analyze and audit show it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"
SERVING = REPO / "fixtures" / "serving" / "seed-4x4090"
HOSTILE = "gpu042\x1b[31m\x1b]0;owned\x07\x9b2J"


def _k3diag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3diag", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def _hostile_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "node"
    shutil.copytree(EXAMPLE, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["host"]["hostname"] = HOSTILE
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def _no_controls(text: str) -> None:
    assert not any(ch in text for ch in "\x1b\x07\x9b"), repr(text[:400])


def test_fleet_text_markdown_and_html_do_not_take_a_hostile_host_name_for_the_node(tmp_path: Path) -> None:
    # a host name with control characters is no host name (`model.identity.is_hostname`): the node is named
    # after its input, as when the evidence names no host, and a drain list never carries the sequence
    bundle = _hostile_bundle(tmp_path)
    md, html = tmp_path / "fleet.md", tmp_path / "fleet.html"
    result = _k3diag("fleet", str(bundle), "--md", str(md), "--html", str(html))
    assert result.returncode in (0, 1, 2), result.stderr
    assert "drain (1): node\n" in result.stdout
    for text in (result.stdout, md.read_text(), html.read_text()):
        _no_controls(text)
        assert "gpu042" not in text


def test_check_status_lines_do_not_carry_it_and_the_report_says_why(tmp_path: Path) -> None:
    bundle = _hostile_bundle(tmp_path)
    for fmt in ("nagios", "text", "npd", "nhc"):
        result = _k3diag("check", "--from", str(bundle), "--format", fmt, "--fail-on", "never")
        _no_controls(result.stdout)
        assert "gpu042" not in result.stdout, (fmt, result.stdout)
        if fmt == "nagios":
            assert result.stdout.startswith("K3DIAG ") and result.stdout.count("\n") == 1, result.stdout
    report = json.loads(_k3diag("check", "--from", str(bundle), "--format", "json", "--fail-on", "never").stdout)
    assert {"subject": "bundle manifest", "level": "warn",
            "message": "the manifest's host name 'gpu042\\x1b[31m\\x1b]0;owned\\x07\\x9b2J' is no host name "
                       "(letters, digits, dashes and dots only), so it does not name this machine"} in report["notes"]


def test_a_newline_in_the_manifests_host_name_forges_no_second_status_line(tmp_path: Path) -> None:
    # `"hostname": "gpu01\nevil_metric 1"` printed `K3DIAG OK - gpu01` and then a line of the bundle's choosing
    bundle = tmp_path / "node"
    shutil.copytree(EXAMPLE, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["host"]["hostname"] = 'gpu01\nevil_metric{a="b"} 1'
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    for fmt, prefix in (("nagios", "K3DIAG "), ("text", "k3diag check node")):
        out = _k3diag("check", "--from", str(bundle), "--format", fmt, "--fail-on", "never").stdout
        assert out.startswith(prefix) and "evil_metric" not in out, out
        if fmt == "nagios":
            assert out.count("\n") == 1


def test_serving_shows_a_hostile_model_name_escaped(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(SERVING / "results", results)
    first = results / "tp2-gpus01.jsonl"
    lines = [json.loads(line) for line in first.read_text().splitlines()]
    for doc in lines:
        doc["model_id"] = "evil\x1b]8;;http://x\x07model"
    first.write_text("\n".join(json.dumps(doc) for doc in lines) + "\n")
    html = tmp_path / "serving.html"
    result = _k3diag("serving", str(results), "--from", str(SERVING / "bundle"), "--html", str(html))
    for text in (result.stdout, html.read_text()):
        _no_controls(text)
        assert "evil\\x1b]8;;http://x\\x07model" in text
