"""Several machines in one set of inputs: each analyzed on its own, plus the finding that says so."""

from __future__ import annotations

from k3diag.analyze.finding import KIND_CONTRADICTION, Finding
from k3diag.analyze.pipeline import Analysis, analyze_machine
from k3diag.exit_codes import EXIT_OK, EXIT_UNKNOWN, EXIT_WARN
from k3diag.model.machine import MachineSet
from k3diag.model.source import SourceRef

SEVERAL_MACHINES_ID = "inputs-several-machines"


def analyze_machines(machines: MachineSet, tp_sizes: list[int] | None = None) -> list[Analysis]:
    return [analyze_machine(machine, tp_sizes) for machine in machines.machines]


def several_machines_finding(machines: MachineSet) -> Finding:
    """Which inputs went to which machine and why, with the lines whose keys told them apart."""
    lines: list[str] = []
    evidence: list[SourceRef] = []
    for number, machine in enumerate(machines.machines, 1):
        names = [record.path + (f" ({record.command})" if record.command else "") for record in machine.inputs]
        lines.append(f"Machine {number} ({machine.label}): {', '.join(names)}")
        for record in machine.inputs:
            if record.machine_reason:
                lines.append(f"  {record.path}: {record.machine_reason}")
        for facts in (machine.identity.hostnames, machine.identity.gpu_names, machine.identity.gpu_bus_ids):
            if facts and facts[0].source is not None:
                evidence.append(facts[0].source)
                break
    for record in machines.unplaced:
        lines.append(f"{record.path}: {record.machine_reason}")
    count = len(machines.machines)
    return Finding(
        id=SEVERAL_MACHINES_ID,
        severity="warn",
        kind=KIND_CONTRADICTION,
        subjects=[],
        title=f"The inputs describe {count} different machines; each is judged on its own",
        explanation="Their host names, GPU models, GPU bus ids, counts or driver versions disagree, so their "
                    "evidence was not merged and no verdict joins them.\n" + "\n".join(lines),
        evidence=evidence,
        remedy="Give k3diag the outputs of one machine at a time (one folder or bundle per host), or check that "
               "a file you expected from this machine was not copied from another one.",
        data={"machines": count},
    )


def set_aside_finding(machines: MachineSet, index: int, why: str) -> Finding:
    """`several_machines_finding` for a command that judges one machine of several (a node's bundle in
    `check --from` and `fleet`): it says which one was judged and why; the others are left out."""
    finding = several_machines_finding(machines)
    finding.title = (f"The inputs describe {len(machines.machines)} different machines; only machine {index + 1} "
                     f"({machines.machines[index].label}) is judged here, because {why}")
    finding.explanation = finding.explanation.replace(
        "their evidence was not merged and no verdict joins them.",
        "their evidence was not merged; the other machines' findings are left out of this node's verdict.")
    return finding


def combined_exit_code(codes: list[int], fail_on: str) -> int:
    """The worst code of the machines that could be judged; the mix itself is a warning."""
    judged = [code for code in codes if code != EXIT_UNKNOWN]
    if not judged:
        return EXIT_UNKNOWN
    worst = max(judged)
    if fail_on == "warn":
        worst = max(worst, EXIT_WARN)
    return worst if fail_on != "never" else EXIT_OK
