"""`k3diag probe`: measure host<->GPU and GPU<->GPU copies on this host (opt-in, active)."""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from k3diag.commands._report import check_fail_on
from k3diag.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN

# Findings that judge a probe's own measurements (the p2p ones judge p2pBandwidthLatencyTest too).
PROBE_FINDING_IDS = ("probe-host-bandwidth-low", "probe-data-mismatch", "p2p-enabled-not-faster",
                     "p2p-cannot-access-peer")


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe(
        as_json: bool = typer.Option(False, "--json", help="Print the JSON report (schema k3diag.report/1)."),
        size_mib: int = typer.Option(256, "--size-mib", min=1, max=16384, help="Buffer size per copy, MiB."),
        repeats: int = typer.Option(3, "--repeats", min=1, max=100, help="Timed copies per measurement."),
        deadline: float = typer.Option(60.0, "--deadline", min=1.0, help="Seconds the whole probe may take."),
        gpu: Optional[List[int]] = typer.Option(None, "--gpu", help="Probe only this GPU index (repeatable)."),
        pairs: bool = typer.Option(True, "--pairs/--no-pairs", help="Also measure every GPU pair."),
        force: bool = typer.Option(False, "--force", help="Probe GPUs whose memory is mostly in use."),
        vendor: str = typer.Option("auto", "--vendor", help="auto, nvidia (libcuda) or amd (libamdhip64)."),
        fail_on: str = typer.Option("warn", "--fail-on", callback=check_fail_on,
                                    help="Exit non-zero on: fail (failures only), warn (warnings too), never."),
    ) -> None:
        """Measure pinned host<->GPU bandwidth and GPU<->GPU peer copies, and check the bytes arrive."""
        if vendor not in ("auto", "nvidia", "amd"):
            typer.echo(f"k3diag probe: --vendor must be auto, nvidia or amd, not {vendor!r}", err=True)
            raise typer.Exit(64)
        from k3diag.collect.probe.measure import MIB, ProbeOptions
        from k3diag.collect.probe.run import probe_evidence

        options = ProbeOptions(size_bytes=size_mib * MIB, repeats=repeats, deadline_s=deadline, force=force,
                               devices=sorted(set(gpu)) if gpu else None, pairs=pairs)
        evidence = [probe_evidence(options, vendor)]
        raise typer.Exit(_report(evidence, as_json, fail_on))


def _report(evidence: list, as_json: bool, fail_on: str) -> int:
    from k3diag.analyze.pipeline import analyze_machine
    from k3diag.collect.live import link_class_evidence
    from k3diag.join.build import build_machine
    from k3diag.model.machine import Machine
    from k3diag.model.probe_records import ProbeBenchmark

    probe_item = evidence[0]
    machine = build_machine(evidence + link_class_evidence(), Machine(live=True))
    bench = next((b for b in machine.benchmarks if isinstance(b, ProbeBenchmark)), None)
    if bench is None:
        reason = probe_item.error or next(
            (w.removeprefix("the probe could not run: ") for record in machine.inputs for w in record.warnings
             if w.startswith("the probe could not run: ")), "the probe produced no measurement")
        if as_json:
            _write_json(machine, [], EXIT_UNKNOWN, verdict=_nothing_measured(reason))
        typer.echo(f"k3diag probe: nothing was measured: {reason}.", err=True)
        return EXIT_UNKNOWN
    analysis = analyze_machine(machine)
    findings = [f for f in analysis.findings if f.id in PROBE_FINDING_IDS]
    code = EXIT_OK
    if not bench.pairs and all(g.host_to_device_gbps is None and g.device_to_host_gbps is None for g in bench.gpus):
        code = EXIT_UNKNOWN  # GPUs were found but nothing was measured (busy, deadline): not a pass
    elif any(f.severity == "fail" for f in findings) and fail_on != "never":
        code = EXIT_FAIL
    elif any(f.severity == "warn" for f in findings) and fail_on == "warn":
        code = EXIT_WARN
    if as_json:
        _write_json(machine, findings, code, analysis)
    else:
        from k3diag.render.probe_text import render_probe

        sys.stdout.write("\n".join(render_probe(bench, machine, findings)) + "\n")
    return code


def _nothing_measured(reason: str) -> dict:
    """The verdict of a probe that measured nothing: unknown, with the reason, never a missing verdict
    (`verdict` is an object in every k3diag.report/1; a script reads `verdict.status`)."""
    from k3diag.analyze.verdict import Verdict

    missing = [{"what": "a GPU and its driver library (libcuda.so.1 or libamdhip64.so) the probe can load",
                "command": "nvidia-smi -L; rocm-smi --showproductname; ldconfig -p | grep -E 'libcuda.so.1|libamdhip64.so'"}]
    return Verdict("unknown", f"Nothing was measured: {reason}.", None, status="unknown", missing=missing).to_json()


def _write_json(machine, findings: list, code: int, analysis=None, verdict: dict | None = None) -> None:
    from k3diag.render.json_report import build_report, write

    if analysis is not None:
        verdict = analysis.verdict.to_json()
    recommendation = analysis.recommendation if analysis is not None else None
    report = build_report(machine, findings, recommendation, verdict, code)
    write(report, sys.stdout)
