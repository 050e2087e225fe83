"""Findings and the rule registry's record types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from k3diag.model.source import SourceRef

SEVERITIES = ("fail", "warn", "info")
SEVERITY_ORDER = {name: rank for rank, name in enumerate(SEVERITIES)}


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

    def doc_path(self) -> str:
        return self.doc or f"docs/findings/{self.id}.md"
