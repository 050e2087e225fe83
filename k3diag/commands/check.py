"""`k3diag check`: this node, bounded and passive, for Slurm, node-problem-detector, NHC and Prometheus."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(
        output_format: str = typer.Option("text", "--format", help="text, json, nagios, npd, nhc or prom."),
        prom_file: Optional[Path] = typer.Option(None, "--prom-file", help="Also write Prometheus metrics here, atomically (e.g. /var/lib/prometheus/node-exporter/k3diag.prom)."),
        slurm_drain: bool = typer.Option(False, "--slurm-drain", help="Drain this node through scontrol on failure (reason 'k3diag: <finding> <subject>'); resume it on a pass only if k3diag drained it."),
        node: Optional[str] = typer.Option(None, "--node", help="This node's name for Slurm and the reports (default: $SLURMD_NODENAME, else the short host name)."),
        scontrol: str = typer.Option("scontrol", "--scontrol", help="The scontrol to run for --slurm-drain."),
        expect: Optional[Path] = typer.Option(None, "--expect", readable=False, help="Purchase spec (TOML, the audit's format): every line the node misses is a failure."),
        deadline: float = typer.Option(30.0, "--deadline", min=1.0, help="Seconds the whole check may take; past it the check stops and reports unknown."),
        timeout: float = typer.Option(20.0, "--timeout", min=1.0, help="Seconds each command may take (capped by what is left of --deadline)."),
        fail_on: str = typer.Option("warn", "--fail-on", help="Exit non-zero on: fail (failures only), warn (warnings too), never."),
        nccl_tests: Optional[Path] = typer.Option(None, "--nccl-tests", help="Also run nccl-tests from this folder (a benchmark: only when asked, within the deadline)."),
        p2p_test: Optional[Path] = typer.Option(None, "--p2p-test", help="Also run this p2pBandwidthLatencyTest binary (only when asked, within the deadline)."),
        from_paths: Optional[List[Path]] = typer.Option(None, "--from", readable=False, help="Read saved evidence (a bundle, files) instead of this host: for tests and for replaying a node's bundle."),
        root: Path = typer.Option(Path("/"), "--root", hidden=True, help="Read sysfs/proc under this root (testing)."),
    ) -> None:
        """Check this node once, within a deadline, without running benchmarks unless asked.

        Exit codes: 0 ok, 1 warnings, 2 failures, 3 unknown (nothing could be judged, or the deadline
        passed), 64 usage error. With --format npd: 0 OK, 1 NonOK (warnings or failures), 2 Unknown.
        """
        import os
        import socket
        import sys

        from k3diag.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE, EXIT_WARN
        from k3diag.render.check_formats import FORMATS

        def usage(message: str) -> None:
            typer.echo(f"k3diag check: {message}", err=True)
            from k3diag.render.check_formats import usage_answer

            answer = usage_answer(output_format, message)  # nagios and npd answer UNKNOWN on stdout too
            if answer is not None:
                sys.stdout.write(answer[0])
                raise typer.Exit(answer[1])
            raise typer.Exit(EXIT_USAGE)

        if output_format not in FORMATS:
            usage(f"--format must be one of {', '.join(FORMATS)}, not {output_format!r}")
        if fail_on not in ("fail", "warn", "never"):
            usage(f"--fail-on must be one of fail, warn, never, not {fail_on!r}")
        if expect is not None and not expect.is_file():
            usage(f"the spec {expect} does not exist or is not a file; check the path")
        if prom_file is not None and not prom_file.parent.is_dir():
            usage(f"the folder {prom_file.parent} for --prom-file does not exist; create it or fix the path "
                  "(node_exporter's --collector.textfile.directory)")
        for path in from_paths or []:
            if not path.exists():
                usage(f"{path} does not exist; check the path given to --from")
        # Slurm's name for this node; saved evidence read with --from keeps its own name unless one is given.
        slurm_name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0] or "localhost"
        name = node or os.environ.get("SLURMD_NODENAME") or (None if from_paths else slurm_name)

        from k3diag.fleet.check_run import CheckRequest, CheckUsageError, run_check
        from k3diag.render.check_formats import npd_exit_code, render, worst_finding, write_prom_file

        request = CheckRequest(
            from_paths=list(from_paths or []), root=root, command_timeout_s=timeout, deadline_s=deadline,
            fail_on=fail_on, spec_path=expect, nccl_tests=nccl_tests, p2p_test=p2p_test, node=name,
        )
        try:
            report, code, timing = run_check(request)
        except CheckUsageError as exc:
            usage(str(exc))
            return
        # the node as the shape names it (saved evidence: its host name, else its file's name)
        report["check"] = timing | {"node": (report.get("shape") or {}).get("node") or name, "format": output_format}
        text = render(output_format, report, code, timing)
        if output_format in ("text", "nagios", "npd", "nhc"):
            # a node name or evidence line from saved files (`--from`) reaches a monitoring status line:
            # its control characters are shown escaped (JSON escapes them itself, Prometheus labels are quoted)
            from k3diag.render.escape import escape_terminal

            text = escape_terminal(text, multiline=True)
        if prom_file is not None:
            from k3diag.render.check_formats import render_prom

            try:
                write_prom_file(prom_file, text if output_format == "prom" else render_prom(report, code, timing))
            except OSError as exc:
                typer.echo(f"k3diag check: could not write {prom_file} ({exc.strerror or exc}); check the folder's "
                           "permissions", err=True)
                code = EXIT_UNKNOWN if code == EXIT_OK else code
        if not (output_format == "prom" and prom_file is not None):
            sys.stdout.write(text)
        if slurm_drain:
            from k3diag.fleet.slurm import SlurmError, apply, drain_reason

            judged = code != EXIT_UNKNOWN
            has_fail = any(f.get("severity") == "fail" for f in report.get("findings") or [])
            worst = worst_finding(report)
            reason = drain_reason(str(worst.get("id")), ",".join(worst.get("subjects") or []) or "host") if (
                has_fail and worst) else None
            try:
                message = apply(slurm_name, failed=judged and has_fail, passed=judged and not has_fail,
                                reason=reason, scontrol=scontrol)
                typer.echo(message, err=True)
            except SlurmError as exc:
                typer.echo(f"k3diag check: --slurm-drain could not ask Slurm: {exc}", err=True)
        if output_format == "npd":
            raise typer.Exit(npd_exit_code(code))
        raise typer.Exit(code if code in (EXIT_OK, EXIT_WARN, EXIT_FAIL, EXIT_UNKNOWN) else EXIT_UNKNOWN)
