"""`k3diag topo`: this host, live (or saved evidence with --from)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from k3diag.commands._report import check_fail_on, check_json_indent, emit_report, parse_tp_sizes
from k3diag.model.words import counted


def register(app: typer.Typer) -> None:
    @app.command("topo")
    def topo(
        from_paths: Optional[List[Path]] = typer.Option(None, "--from", readable=False, help="Read saved evidence instead of this host (repeatable)."),
        as_json: bool = typer.Option(False, "--json", help="Print the JSON report (schema k3diag.report/1) instead of tables."),
        json_indent: Optional[int] = typer.Option(None, "--json-indent", callback=check_json_indent, metavar="N",
                                                  help="Indent the JSON report N spaces (default: compact, one line)."),
        fail_on: str = typer.Option("warn", "--fail-on", callback=check_fail_on,
                                    help="Exit non-zero on: fail (failures only), warn (warnings too), never."),
        tp: Optional[List[int]] = typer.Option(None, "--tp", help="Also plan TP groups of this size (repeatable)."),
        details: bool = typer.Option(False, "--details", help="Add the matrices, PCIe paths, NCCL transports, the TP "
                                     "plan at every size and every finding in full."),
        timeout: float = typer.Option(20.0, "--timeout", min=1.0, help="Seconds each command may take before it is stopped."),
        root: Path = typer.Option(Path("/"), "--root", hidden=True, help="Read sysfs/proc under this root (testing)."),
    ) -> None:
        """Show this host's GPUs, the paths between them, P2P status, and what is wrong.

        Exit codes: 0 nothing warns, 1 warnings, 2 failures, 3 nothing could be analyzed or no GPU was
        found, 64 a usage error (a path that does not exist or cannot be read, a bad option), 74 standard
        output could not be written.
        """
        if from_paths:
            from k3diag.commands._inputs import load_machine_or_exit

            machine, _ = load_machine_or_exit(list(from_paths), "topo")
            title = f"k3diag topo: saved evidence ({counted(len(from_paths), 'path')})"
        else:
            from k3diag.inputs import load_live_machine

            machine, _ = load_live_machine(root=root, timeout_s=timeout, texts="missing")
            title = f"k3diag topo: live host {machine.host.hostname or ''}".rstrip()
        raise typer.Exit(emit_report(machine, as_json or json_indent is not None, fail_on, title, parse_tp_sizes(tp),
                                     details, json_indent))
