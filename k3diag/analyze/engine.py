"""Runs every rule over the model in a fixed order and returns the findings, sorted and chained."""

from __future__ import annotations

from k3diag.analyze.finding import SEVERITY_ORDER, Finding
from k3diag.analyze.rules import all_rules
from k3diag.model.machine import Machine
from k3diag.model.topology import endpoint_sort_key


def run_rules(machine: Machine) -> list[Finding]:
    findings: list[Finding] = []
    seen: set[str] = set()
    for rule in all_rules():
        try:
            produced = list(rule.check(machine, findings))
        except Exception as exc:  # one broken rule must not hide the others
            machine.note("analyzer", f"rule {rule.id} failed ({type(exc).__name__}: {exc}); its checks were skipped")
            continue
        for finding in produced:
            if finding.key in seen:
                continue
            seen.add(finding.key)
            findings.append(finding)
    known = {finding.key for finding in findings}
    for finding in findings:
        finding.causes = sorted({cause for cause in finding.causes if cause in known and cause != finding.key})
    return sort_findings(findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    def order(finding: Finding):
        subjects = tuple(endpoint_sort_key(s) for s in finding.subjects)
        return (SEVERITY_ORDER.get(finding.severity, 9), finding.id, subjects)

    return sorted(findings, key=order)


def worst_severity(findings: list[Finding]) -> str | None:
    if not findings:
        return None
    return min((f.severity for f in findings), key=lambda s: SEVERITY_ORDER.get(s, 9))
