"""`k3diag serving RESULTS...`: serving benchmarks compared across layouts, explained by the topology."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from k3diag.exit_codes import EXIT_UNKNOWN, EXIT_USAGE


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    typer.echo(f"k3diag serving: {message}", err=True)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    @app.command("serving")
    def serving_command(
        results: List[Path] = typer.Argument(..., readable=False, help="Result files or folders: vllm bench serve JSON/JSONL, SGLang "
                                                       "bench_serving JSONL, trtllm-bench report, AIPerf/GenAI-Perf, "
                                                       "LLMPerf summaries, and the engines' logs."),
        from_paths: Optional[List[Path]] = typer.Option(None, "--from", readable=False, help="The machine's evidence (bundle or saved "
                                                                            "outputs) to explain the numbers with."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (schema k3diag.serving/1)."),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write a self-contained HTML page with the charts."),
        slo_tpot_ms: Optional[float] = typer.Option(None, "--slo-tpot-ms", help="Latency target: TPOT at P99, in ms."),
        slo_ttft_ms: Optional[float] = typer.Option(None, "--slo-ttft-ms", help="Latency target: TTFT at P99, in ms."),
        slo_stat: str = typer.Option("p99", "--slo-stat", help="Which percentile the targets apply to: p50, p95 or p99."),
        model: Optional[str] = typer.Option(None, "--model", help="Catalog model the runs served, when the result "
                                                                 "files name it differently (see k3diag advise --list)."),
    ) -> None:
        """Which layout (TP1, TP2, TP4, replicas...) serves best per GPU at your latency target, and why.

        Exit codes: 0 the layouts were ranked; 3 nothing comparable could be read (no results, or runs at different loads, lengths or models); 64 a usage error.
        """
        from k3diag.model import json_text
        import sys

        for name, value in (("--slo-tpot-ms", slo_tpot_ms), ("--slo-ttft-ms", slo_ttft_ms)):
            if value is not None and not value > 0:
                _fail(f"{name} must be a positive number of milliseconds, not {value:g}.")
        if slo_stat.lower() not in ("p50", "p95", "p99"):
            _fail(f"--slo-stat must be p50, p95 or p99, not {slo_stat!r}.")
        if model:
            from k3diag.advise.catalog import CatalogError, find_model

            try:
                find_model(model)
            except CatalogError as exc:
                _fail(str(exc).split("; or pass --config")[0].rstrip(".") + ".")

        from k3diag.analyze.serving.compare import Slo
        from k3diag.analyze.serving.report import build_report
        from k3diag.inputs_serving import load_serving

        from k3diag.commands._inputs import exit_unusable_paths
        from k3diag.inputs import InputPathError, load_machine

        try:
            loaded = load_serving(list(results))
        except InputPathError as exc:  # a path that cannot be read: named, exit 64, as analyze does
            exit_unusable_paths(exc, "serving")
        machine = loaded.machine
        machine_source = None
        warnings = list(loaded.warnings)
        if from_paths:
            try:
                evidence_machine, errors = load_machine(list(from_paths))
            except InputPathError as exc:
                exit_unusable_paths(exc, "serving")
            warnings.extend(errors)
            # Engine logs and P2P caches given with the results explain the runs too.
            for key in ("serving_engines", "vllm_p2p_caches"):
                evidence_machine.extras.setdefault(key, []).extend(machine.extras.get(key, []))
            evidence_machine.nccl.extend(machine.nccl)
            machine = evidence_machine
            machine_source = ", ".join(str(p) for p in from_paths)
        elif not (machine.gpus or machine.links or machine.nccl or machine.extras.get("serving_engines")):
            machine = None
        elif machine.gpus or machine.links:
            machine_source = "the inputs"  # a bundle or topology outputs given with the results
        slo = Slo(tpot_ms=slo_tpot_ms, ttft_ms=slo_ttft_ms, stat=slo_stat.lower())
        from k3diag.advise.serving import estimate_allreduce, predict_layouts

        report = build_report(loaded.runs, machine, slo, model_name=model, inputs=loaded.inputs,
                              warnings=warnings, machine_source=machine_source,
                              estimate=estimate_allreduce, predictor=predict_layouts)
        written = None
        if html is not None:
            from k3diag.render.escape import escape_terminal
            from k3diag.render.output import write_text_atomic
            from k3diag.render.serving_html import render_html

            try:
                # the old page or the new one, never a cut one; model names from result files shown, not obeyed
                write_text_atomic(html, escape_terminal(render_html(report), multiline=True))
            except OSError as exc:
                _fail(f"could not write {html} ({exc.strerror or exc}); check the path.")
            written = str(html)
        if as_json:
            sys.stdout.write(json_text.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
        elif sys.stdout.isatty():
            from k3diag.render.serving_text import render_terminal

            render_terminal(report, sys.stdout)
        else:
            from k3diag.render.escape import escape_terminal
            from k3diag.render.serving_text import render_plain

            sys.stdout.write(escape_terminal(render_plain(report), multiline=True))
        if written:
            typer.echo(f"wrote {written}", err=True)
        if not report.runs:
            typer.echo("k3diag serving: no serving benchmark result was found in "
                       + ", ".join(str(p) for p in results), err=True)
            raise typer.Exit(EXIT_UNKNOWN)
        raise typer.Exit(report.exit_code)
