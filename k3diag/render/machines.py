"""Reports of several machines: JSON with `machines[]`, and the terminal's top section then one section each.

The top-level JSON fields keep their names but describe no joint machine: topology, PCI, NCCL and
benchmarks are empty there, the findings hold only `inputs-several-machines`, and the verdict says
that no joint verdict exists. Each `machines[]` entry is a full report of one machine plus
`identity` and `inputs` (each with `machine` and `machine_reason`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from k3diag.model.machine import Machine, MachineSet

if TYPE_CHECKING:
    from k3diag.analyze.finding import Finding
    from k3diag.analyze.pipeline import Analysis


def several_verdict(machines: MachineSet, analyses: list["Analysis"] = (), lead: str | None = None) -> dict:
    """No joint verdict, but the same fields as one machine's (docs/report-schema.md): a script reading
    `verdict.status` gets the mix's default exit code in words (the worst machine's, at least warn)."""
    from k3diag.analyze.machines import combined_exit_code
    from k3diag.analyze.verdict import STATUS_BY_EXIT, Verdict, exit_code_for

    default_codes = [exit_code_for(analysis.machine, analysis.findings) for analysis in analyses]
    status = STATUS_BY_EXIT.get(combined_exit_code(default_codes, "warn"), "unknown")
    text = (f"These inputs describe {len(machines.machines)} different machines; each has its own verdict in "
            "machines[], and none joins them.")
    return Verdict("unknown", text, None, status=status, lead=lead).to_json()


def build_machines_report(machines: MachineSet, analyses: list["Analysis"], codes: list[int],
                          finding: "Finding", exit_code: int) -> dict:
    """The report of several machines; `machines[]` is made one entry at a time as it is written."""
    from k3diag.render.json_report import StreamedList, build_report

    top = Machine(inputs=list(machines.inputs), notes=list(machines.notes))
    report = build_report(top, [finding], None, several_verdict(machines, analyses, finding.key), exit_code)

    def entries() -> Iterator[dict]:
        for machine, analysis, code in zip(machines.machines, analyses, codes):
            entry = build_report(machine, analysis.findings, analysis.recommendation, analysis.verdict.to_json(),
                                 code)
            entry["label"] = machine.label
            entry["identity"] = machine.identity.to_json()
            yield entry

    report["machines"] = StreamedList(entries)
    return report


def render_machines(machines: MachineSet, analyses: list["Analysis"], finding: "Finding", title: str,
                    details: bool = False) -> None:
    """The top section (how many machines, which inputs went where and why), then each machine's own report."""
    from k3diag.render.terminal import make_console, render

    out = make_console()
    out.line(title, "bold")
    # marked as the warning it is: piped, the colour is gone and it alone explains exit code 1
    out.line(f"[{finding.severity.upper()}] {finding.title}", "bold yellow")
    for line in finding.explanation.split("\n")[1:]:
        out.line(line)
    out.line()
    count = len(machines.machines)
    for number, (machine, analysis) in enumerate(zip(machines.machines, analyses), 1):
        render(analysis, out, f"Machine {number} of {count}: {machine.label}", details=details)
        out.line()
