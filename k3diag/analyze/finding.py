"""Findings and the rule registry's record types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from k3diag.model.source import SourceRef

SEVERITIES = ("fail", "warn", "info")
SEVERITY_ORDER = {name: rank for rank, name in enumerate(SEVERITIES)}

# The severity policy (docs/findings/README.md). Every rule declares what kind of fact it reports;
# the kind bounds the severity, so a CI gate turns red for problems someone can fix, never for the
# shape of a healthy machine.
KIND_FAULT = "fault"  # something broken: a link trained down, an NVLink down, AER/Xid errors, wrong data
KIND_MISCONFIGURATION = "misconfiguration"  # a setting that costs: ACS redirect, IOMMU translated, NCCL_P2P_DISABLE
KIND_DESIGN = "design"  # how the machine is built: pairs across sockets, a PCIe-only box; advice, not a problem
KIND_CONTRADICTION = "contradiction"  # two sources disagree: one of them is wrong, we cannot tell which
KIND_MISSING_EVIDENCE = "missing-evidence"  # what we could not see; says the command that would show it
KIND_INFO = "info"  # context worth knowing that is neither a problem nor a gap
KINDS = (KIND_FAULT, KIND_MISCONFIGURATION, KIND_DESIGN, KIND_CONTRADICTION, KIND_MISSING_EVIDENCE, KIND_INFO)
KIND_SEVERITIES: dict[str, tuple[str, ...]] = {
    KIND_FAULT: ("fail", "warn"),
    KIND_MISCONFIGURATION: ("fail", "warn"),
    KIND_DESIGN: ("info",),
    KIND_CONTRADICTION: ("warn", "info"),
    KIND_MISSING_EVIDENCE: ("info",),
    KIND_INFO: ("info",),
}
# Kinds whose findings are problems: the summary counts these, and only these can gate.
PROBLEM_KINDS = (KIND_FAULT, KIND_MISCONFIGURATION, KIND_CONTRADICTION)


@dataclass
class Finding:
    """One thing k3diag concluded, with the lines that prove it and what to do.

    `key` makes a finding unique (rule id + subjects); `causes` holds keys of findings that
    explain this one. In JSON `causes` are printed as finding ids qualified by subject
    (`id@subject`), which are stable across runs.
    """

    id: str
    severity: str
    subjects: list[str]
    title: str
    explanation: str
    evidence: list[SourceRef] = field(default_factory=list)
    remedy: str | None = None
    causes: list[str] = field(default_factory=list)
    # A command that would settle a cause the evidence cannot confirm.
    confirm_with: str | None = None
    data: dict = field(default_factory=dict)
    # One of KINDS; empty means "the rule's kind" (the engine fills it in). A fault rule that sees only
    # an idle reading says so with kind "missing-evidence" and severity info.
    kind: str = ""
    # Other keys this finding answers to as a cause: the one design finding for a machine's SYS pairs
    # stands in for `gpu-pair-sys@GPU0,GPU4` that NCCL and benchmark rules name per pair.
    aliases: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # A line is quoted once, whichever signs, readings or pairs of a rule rest on it.
        self.evidence = list(dict.fromkeys(self.evidence))

    @property
    def is_problem(self) -> bool:
        return self.severity in ("fail", "warn")

    @property
    def key(self) -> str:
        return f"{self.id}@{','.join(self.subjects)}" if self.subjects else self.id

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "key": self.key,
            "severity": self.severity,
            "subjects": list(self.subjects),
            "title": self.title,
            "explanation": self.explanation,
            "evidence": [ref.to_json() for ref in self.evidence],
            "remedy": self.remedy,
            "causes": list(self.causes),
            "confirm_with": self.confirm_with,
            "data": self.data,
            "kind": self.kind or None,
            "aliases": list(self.aliases),
        }


@dataclass(frozen=True)
class Rule:
    """A finding type: stable id, default severity, one-line title, a doc page, and the check.

    `check` is a plain function of the model (and, for chaining rules, of findings produced
    by rules declared before it): `check(machine, earlier_findings) -> Iterable[Finding]`.
    """

    id: str
    severity: str
    title: str
    check: Callable[..., Iterable[Finding]]
    doc: str = ""  # path under docs/findings/
    # One of KINDS, declared by every rule (tests/analyze/test_severity_policy.py checks it).
    kind: str = ""

    def doc_path(self) -> str:
        return self.doc or f"docs/findings/{self.id}.md"


def policy_violations(rule: Rule, findings: Iterable[Finding]) -> list[str]:
    """What breaks the severity policy in a rule's declaration and in the findings it produced."""
    problems: list[str] = []
    if rule.kind not in KINDS:
        problems.append(f"rule {rule.id} declares kind {rule.kind!r}; expected one of {', '.join(KINDS)}")
        return problems
    if rule.severity not in KIND_SEVERITIES[rule.kind]:
        problems.append(f"rule {rule.id} ({rule.kind}) declares severity {rule.severity}; "
                        f"a {rule.kind} may be {'/'.join(KIND_SEVERITIES[rule.kind])}")
    designs = 0
    for finding in findings:
        kind = finding.kind or rule.kind
        if kind not in KINDS:
            problems.append(f"{finding.key}: kind {kind!r} is not one of {', '.join(KINDS)}")
            continue
        if finding.severity not in KIND_SEVERITIES[kind]:
            problems.append(f"{finding.key}: a {kind} finding may be {'/'.join(KIND_SEVERITIES[kind])}, "
                            f"not {finding.severity}")
        if kind == KIND_DESIGN:
            designs += 1
        if kind == KIND_MISSING_EVIDENCE and not finding.confirm_with:
            problems.append(f"{finding.key}: missing evidence must name the command that would settle it")
    if designs > 1:
        problems.append(f"rule {rule.id} produced {designs} design findings; a design property is one per machine")
    return problems


def finding_kind(finding: Finding, rule: Rule) -> str:
    """The kind a finding gets when it does not state one: its rule's, except that an info finding of a
    fault rule is a note about the fault not being established (an idle reading), not a fault."""
    if finding.kind:
        return finding.kind
    if rule.kind in (KIND_FAULT, KIND_MISCONFIGURATION) and finding.severity == "info":
        return KIND_INFO
    return rule.kind or KIND_INFO
