"""The rule registry: stable unique ids, a documentation page for every rule, deterministic output."""

from __future__ import annotations

import re
from pathlib import Path

from k3diag.analyze.engine import run_rules, sort_findings
from k3diag.analyze.finding import SEVERITIES, Finding, Rule
from k3diag.analyze.rules import all_rules
from k3diag.model.machine import Machine
from k3diag.model.topology import Link

REPO = Path(__file__).resolve().parents[2]


def test_ids_are_unique_kebab_case_with_known_severity() -> None:
    rules = all_rules()
    ids = [rule.id for rule in rules]
    assert len(ids) == len(set(ids))
    for rule in rules:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.id), rule.id
        assert rule.severity in SEVERITIES
        assert rule.title


def test_every_rule_has_a_documentation_page_with_the_four_parts() -> None:
    for rule in all_rules():
        page = REPO / rule.doc_path()
        assert page.is_file(), f"missing {page}"
        text = page.read_text().lower()
        assert rule.id in text
        assert "```" in text, f"{page} must show the exact command to confirm by hand"
        assert "fix" in text or "remedy" in text, f"{page} must say how to fix"


def test_output_order_is_deterministic() -> None:
    findings = [
        Finding(id="b-rule", severity="warn", subjects=["GPU10"], title="t", explanation=""),
        Finding(id="b-rule", severity="warn", subjects=["GPU2"], title="t", explanation=""),
        Finding(id="a-rule", severity="info", subjects=[], title="t", explanation=""),
        Finding(id="z-rule", severity="fail", subjects=["GPU1"], title="t", explanation=""),
    ]
    ordered = [f.key for f in sort_findings(list(reversed(findings)))]
    assert ordered == ["z-rule@GPU1", "b-rule@GPU2", "b-rule@GPU10", "a-rule"]


def test_a_broken_rule_costs_only_itself(monkeypatch) -> None:
    def explode(machine, earlier):
        raise ValueError("boom")
        yield  # pragma: no cover

    broken = Rule("broken-rule", "warn", "broken", explode)
    real = all_rules()
    monkeypatch.setattr("k3diag.analyze.engine.all_rules", lambda: (broken, *real))
    machine = Machine()
    machine.add_link(Link("GPU0", "GPU1", "PIX", origin="a"))
    machine.add_link(Link("GPU0", "GPU1", "SYS", origin="b"))
    findings = run_rules(machine)
    assert any(f.id == "link-readings-disagree" for f in findings)
    assert any("rule broken-rule failed (ValueError: boom)" in n.message for n in machine.notes)


def test_causes_keep_only_known_findings() -> None:
    def first(machine, earlier):
        yield Finding(id="cause-rule", severity="warn", subjects=["GPU0"], title="c", explanation="")

    def second(machine, earlier):
        yield Finding(id="effect-rule", severity="warn", subjects=["GPU0"], title="e", explanation="",
                      causes=[earlier[0].key, "missing@GPU9"])

    import k3diag.analyze.engine as engine

    original = engine.all_rules
    engine.all_rules = lambda: (Rule("cause-rule", "warn", "c", first), Rule("effect-rule", "warn", "e", second))
    try:
        findings = run_rules(Machine())
    finally:
        engine.all_rules = original
    effect = next(f for f in findings if f.id == "effect-rule")
    assert effect.causes == ["cause-rule@GPU0"]
