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
    _reduce_causes(findings)
    return sort_findings(findings)


def _reduce_causes(findings: list[Finding]) -> None:
    """Keep only direct causes: when A is caused by B and C, and B is itself caused by C, A -> B -> C
    reads as one chain ("SHM because P2P refused because the pair crosses sockets")."""
    by_key = {finding.key: finding for finding in findings}

    def reachable(start: str, seen: set[str]) -> set[str]:
        out: set[str] = set()
        for cause in by_key[start].causes:
            if cause not in seen:
                seen.add(cause)
                out.add(cause)
                out |= reachable(cause, seen)
        return out

    for finding in findings:
        if len(finding.causes) < 2:
            continue
        indirect: set[str] = set()
        for cause in finding.causes:
            indirect |= reachable(cause, {finding.key, cause})
        finding.causes = [cause for cause in finding.causes if cause not in indirect]


def sort_findings(findings: list[Finding]) -> list[Finding]:
    def order(finding: Finding):
        subjects = tuple(endpoint_sort_key(s) for s in finding.subjects)
        return (SEVERITY_ORDER.get(finding.severity, 9), finding.id, subjects)

    return sorted(findings, key=order)


def worst_severity(findings: list[Finding]) -> str | None:
    if not findings:
        return None
    return min((f.severity for f in findings), key=lambda s: SEVERITY_ORDER.get(s, 9))
