"""`k3diag analyze PATH...`: saved outputs, folders and bundles."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from k3diag.commands._report import check_fail_on, check_json_indent, emit_machines_report, parse_tp_sizes


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    def analyze(
        paths: List[Path] = typer.Argument(..., readable=False, help="Saved tool outputs, folders of them, or k3diag bundles (.tar.gz or folder); - reads standard input."),
        as_json: bool = typer.Option(False, "--json", help="Print the JSON report (schema k3diag.report/1) instead of tables."),
        json_indent: Optional[int] = typer.Option(None, "--json-indent", callback=check_json_indent, metavar="N",
                                                  help="Indent the JSON report N spaces (default: compact, one line)."),
        fail_on: str = typer.Option("warn", "--fail-on", callback=check_fail_on,
                                     help="Exit non-zero on: fail (failures only), warn (warnings too), never."),
        tp: Optional[List[int]] = typer.Option(None, "--tp", help="Also plan TP groups of this size (repeatable)."),
        details: bool = typer.Option(False, "--details", help="Add the matrices, PCIe paths, NCCL transports, the TP "
                                     "plan at every size and every finding in full."),
    ) -> None:
        """Analyze saved outputs (nvidia-smi, lspci, NCCL logs, nccl-tests, rocm-smi...) and explain them.

        Exit codes: 0 nothing warns, 1 warnings, 2 failures, 3 nothing could be analyzed or no GPU was
        found, 64 a usage error (a path that does not exist or cannot be read, a bad option), 74 standard
        output could not be written.
        """
        from k3diag.commands._inputs import load_machine_or_exit

        machines, _ = load_machine_or_exit(list(paths), "analyze", several=True)
        # the first line a reader sees: the input itself when there is one, else how many
        title = f"k3diag analyze: {paths[0]}" if len(paths) == 1 else f"k3diag analyze: {len(paths):,} inputs"
        raise typer.Exit(emit_machines_report(machines, as_json or json_indent is not None, fail_on, title,
                                              parse_tp_sizes(tp), details, json_indent))
