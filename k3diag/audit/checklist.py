"""The buyer's checklist (seed article, section 13 and step 6 of section 11), question by question.

Each question is a plain function of the audit context returning an `Answer`; they run in
the article's order. A question that breaks (a half-written model record, an analyzer bug)
becomes an UNKNOWN answer saying so: one broken question must not hide the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, Answer, AuditReport
from k3diag.audit.context import AuditContext
from k3diag.audit.q_network import answer_gpudirect_rdma, answer_multi_node_network
from k3diag.audit.q_nccl import answer_nccl_allreduce
from k3diag.audit.q_p2p import answer_p2p
from k3diag.audit.q_pcie import answer_acs_iommu, answer_pcie_switch, answer_pcie_x16
from k3diag.audit.q_placement import answer_cpu_numa, answer_path_classes
from k3diag.audit.q_plan import answer_parallelism, answer_tp2_vs_tp4
from k3diag.audit.q_serving import answer_tp2_tp4_measured
from k3diag.model.words import counted

QUESTIONS: tuple[tuple[str, Callable[[AuditContext], Answer]], ...] = (
    ("pcie-x16", answer_pcie_x16),
    ("cpu-numa", answer_cpu_numa),
    ("path-classes", answer_path_classes),
    ("pcie-switch", answer_pcie_switch),
    ("p2p", answer_p2p),
    ("acs-iommu", answer_acs_iommu),
    ("nccl-allreduce", answer_nccl_allreduce),
    ("parallelism", answer_parallelism),
    ("tp2-vs-tp4", answer_tp2_vs_tp4),
    ("tp2-tp4-measured", answer_tp2_tp4_measured),
    ("gpudirect-rdma", answer_gpudirect_rdma),
    ("multi-node-network", answer_multi_node_network),
)
QUESTION_IDS = tuple(qid for qid, _ in QUESTIONS)

# Which analyzer findings (by id prefix) bear on which question: they are listed with the
# answer, and a failing one keeps the answer from passing on facts the question did not weigh.
RELATED_FINDINGS: dict[str, tuple[str, ...]] = {
    "pcie-x16": ("pcie-width", "pcie-link-width", "pcie-gen", "pcie-link-speed", "pcie-readings", "pcie-aer", "xid"),
    "cpu-numa": ("gpu-pair-sys", "amd-cross-numa"),
    "path-classes": ("gpu-pair-phb", "gpu-pair-sys", "topology-path-mismatch", "link-readings-disagree",
                     "nvlink-count-low", "amd-xgmi"),
    "pcie-switch": ("topology-path-mismatch",),
    "p2p": ("p2p-", "nccl-same-host-pair-not-p2p", "nccl-p2p-disabled", "nccl-env-disables", "amd-p2p"),
    "acs-iommu": ("acs-", "iommu", "amd-iommu"),
    "nccl-allreduce": ("nccl-tests-", "amd-bandwidth"),
    "parallelism": (),
    "tp2-vs-tp4": (),
    "tp2-tp4-measured": (),
    "gpudirect-rdma": ("nccl-gdrdma", "acs-redirect-gpu-nic", "gpu-nic-far"),
    "multi-node-network": ("nccl-multinode-socket", "gpu-nic-far"),
}


def answer_all(ctx: AuditContext) -> list[Answer]:
    answers: list[Answer] = []
    for qid, function in QUESTIONS:
        try:
            answer = function(ctx)
        except Exception as exc:  # report the question as unanswered, keep the rest
            answers.append(Answer(
                id=qid, question=qid, seed="", verdict=UNKNOWN,
                summary=f"This question could not be answered: k3diag failed ({type(exc).__name__}: {exc}); "
                        "please report it with the bundle",
            ))
            continue
        _attach_findings(ctx, answer)
        answers.append(answer)
    return answers


def _attach_findings(ctx: AuditContext, answer: Answer) -> None:
    words = RELATED_FINDINGS.get(answer.id, ())
    related = [f for f in ctx.findings if words and str(getattr(f, "id", "")).startswith(words)]
    answer.findings = sorted({str(getattr(f, "key", getattr(f, "id", ""))) for f in related})
    failing = [f for f in related if getattr(f, "severity", None) == "fail"]
    if answer.verdict == PASS and failing:
        answer.verdict = WARN
        titles = "; ".join(str(getattr(f, "title", f.id)) for f in failing[:3])
        answer.details.append(f"the analyzer reports a failure this answer did not weigh: {titles}")


def audit_machine(
    machine: Any,
    findings: list[Any],
    evidence: list[Any],
    source: str,
    manifest: dict | None = None,
    model: str | None = None,
    spec: Any = None,
    spec_path: str | None = None,
    warnings: list[str] | None = None,
    machines_note: dict | None = None,
) -> AuditReport:
    """Answer every question for a built machine; `spec` is a parsed purchase spec (audit.spec.Spec)."""
    ctx = AuditContext(machine=machine, findings=findings, evidence=evidence, model=model, source=source)
    answers = answer_all(ctx)
    checks = []
    if spec is not None:
        from k3diag.audit.spec import check_spec

        checks = check_spec(spec, machine, evidence)
        _agree_on_nics(answers, checks)
    from k3diag.audit.drawing import drawing_data

    try:
        drawing = drawing_data(machine, findings)
    except Exception as exc:  # the picture is a nicety; the answers are the report
        drawing = {"error": f"{type(exc).__name__}: {exc}"}
    all_warnings = list(warnings or [])
    for record in getattr(machine, "inputs", []) or []:
        for warning in record.warnings:
            all_warnings.append(f"{record.path}: {warning}")
    for note in getattr(machine, "notes", []) or []:
        all_warnings.append(f"{note.subject}: {note.message}")
    return AuditReport(
        source=source,
        manifest=manifest or {},
        answers=answers,
        spec=checks,
        spec_path=spec_path,
        warnings=all_warnings,
        findings=[_finding_json(f) for f in findings],
        inputs=[record.to_json() for record in getattr(machine, "inputs", []) or []],
        model=model,
        analyzable=bool(getattr(machine, "analyzable", True)),
        drawing=drawing,
        machines=machines_note or {},
    )


def _agree_on_nics(answers: list[Answer], checks: list[Any]) -> None:
    """The purchase spec's NIC count and the NIC question speak of the same NICs (`facts.network_nics`): a
    count the evidence contradicts is said in both places, so the spec table and the answer never disagree."""
    check = next((c for c in checks if c.item == "nic.count"), None)
    answer = next((a for a in answers if a.id == "multi-node-network"), None)
    if check is None or answer is None:
        return
    answer.data["expected_nics"] = check.expected
    # The spec line holds the count as text ("4"); in prose it is "1 NIC", "4 NICs".
    nics = counted(int(check.expected), "NIC") if str(check.expected).isdigit() else f"{check.expected} NICs"
    if check.verdict == FAIL:
        answer.verdict = FAIL
        answer.summary = (f"The purchase spec expects {nics}, but the evidence shows {check.actual}. "
                          + answer.summary)
    elif check.verdict == UNKNOWN:
        answer.summary = (f"The purchase spec expects {nics}; the evidence shows {check.actual}, "
                          f"which does not settle the count (run: {check.request}). " + answer.summary)
    else:
        answer.details.insert(0, f"the purchase spec expects {nics}: {check.actual}, as expected")


def _finding_json(finding: Any) -> dict:
    try:
        return finding.to_json()
    except Exception:
        return {"id": getattr(finding, "id", "?"), "severity": getattr(finding, "severity", "info"),
                "title": getattr(finding, "title", "")}


def audit_bundle(path: Path, model: str | None = None, spec_path: Path | None = None,
                 limits: Any = None) -> AuditReport:
    """Read a bundle safely, build the model, run the analyzer, answer the checklist.

    Raises `k3diag.bundle.BundleError` for bundles that cannot or must not be read and
    `k3diag.audit.spec.SpecError` for a spec file that cannot be used.
    """
    from k3diag.analyze.engine import run_rules
    from k3diag.bundle import DEFAULT_LIMITS, read_bundle
    from k3diag.join.machines import build_machines

    spec = None
    if spec_path is not None:
        from k3diag.audit.spec import load_spec

        spec = load_spec(spec_path)
    bundle = read_bundle(path, limits or DEFAULT_LIMITS)
    machines = build_machines(bundle.evidence)
    machine, note = choose_machine(machines, bundle.manifest)
    warnings = list(bundle.warnings)
    if note is not None:
        # Inputs no machine could take are not in any machine's records: their warnings are said here.
        for record in machines.unplaced:
            warnings.extend(f"{record.path}: {warning}" for warning in record.warnings)
        warnings.extend(f"{n.subject}: {n.message}" for n in machines.notes if n.subject != "inputs")
    findings = run_rules(machine)
    evidence = list(bundle.evidence)
    if note is not None:
        # Questions that read raw lines (lsmod, NCCL's NET lines) read only the audited machine's files.
        own = {record.path for record in machine.inputs}
        evidence = [item for item in evidence if item.name in own]
    return audit_machine(
        machine, findings, evidence, source=path.name or str(path), manifest=bundle.manifest, model=model,
        spec=spec, spec_path=str(spec_path) if spec_path else None, warnings=warnings, machines_note=note,
    )


def choose_machine(machines: Any, manifest: dict) -> tuple[Any, dict | None]:
    """The machine the audit answers for, and (when the bundle holds several) what the reader must be told.

    A bundle is meant to come from one host; when its inputs describe several machines the audit never
    joins them into one verdict: it answers for the machine `join.machines.bundle_machine` picks (the host
    the manifest names, else the machine with a GPU inventory, else the one with the most inputs), and says
    which input went where.
    """
    from k3diag.join.grouping import describe
    from k3diag.join.machines import machine_of_bundle

    chosen_index, why = machine_of_bundle(machines, manifest)  # the manifest's host facts filled in
    if not machines.several:
        return machines.machines[0], None
    listing = []
    for index, candidate in enumerate(machines.machines):
        listing.append({
            "machine": index + 1,
            "label": candidate.label or describe(candidate.identity),
            "audited": index == chosen_index,
            "inputs": [{"input": record.path, "reason": record.machine_reason or ""}
                       for record in candidate.inputs],
        })
    unplaced = [{"input": record.path, "reason": record.machine_reason or ""} for record in machines.unplaced]
    count = len(machines.machines)
    chosen = machines.machines[chosen_index]
    sentence = (f"This bundle holds evidence of {count} different machines. The audit answers for machine "
                f"{chosen_index + 1} ({listing[chosen_index]['label']}) only, because {why}; the other machines' "
                "inputs are set aside, never joined into its verdict. Ask the vendor why the bundle mixes machines.")
    return chosen, {"count": count, "audited": chosen_index + 1, "reason": why, "sentence": sentence,
                    "machines": listing, "unplaced": unplaced}
