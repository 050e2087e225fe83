"""The severity policy of docs/findings/README.md, checked on every rule and on what the rules say about every
real fixture: design properties are one advisory finding per machine, faults warn or fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.analyze.engine import run_rules
from k3diag.analyze.finding import KIND_SEVERITIES, KINDS, Finding, Rule, policy_violations
from k3diag.analyze.rules import all_rules
from k3diag.model.machine import Machine
from k3diag.model.topology import Link

from fixture_corpus import corpus

REPO = Path(__file__).resolve().parents[2]
CASES = list(corpus())


def test_every_rule_declares_a_kind_its_severity_allows() -> None:
    problems = [problem for rule in all_rules() for problem in policy_violations(rule, [])]
    assert problems == []


def test_the_policy_page_lists_every_kind_with_its_severities() -> None:
    page = (REPO / "docs" / "findings" / "README.md").read_text()
    for kind in KINDS:
        row = next((line for line in page.splitlines() if line.startswith(f"| `{kind}` |")), None)
        assert row is not None, kind
        for severity in KIND_SEVERITIES[kind]:
            assert f"`{severity}`" in row, (kind, severity)


@pytest.mark.parametrize("name, build", CASES, ids=[name for name, _ in CASES])
def test_findings_on_every_fixture_follow_the_policy(name: str, build) -> None:
    machine = build()
    findings = run_rules(machine)
    by_rule: dict[str, list[Finding]] = {}
    for finding in findings:
        by_rule.setdefault(finding.id, []).append(finding)
    rules = {rule.id: rule for rule in all_rules()}
    problems = [problem for rule_id, produced in by_rule.items()
                for problem in policy_violations(rules[rule_id], produced)]
    assert problems == []
    assert all(finding.kind in KINDS for finding in findings)


def test_a_design_rule_written_per_pair_is_folded_into_one_advisory_finding(monkeypatch) -> None:
    def per_pair(machine: Machine, earlier: list[Finding]):
        for a, b in (("GPU0", "GPU2"), ("GPU1", "GPU3")):
            yield Finding(id="pairs-far", severity="warn", subjects=[a, b], title=f"{a}-{b} far", explanation="Far.")

    def effect(machine: Machine, earlier: list[Finding]):
        yield Finding(id="slow-pair", severity="warn", subjects=["GPU1", "GPU3"], title="slow", explanation="",
                      causes=["pairs-far@GPU1,GPU3"])

    rules = (Rule("pairs-far", "info", "GPU pairs far apart", per_pair, kind="design"),
             Rule("slow-pair", "warn", "slow", effect, kind="fault"))
    monkeypatch.setattr("k3diag.analyze.engine.all_rules", lambda: rules)
    machine = Machine()
    machine.add_link(Link("GPU0", "GPU1", "PIX", origin="a"))
    findings = {f.id: f for f in run_rules(machine)}
    folded = findings["pairs-far"]
    assert (folded.severity, folded.kind, folded.subjects) == ("info", "design", [])
    assert folded.title == "GPU pairs far apart (2 cases)"
    assert "The same holds for: GPU0, GPU2; GPU1, GPU3." in folded.explanation
    assert findings["slow-pair"].causes == ["pairs-far"]  # the per-pair key resolves to the folded finding


def test_a_fault_rule_that_warns_about_a_design_property_is_caught() -> None:
    rule = Rule("sockets", "warn", "pairs across sockets", lambda m, e: [], kind="design")
    assert policy_violations(rule, []) == [
        "rule sockets (design) declares severity warn; a design may be info"]
    finding = Finding(id="gone", severity="info", subjects=[], title="t", explanation="", kind="missing-evidence")
    assert policy_violations(Rule("gone", "info", "t", lambda m, e: [], kind="missing-evidence"), [finding]) == [
        "gone: missing evidence must name the command that would settle it"]
