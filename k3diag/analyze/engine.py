"""Runs every rule over the model in a fixed order and returns the findings, sorted and chained."""

from __future__ import annotations

from k3diag.analyze.finding import KIND_DESIGN, SEVERITY_ORDER, Finding, Rule, finding_kind
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
            finding.kind = finding_kind(finding, rule)
        produced = fold_design_findings(rule, produced)
        for finding in produced:
            if finding.key in seen:
                continue
            seen.add(finding.key)
            findings.append(finding)
    # A cause may name a key that a design finding stands in for (`gpu-pair-sys@GPU0,GPU4`).
    canonical = {finding.key: finding.key for finding in findings}
    for finding in findings:
        for alias in finding.aliases:
            canonical.setdefault(alias, finding.key)
    for finding in findings:
        finding.causes = sorted({canonical[cause] for cause in finding.causes
                                 if cause in canonical and canonical[cause] != finding.key})
    _reduce_causes(findings)
    return sort_findings(findings)


def fold_design_findings(rule: Rule, produced: list[Finding]) -> list[Finding]:
    """A design property is one advisory finding per machine (docs/findings/README.md). A rule written
    per pair or per GPU gets its design findings folded into one that answers to every original key."""
    # The one the rule judged worst leads: its explanation is the folded finding's.
    designs = sorted((finding for finding in produced if finding.kind == KIND_DESIGN),
                     key=lambda finding: SEVERITY_ORDER.get(finding.severity, 9))
    for finding in designs:
        finding.severity = "info"
    if len(designs) < 2:
        return produced
    first = designs[0]
    cases = [", ".join(f.subjects) for f in designs if f.subjects]
    listed = "; ".join(cases[:8]) + (f"; and {len(cases) - 8} more" if len(cases) > 8 else "")
    folded = Finding(
        id=rule.id,
        severity="info",
        subjects=[],
        title=f"{rule.title} ({len(designs):,} cases)",
        explanation=f"{first.explanation} The same holds for: {listed}." if listed else first.explanation,
        evidence=list(dict.fromkeys(ref for f in designs for ref in f.evidence))[:4],
        remedy=first.remedy,
        causes=sorted({cause for f in designs for cause in f.causes}),
        confirm_with=first.confirm_with,
        data={"cases": [{"subjects": list(f.subjects), **f.data} for f in designs]},
        kind=KIND_DESIGN,
        aliases=sorted({key for f in designs for key in (f.key, *f.aliases)}),
    )
    others = [finding for finding in produced if finding.kind != KIND_DESIGN]
    return [folded, *others]


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
