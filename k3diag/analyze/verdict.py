"""The one line a user reads first, and the exit code CI gates on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from k3diag.analyze.finding import Finding
from k3diag.model.machine import Machine
from k3diag.model.topology import nvlink_count, path_rank

from k3diag.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN

EXIT_NOTHING = EXIT_UNKNOWN  # the name earlier callers imported

# Path codes good enough that TP inside a group costs little, and ones that hurt.
_GOOD_PATHS = {"PIX", "PSB", "PXB", "XGMI"}
_POOR_PATHS = {"SYS"}
# Through the host bridge but on one socket: works, PCIe-bound.
_FAIR_PATHS = {"PHB", "NODE", "PCIE"}


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
        if machine.live or not (machine.nccl or machine.benchmarks or machine.pci):
            return Verdict("none", f"No GPU was found, so there is nothing to serve with ({tally}).", None)
        seen = [name for name, present in (("NCCL logs", machine.nccl), ("benchmarks", machine.benchmarks),
                                           ("PCIe devices", machine.pci)) if present]
        return Verdict(
            "unknown",
            f"These inputs hold no GPU inventory (nvidia-smi, NVML, rocm-smi or amd-smi output), so no TP size "
            f"can be judged; judged from the {', '.join(seen)} alone: {tally}.",
            None,
        )
    if gpus == 1:
        return Verdict("usable", f"One GPU: no tensor parallelism possible; run replicas or a model that fits one GPU ({tally}).", 1)
    if recommendation is None or not getattr(recommendation, "worst_link", None):
        return Verdict("usable", f"{gpus} GPUs; the links between them are unknown, so no TP size can be recommended ({tally}).", None)
    recommendation = _ClassView(recommendation)
    best_tp = None
    for size in sorted(recommendation.worst_link):
        if _good_path(recommendation.worst_link[size]):
            best_tp = size
    p2p_broken = any(f.id in ("p2p-not-supported", "nccl-same-host-pair-not-p2p") for f in fails + warns)
    fix_first = f"; fix the {len(fails)} failure(s) below first" if fails else ""
    if best_tp is not None and best_tp == max(recommendation.worst_link) and not fails and not p2p_broken:
        worst = recommendation.worst_link[best_tp]
        return Verdict("good", f"Good for tensor parallelism up to TP{best_tp} (slowest link inside a group: {worst}) ({tally}).", best_tp)
    if best_tp is not None:
        groups = _fmt_groups(recommendation.groups.get(best_tp) or [])
        larger = [size for size in sorted(recommendation.worst_link) if size > best_tp]
        beyond = (f"; TP{larger[0]} would cross {recommendation.worst_link[larger[0]]} links and be paced by them"
                  if larger else "")
        return Verdict("usable", f"Serve with TP{best_tp} groups {groups}{beyond}{fix_first} ({tally}).", best_tp)
    # No size gives good links in every group: say which groups are good, if any.
    smallest = min(recommendation.worst_link)
    group_worst = (getattr(recommendation, "group_worst", {}) or {}).get(smallest) or []
    groups = recommendation.groups.get(smallest) or []
    good_groups = [group for group, worst in zip(groups, group_worst) if _good_path(worst)]
    if good_groups:
        others = [group for group in groups if group not in good_groups]
        return Verdict(
            "usable",
            f"Only part of this host pairs well: TP{smallest} on {_fmt_groups(good_groups)} has good links, while "
            f"{_fmt_groups(others)} cross {recommendation.worst_link[smallest]}; serve those as replicas or accept "
            f"slower all-reduces{fix_first} ({tally}).",
            smallest,
        )
    largest_fair = [size for size in sorted(recommendation.worst_link)
                    if recommendation.worst_link[size] in _FAIR_PATHS]
    if largest_fair and not p2p_broken:
        size = largest_fair[-1]
        worst = recommendation.worst_link[size]
        return Verdict(
            "usable",
            f"Tensor parallelism up to TP{size} works but goes through the CPU's PCIe root complex ({worst}): "
            f"all-reduces are PCIe-bound, so prefer the smallest TP size the model fits and replicas for the rest"
            f"{fix_first} ({tally}).",
            size,
        )
    good_pairs = _good_gpu_pairs(machine)
    if good_pairs:
        pairs = " ".join("{" + f"{a},{b}" + "}" for a, b in good_pairs[:4])
        return Verdict(
            "usable",
            f"Only some GPU pairs are well connected ({pairs}); any partition of all GPUs into TP{smallest} groups "
            f"has a group across {recommendation.worst_link[smallest]}: run TP{smallest} on the good pairs and "
            f"replicas on the rest{fix_first} ({tally}).",
            smallest,
        )
    return Verdict(
        "poor",
        f"Tensor parallelism will be slow here: even TP{smallest} groups cross {recommendation.worst_link[smallest]} "
        f"links; prefer replicas (DP) or pipeline parallelism{fix_first} ({tally}).",
        None,
    )


class _ClassView:
    """The planner ranks groups by estimated bandwidth (an x8 NODE pair can rank below an x16 SYS
    pair); the verdict speaks in path classes, so a size's worst link is its worst group's class."""

    def __init__(self, recommendation: Any) -> None:
        self.groups = recommendation.groups
        self.group_worst = getattr(recommendation, "group_worst", {}) or {}
        self.worst_link = {}
        for size, worst in recommendation.worst_link.items():
            classes = [w for w in self.group_worst.get(size, []) if w] + ([worst] if worst else [])
            self.worst_link[size] = max(classes, key=path_rank) if classes else worst


def _good_gpu_pairs(machine: Machine) -> list[tuple[int, int]]:
    from k3diag.model.topology import gpu_index

    pairs = []
    for link in machine.links:
        a, b = gpu_index(link.a), gpu_index(link.b)
        if a is not None and b is not None and _good_path(link.path):
            pairs.append((min(a, b), max(a, b)))
    return sorted(set(pairs))


def _fmt_groups(groups: list[list[int]]) -> str:
    return " ".join("{" + ",".join(str(i) for i in group) + "}" for group in groups)


def exit_code_for(machine: Machine, findings: list[Finding], fail_on: str = "warn") -> int:
    """0 ok, 1 warnings, 2 failures, 3 cannot be judged (k3diag.exit_codes). A machine on which GPUs were
    looked for and none was found cannot pass: it is unknown unless a failure (a hung nvidia-smi) explains it."""
    if not machine.analyzable:
        return EXIT_UNKNOWN
    if fail_on == "never":
        return EXIT_OK
    if any(f.severity == "fail" for f in findings):
        return EXIT_FAIL
    if any(f.id == "no-gpu-found" for f in findings):
        return EXIT_UNKNOWN
    if fail_on == "warn" and any(f.severity == "warn" for f in findings):
        return EXIT_WARN
    return EXIT_OK
