"""What `topo` and `analyze` share: analyze the model, print it, choose the exit code."""

from __future__ import annotations

import sys

import typer

# Kept here, not imported from the analyzer, so `k3diag --help` does not load the model.
FAIL_ON_CHOICES = ("fail", "warn", "never")


def check_fail_on(value: str) -> str:
    if value not in FAIL_ON_CHOICES:
        raise typer.BadParameter(f"must be one of {', '.join(FAIL_ON_CHOICES)}")
    return value


def parse_tp_sizes(values: list[int] | None) -> list[int] | None:
    if not values:
        return None
    bad = [v for v in values if v < 1]
    if bad:
        raise typer.BadParameter(f"TP sizes must be positive, got {bad}")
    return sorted(set(values))


def check_json_indent(value: int | None) -> int | None:
    if value is not None and not 0 <= value <= 8:
        raise typer.BadParameter("must be between 0 and 8 spaces")
    return value


def emit_report(machine, as_json: bool, fail_on: str, title: str, tp_sizes: list[int] | None,
                details: bool = False, json_indent: int | None = None) -> int:
    from k3diag.analyze.pipeline import analyze_machine
    from k3diag.analyze.verdict import exit_code_for
    from k3diag.model.shared import reading

    # One reading of the model for the analysis and the report: the renderers ask for the PCIe tree and
    # the paths the rules derived already (a 5,000-device tree was built a second time for the JSON).
    with reading():
        analysis = analyze_machine(machine, tp_sizes)
        code = exit_code_for(machine, analysis.findings, fail_on)
        if as_json:
            from k3diag.render.json_report import build_report, write

            report = build_report(machine, analysis.findings, analysis.recommendation, analysis.verdict.to_json(),
                                  code)
            write(report, sys.stdout, json_indent)
        else:
            from k3diag.render.terminal import make_console, render

            render(analysis, make_console(), title, details=details)
    if not as_json and code == 3 and not machine.analyzable:
        typer.echo("Nothing could be analyzed: no input held a format k3diag reads (see Inputs above).", err=True)
    elif not as_json and code == 3:
        typer.echo("No GPU was found, so this machine cannot be assessed (exit 3).", err=True)
    return code


def emit_machines_report(machines, as_json: bool, fail_on: str, title: str, tp_sizes: list[int] | None,
                         details: bool = False, json_indent: int | None = None) -> int:
    """One machine: `emit_report`. Several: each analyzed and reported on its own (never one joint verdict)."""
    if not machines.several:
        return emit_report(machines.machines[0], as_json, fail_on, title, tp_sizes, details, json_indent)
    from k3diag.analyze.machines import analyze_machines, combined_exit_code, several_machines_finding
    from k3diag.analyze.verdict import exit_code_for

    analyses = analyze_machines(machines, tp_sizes)
    codes = [exit_code_for(a.machine, a.findings, fail_on) for a in analyses]
    code = combined_exit_code(codes, fail_on)
    finding = several_machines_finding(machines)
    if as_json:
        from k3diag.render.json_report import write
        from k3diag.render.machines import build_machines_report

        write(build_machines_report(machines, analyses, codes, finding, code), sys.stdout, json_indent)
    else:
        from k3diag.render.machines import render_machines

        render_machines(machines, analyses, finding, title, details)
    return code
