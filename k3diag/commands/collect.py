"""`k3diag collect -o FILE`: write this host's evidence to a bundle someone else can analyze."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from k3diag.model.words import counted

DEFAULT_DEADLINE_S = 120.0


def register(app: typer.Typer) -> None:
    @app.command("collect")
    def collect(
        output: Path = typer.Option(..., "-o", "--output",
                                    help="Bundle to write: NAME.tar.gz (or .tgz) for an archive, else a folder. "
                                         "Its folder must exist."),
        force: bool = typer.Option(False, "--force", help="Replace an existing archive, or an existing bundle folder."),
        redact: bool = typer.Option(False, "--redact", help="Replace serials, UUIDs, MAC/IP addresses, host and user "
                                                            "names with pseudonyms (see docs/bundle-format.md)."),
        nccl_tests: Optional[Path] = typer.Option(None, "--nccl-tests", help="Folder holding nccl-tests binaries (all_reduce_perf); runs them at 1, 2, 4, 8 GPUs."),
        p2p_test: Optional[Path] = typer.Option(None, "--p2p-test", help="Path to the p2pBandwidthLatencyTest binary to run."),
        timeout: float = typer.Option(20.0, "--timeout", min=1.0, help="Seconds each command may take before it is stopped."),
        deadline: float = typer.Option(DEFAULT_DEADLINE_S, "--deadline", min=1.0,
                                       help="Seconds the whole inventory collection may take; commands not started "
                                            "by then are skipped and the bundle says so. Benchmarks have "
                                            "--bench-timeout each."),
        bench_timeout: float = typer.Option(900.0, "--bench-timeout", min=1.0, help="Seconds each benchmark run may take."),
        probe: bool = typer.Option(False, "--probe", help="Also run `k3diag probe` (host<->GPU and GPU<->GPU copies) and store its readings."),
        probe_size_mib: int = typer.Option(256, "--probe-size-mib", min=1, max=16384, help="Buffer size for --probe, MiB."),
        root: Path = typer.Option(Path("/"), "--root", hidden=True, help="Read sysfs/proc under this root (testing)."),
    ) -> None:
        """Collect every available source from this host into a bundle (folder or .tar.gz).

        Exit codes: 0 written, 64 the output cannot or must not be written, 130 interrupted (Ctrl-C),
        143 terminated (SIGTERM); an interrupted run stops every command it started and leaves no
        partial bundle.
        """
        from k3diag.bundle import BundleError, check_output
        from k3diag.lifecycle import Terminated, terminate_on_sigterm
        from k3diag.exit_codes import EXIT_USAGE
        from k3diag.render.escape import safe_message

        err = _stderr_console()
        try:
            check_output(output, force=force)
        except BundleError as exc:
            err.print(f"k3diag collect: {safe_message(exc)}")
            raise typer.Exit(EXIT_USAGE) from None
        status = err.status("collecting") if err.is_terminal else None
        interrupted: int | None = None
        try:
            with terminate_on_sigterm():
                if status is not None:
                    status.start()
                try:
                    written, evidence, gpu_count = _collect_and_write(
                        output, force, redact, nccl_tests, p2p_test, timeout, deadline, bench_timeout, root,
                        status, err, probe_size_mib if probe else None)
                finally:
                    if status is not None:
                        status.stop()
        except KeyboardInterrupt:
            interrupted = 130
        except Terminated:
            interrupted = 143
        except BundleError as exc:  # its message names the path and the fix
            err.print(f"k3diag collect: {safe_message(exc)}")
            raise typer.Exit(EXIT_USAGE) from None
        if interrupted is not None:
            what = "interrupted" if interrupted == 130 else "terminated"
            err.print(f"k3diag collect: {what}; every command it started was stopped and no bundle was written")
            raise typer.Exit(interrupted)
        failed = [item for item in evidence if item.error]
        typer.echo(f"wrote {written}: {counted(len(evidence), 'evidence item')}, {counted(gpu_count, 'GPU')} seen")
        for item in failed:
            err.print(f"  note: {safe_message(item.error)}")
        typer.echo(f"analyze it with: k3diag analyze {written}")


def _collect_and_write(output: Path, force: bool, redact: bool, nccl_tests: Path | None, p2p_test: Path | None,
                       timeout: float, deadline: float, bench_timeout: float, root: Path, status, err,
                       probe_size_mib: int | None):
    import datetime as dt

    from k3diag import __version__
    from k3diag.bundle import is_archive_name, write_bundle
    from k3diag.inputs import load_live_machine

    def progress(message: str) -> None:
        if status is not None:
            status.update(f"collecting: {message}")
        else:
            err.print(f"collecting: {message}")

    machine, evidence = load_live_machine(root=root, timeout_s=timeout, progress=progress, deadline_s=deadline)
    if nccl_tests is not None or p2p_test is not None:
        from k3diag.collect.benchmarks import run_benchmarks

        evidence.extend(run_benchmarks(nccl_tests, p2p_test, max(len(machine.gpus), 1), bench_timeout, progress))
    if probe_size_mib is not None:
        from k3diag.collect.probe.measure import MIB, ProbeOptions
        from k3diag.collect.probe.run import probe_evidence

        progress("k3diag probe (copies between host and GPUs)")
        evidence.append(probe_evidence(ProbeOptions(size_bytes=probe_size_mib * MIB)))
    manifest = {
        "host": machine.host.hostname,
        "collected_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "k3diag_version": __version__,
        "driver_version": machine.host.driver_version,
        "cuda_version": machine.host.cuda_version,
        "kernel": machine.host.kernel,
        "gpu_count": len(machine.gpus),
        "deadline_s": deadline,
    }
    top = None
    if redact:
        from k3diag.redact import redact_evidence

        evidence, manifest, report, redactor = redact_evidence(evidence, manifest, with_redactor=True)
        err.print(f"redacted: {report.summary()}")
        if is_archive_name(output):
            # Every member name carries the archive's top folder: it must not carry the host name.
            stem = output.name[: -len(".tgz")] if output.name.lower().endswith(".tgz") else output.name[: -len(".tar.gz")]
            top = redactor.text(stem)
    written = write_bundle(evidence, manifest, output, force=force, top=top)
    return written, evidence, len(machine.gpus)


def _stderr_console():
    import os

    from rich.console import Console

    # Messages carry paths and tool output, which may hold `[...]`: never markup. Long sentences
    # stay on one line when stderr is a log file, not cut at 80 columns.
    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")), highlight=False, markup=False,
                   soft_wrap=True)
