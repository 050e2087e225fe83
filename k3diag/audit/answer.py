"""The audit's record types: one answer per checklist question, spec checks, the whole report."""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN
from k3diag.model.source import SourceRef

PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
UNKNOWN = "UNKNOWN"
VERDICTS = (PASS, WARN, FAIL, UNKNOWN)
# Worst first: the overall verdict is the worst answer; an unanswered question is not a pass.
_RANK = {FAIL: 0, WARN: 1, UNKNOWN: 2, PASS: 3}

# The audit's exit codes are the project's (k3diag/exit_codes.py), named for its verdicts.
EXIT_PASS = EXIT_OK
EXIT_NOTHING = EXIT_UNKNOWN


def worse(a: str, b: str) -> str:
    return a if _RANK[a] <= _RANK[b] else b


@dataclass
class Answer:
    """One question of the buyer's checklist, answered from the evidence.

    `request` is the exact command the vendor must run when the evidence cannot answer
    (UNKNOWN), or to confirm a WARN; `details` are the facts behind the verdict, one per line.
    """

    id: str
    question: str
    seed: str  # the checklist's own wording (Chinese), so a reader can match the article
    verdict: str
    summary: str
    details: list[str] = field(default_factory=list)
    evidence: list[SourceRef] = field(default_factory=list)
    request: str | None = None
    findings: list[str] = field(default_factory=list)  # keys of analyzer findings behind this answer
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "question": self.question,
            "seed": self.seed,
            "verdict": self.verdict,
            "summary": self.summary,
            "details": list(self.details),
            "evidence": [ref.to_json() for ref in self.evidence],
            "request": self.request,
            "findings": list(self.findings),
            "data": self.data,
        }


@dataclass
class SpecCheck:
    """One line of the purchase spec against the delivered machine."""

    item: str  # e.g. "gpu.count"
    expected: str
    actual: str
    verdict: str
    evidence: list[SourceRef] = field(default_factory=list)
    request: str | None = None

    def to_json(self) -> dict:
        return {
            "item": self.item,
            "expected": self.expected,
            "actual": self.actual,
            "verdict": self.verdict,
            "evidence": [ref.to_json() for ref in self.evidence],
            "request": self.request,
        }


@dataclass
class AuditReport:
    source: str  # the bundle's name
    manifest: dict
    answers: list[Answer]
    spec: list[SpecCheck] = field(default_factory=list)
    spec_path: str | None = None
    warnings: list[str] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)  # the analyzer's findings as JSON
    inputs: list[dict] = field(default_factory=list)
    model: str | None = None
    analyzable: bool = True
    drawing: dict = field(default_factory=dict)  # what the HTML drawing needs (see audit.drawing)
    # When the bundle describes several machines: which one the audit answers for, and where each input went
    # (see audit.checklist.choose_machine); empty for a bundle of one machine.
    machines: dict = field(default_factory=dict)

    @property
    def no_gpu(self) -> bool:
        """The bundle was collected on a host where GPUs were looked for and none was found: such a machine
        cannot be assessed, and must never read as usable."""
        return any(finding.get("id") == "no-gpu-found" for finding in self.findings)

    @property
    def verdict(self) -> str:
        if not self.analyzable or self.no_gpu:
            return UNKNOWN
        overall = PASS
        for item in [a.verdict for a in self.answers] + [c.verdict for c in self.spec]:
            overall = worse(overall, item)
        return overall

    @property
    def exit_code(self) -> int:
        if not self.analyzable or self.no_gpu:
            return EXIT_NOTHING
        verdicts = {a.verdict for a in self.answers} | {c.verdict for c in self.spec}
        if FAIL in verdicts:
            return EXIT_FAIL
        if WARN in verdicts or UNKNOWN in verdicts:
            return EXIT_WARN
        return EXIT_PASS

    def counts(self) -> dict[str, int]:
        counts = {verdict: 0 for verdict in VERDICTS}
        for answer in self.answers:
            counts[answer.verdict] += 1
        return counts

    def verdict_sentence(self) -> str:
        counts = self.counts()
        if not self.analyzable:
            return ("Nothing in the bundle could be analyzed: ask the vendor to run `k3diag collect -o bundle.tar.gz` "
                    "on the offered machine and send the file.")
        if self.no_gpu:
            return ("UNKNOWN: the machine cannot be assessed: the bundle was collected on a host where no GPU was "
                    "found (no driver, or the wrong host). Ask the vendor to install the GPU driver and run "
                    "`k3diag collect -o bundle.tar.gz` again on the offered machine.")
        failed_spec = sum(1 for check in self.spec if check.verdict == FAIL)
        parts = [f"{counts[PASS]} pass", f"{counts[WARN]} warn", f"{counts[FAIL]} fail", f"{counts[UNKNOWN]} unknown"]
        text = f"{self.verdict}: " + ", ".join(parts) + f" of {len(self.answers)} questions"
        if self.spec:
            text += f"; purchase spec: {len(self.spec) - failed_spec} of {len(self.spec)} lines met"
        if self.verdict == FAIL:
            text += ". Do not accept the machine as offered until the failures are fixed or explained."
        elif self.verdict == WARN:
            text += ". Usable, with the caveats below; ask the vendor about each warning."
        elif self.verdict == UNKNOWN:
            text += ". Ask the vendor for the missing evidence (the exact commands are listed)."
        else:
            text += ". The evidence supports the offer."
        return text

    def machines_lines(self) -> list[str]:
        """What the reader must know first when the bundle mixes machines: the sentence, then one line per
        machine (audited or set aside) with its inputs and why each went there."""
        if not self.machines:
            return []
        lines = [str(self.machines.get("sentence", ""))]
        for entry in self.machines.get("machines", []):
            mark = "audited" if entry.get("audited") else "set aside"
            lines.append(f"machine {entry.get('machine')} ({mark}): {entry.get('label')}")
            for item in entry.get("inputs", []):
                reason = item.get("reason") or ""
                lines.append(f"  {item.get('input')}" + (f": {reason}" if reason else ""))
        for item in self.machines.get("unplaced", []):
            lines.append(f"not placed: {item.get('input')}: {item.get('reason')}")
        return lines

    def to_json(self) -> dict:
        from k3diag import __version__

        return {
            "schema": "k3diag.audit/1",
            "tool": {"name": "k3diag", "version": __version__},
            "source": self.source,
            "model": self.model,
            "verdict": self.verdict,
            "verdict_text": self.verdict_sentence(),
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "manifest": _manifest_summary(self.manifest),
            "answers": [answer.to_json() for answer in self.answers],
            "spec": {"path": self.spec_path, "checks": [check.to_json() for check in self.spec]} if self.spec_path
            else None,
            "warnings": list(self.warnings),
            "inputs": list(self.inputs),
            "findings": list(self.findings),
            "machines": dict(self.machines) if self.machines else None,
        }


def _manifest_summary(manifest: dict) -> dict:
    """The manifest without its per-evidence entries (those are in `inputs`)."""
    return {key: value for key, value in manifest.items() if key != "evidence"}
