"""Model in, everything the renderers need out: findings, TP recommendation, verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from k3diag.analyze.engine import run_rules
from k3diag.analyze.finding import Finding
from k3diag.analyze.verdict import Verdict, decide_verdict
from k3diag.model.machine import Machine
from k3diag.model.shared import reading


@dataclass
class Analysis:
    """What the analysis of one machine hands the renderers: findings, TP recommendation, verdict."""

    machine: Machine
    findings: list[Finding]
    recommendation: Any | None
    verdict: Verdict


def analyze_machine(machine: Machine, tp_sizes: list[int] | None = None) -> Analysis:
    with reading():  # the rules and the planner share one PCIe tree, one GPUDirect table... (model/shared.py)
        return _analyze(machine, tp_sizes)


def _analyze(machine: Machine, tp_sizes: list[int] | None) -> Analysis:
    findings = run_rules(machine)
    recommendation = None
    recommend_tp_groups = None
    # The planner needs two known GPUs (`pair_quality.known_gpus`: the GPU table, links, P2P statuses):
    # inputs that name none (a PCIe listing alone) do not import it and its solvers (~6 ms).
    if machine.gpus or machine.links or machine.p2p:
        try:
            from k3diag.analyze.planner import recommend_tp_groups
        except ModuleNotFoundError:
            recommend_tp_groups = None
    if recommend_tp_groups is not None:
        try:
            recommendation = recommend_tp_groups(machine, tp_sizes)
        except Exception as exc:  # the planner failing must not hide the findings
            machine.note("planner", f"TP grouping could not be computed ({type(exc).__name__}: {exc})")
    verdict = decide_verdict(machine, findings, recommendation)
    return Analysis(machine=machine, findings=findings, recommendation=recommendation, verdict=verdict)
