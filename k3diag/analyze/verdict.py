"""The one line a user reads first, and the exit code CI gates on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from k3diag.analyze.finding import Finding
from k3diag.model.machine import Machine
from k3diag.model.topology import nvlink_count

EXIT_OK = 0
EXIT_WARN = 1
EXIT_FAIL = 2
EXIT_NOTHING = 3
FAIL_ON_CHOICES = ("fail", "warn", "never")

# Path codes good enough that TP inside a group costs little, and ones that hurt.
_GOOD_PATHS = {"PIX", "PSB", "PXB", "XGMI"}
_POOR_PATHS = {"SYS"}


@dataclass
class Verdict:
    level: str  # good | usable | poor | none
    text: str
    best_tp: int | None

    def to_json(self) -> dict:
        return {"level": self.level, "text": self.text, "best_tp": self.best_tp}


def _good_path(path: str | None) -> bool:
    return path is not None and (nvlink_count(path) is not None or path in _GOOD_PATHS)


def decide_verdict(machine: Machine, findings: list[Finding], recommendation: Any | None) -> Verdict:
    fails = [f for f in findings if f.severity == "fail"]
    warns = [f for f in findings if f.severity == "warn"]
    tally = f"{len(fails)} failure(s), {len(warns)} warning(s)"
    gpus = len(machine.gpus)
    if gpus == 0:
        return Verdict("none", f"No GPU was found, so there is nothing to serve with ({tally}).", None)
    if gpus == 1:
        return Verdict("usable", f"One GPU: no tensor parallelism possible; run replicas or a model that fits one GPU ({tally}).", 1)
    if recommendation is None or not getattr(recommendation, "worst_link", None):
        return Verdict("usable", f"{gpus} GPUs; the links between them are unknown, so no TP size can be recommended ({tally}).", None)
    best_tp = None
    for size in sorted(recommendation.worst_link):
        if _good_path(recommendation.worst_link[size]):
            best_tp = size
    p2p_broken = any(f.id in ("p2p-not-supported", "nccl-same-host-pair-not-p2p") for f in fails + warns)
    if best_tp is not None and best_tp == max(recommendation.worst_link) and not fails and not p2p_broken:
        worst = recommendation.worst_link[best_tp]
        return Verdict("good", f"Good for tensor parallelism up to TP{best_tp} (slowest link inside a group: {worst}) ({tally}).", best_tp)
    if best_tp is not None:
        groups = recommendation.groups.get(best_tp)
        beyond = max(recommendation.worst_link)
        return Verdict(
            "usable",
            f"Serve with TP{best_tp} groups {groups} (near pairs); TP{beyond} would cross "
            f"{recommendation.worst_link[beyond]} links and be slowed by them ({tally}).",
            best_tp,
        )
    smallest = min(recommendation.worst_link)
    return Verdict(
        "poor",
        f"Tensor parallelism will be slow here: even TP{smallest} groups cross {recommendation.worst_link[smallest]} "
        f"links; prefer replicas (DP) or pipeline parallelism ({tally}).",
        None,
    )


def exit_code_for(machine: Machine, findings: list[Finding], fail_on: str = "warn") -> int:
    if not machine.analyzable:
        return EXIT_NOTHING
    has_fail = any(f.severity == "fail" for f in findings)
    has_warn = any(f.severity == "warn" for f in findings)
    if fail_on == "never":
        return EXIT_OK
    if has_fail:
        return EXIT_FAIL
    if has_warn and fail_on == "warn":
        return EXIT_WARN
    return EXIT_OK
