"""Every real fixture rendered (terminal and JSON): no internal value or placeholder reaches the user, and the
verdict line's word agrees with the exit code and the JSON verdict."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyze"))
from fixture_corpus import corpus  # noqa: E402

from k3diag.analyze.pipeline import analyze_machine  # noqa: E402
from k3diag.analyze.verdict import exit_code_for  # noqa: E402
from k3diag.render.json_report import build_report  # noqa: E402
from k3diag.render.plain import Out  # noqa: E402
from k3diag.render.terminal import render, verdict_label  # noqa: E402

CASES = list(corpus())
# Words a program leaks when a value is missing, and placeholders the old report printed.
PLACEHOLDERS = [
    re.compile(r"\bNone\b"), re.compile(r"(?<![\w`'\"])\?(?![\w`'\"])"), re.compile(r"\(no header"),
    re.compile(r"\(bridge\)"), re.compile(r"unknown: OK for all"), re.compile(r"\bnan\b"),
]
LABEL_BY_EXIT = {0: ("OK", "UNKNOWN"), 1: ("WARN",), 2: ("FAIL",), 3: ("UNKNOWN",)}


def _prose(report: dict) -> list[str]:
    texts = [report["verdict"]["text"]]
    for finding in report["findings"]:
        texts += [finding["title"], finding["explanation"], finding.get("remedy") or ""]
    for value in (report["recommendations"].get("rationale") or {}).values():
        texts.append(value)
    texts.append(report["recommendations"].get("comparison") or "")
    return texts


@pytest.mark.parametrize("name, build", CASES, ids=[name for name, _ in CASES])
def test_no_placeholder_and_the_verdict_agrees_with_the_exit_code(name: str, build) -> None:
    machine = build()
    analysis = analyze_machine(machine)
    buffer = io.StringIO()
    render(analysis, Out(buffer, color=False), "k3diag analyze")
    terminal = buffer.getvalue()
    # Input lines are quoted as evidence (`> file:line: text`) and may hold anything; judge k3diag's own words.
    own = "\n".join(line for line in terminal.splitlines() if not line.lstrip().startswith(">"))
    for pattern in PLACEHOLDERS:
        assert not pattern.search(own), (pattern.pattern, [l for l in own.splitlines() if pattern.search(l)][:3])
    code = exit_code_for(machine, analysis.findings)
    report = build_report(machine, analysis.findings, analysis.recommendation, analysis.verdict.to_json(), code)
    for text in _prose(report):
        for pattern in PLACEHOLDERS[:1]:
            assert not pattern.search(text), (pattern.pattern, text[:200])
    label = verdict_label(analysis.verdict)
    assert f"Verdict [{label}]: " in terminal.splitlines()[1]
    assert label in LABEL_BY_EXIT[code], (label, code)
    level = report["verdict"]["level"]
    if level == "faulty":
        assert code == 2
    if code == 2:
        assert level in ("faulty", "unknown", "none"), level  # a failure is never read as good
    if level == "good":
        assert code == 0
    if level in ("unknown", "none"):
        assert label in ("UNKNOWN", "WARN", "FAIL")
    # An AMD matrix never gets NVIDIA's legend.
    if any(link.path == "XGMI" for link in machine.links):
        assert "NV# (NVLink)" not in terminal


@pytest.mark.parametrize("name, build", CASES, ids=[name for name, _ in CASES])
def test_details_have_no_placeholder_either(name: str, build) -> None:
    analysis = analyze_machine(build())
    buffer = io.StringIO()
    render(analysis, Out(buffer, color=False), "k3diag analyze", details=True)
    own = "\n".join(line for line in buffer.getvalue().splitlines() if not line.lstrip().startswith((">", "!")))
    for pattern in PLACEHOLDERS:
        assert not pattern.search(own), (pattern.pattern, [l for l in own.splitlines() if pattern.search(l)][:3])
