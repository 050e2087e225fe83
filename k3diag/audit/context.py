"""What every checklist question reads: the model, the analyzer's findings, the raw evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3diag.evidence import Evidence


@dataclass
class AuditContext:
    machine: Any  # k3diag.model.machine.Machine
    findings: list[Any]  # k3diag.analyze.finding.Finding
    evidence: list[Evidence] = field(default_factory=list)
    model: str | None = None  # the target model for the parallelism questions (`--model`)
    source: str = "bundle"
    # Answers computed once and shared (the planner's groups feed two questions).
    cache: dict[str, Any] = field(default_factory=dict)

