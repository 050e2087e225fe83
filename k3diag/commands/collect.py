"""`k3diag collect -o FILE`: write this host's evidence to a bundle someone else can analyze."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("collect")
    def collect(
        output: Path = typer.Option(..., "-o", "--output", help="Bundle to write: NAME.tar.gz for an archive, else a folder."),
        redact: bool = typer.Option(False, "--redact", help="Replace serials, UUIDs, MAC/IP addresses and host names with pseudonyms."),
        nccl_tests: Optional[Path] = typer.Option(None, "--nccl-tests", help="Folder holding nccl-tests binaries (all_reduce_perf); runs them at 1, 2, 4, 8 GPUs."),
        p2p_test: Optional[Path] = typer.Option(None, "--p2p-test", help="Path to the p2pBandwidthLatencyTest binary to run."),
        timeout: float = typer.Option(20.0, "--timeout", min=1.0, help="Seconds each command may take before it is stopped."),
        bench_timeout: float = typer.Option(900.0, "--bench-timeout", min=1.0, help="Seconds each benchmark run may take."),
        probe: bool = typer.Option(False, "--probe", help="Also run `k3diag probe` (host<->GPU and GPU<->GPU copies) and store its readings."),
        probe_size_mib: int = typer.Option(256, "--probe-size-mib", min=1, max=16384, help="Buffer size for --probe, MiB."),
        root: Path = typer.Option(Path("/"), "--root", hidden=True, help="Read sysfs/proc under this root (testing)."),
    ) -> None:
        """Collect every available source from this host into a bundle (folder or .tar.gz)."""
        import datetime as dt

        from k3diag import __version__
        from k3diag.bundle import BundleError, check_output
        from k3diag.inputs import load_live_machine

        err = _stderr_console()
        try:
            check_output(output)
        except BundleError as exc:
            err.print(f"k3diag collect: {exc}")
            raise typer.Exit(2) from None
        if not output.parent.exists():
            # Created like `mkdir -p`, but said aloud: a mistyped folder should not go unnoticed.
            err.print(f"k3diag collect: the folder {output.parent} does not exist; it will be created")
        status = err.status("collecting") if err.is_terminal else None
        if status is not None:
            status.start()

        def progress(message: str) -> None:
            if status is not None:
                status.update(f"collecting: {message}")
            else:
                err.print(f"collecting: {message}")

        try:
            machine, evidence = load_live_machine(root=root, timeout_s=timeout, progress=progress)
            if nccl_tests is not None or p2p_test is not None:
                from k3diag.collect.benchmarks import run_benchmarks

                evidence.extend(run_benchmarks(nccl_tests, p2p_test, max(len(machine.gpus), 1), bench_timeout, progress))
            if probe:
                from k3diag.collect.probe.measure import MIB, ProbeOptions
                from k3diag.collect.probe.run import probe_evidence

                progress("k3diag probe (copies between host and GPUs)")
                evidence.append(probe_evidence(ProbeOptions(size_bytes=probe_size_mib * MIB)))
        finally:
            if status is not None:
                status.stop()
        manifest = {
            "host": machine.host.hostname,
            "collected_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
            "k3diag_version": __version__,
            "driver_version": machine.host.driver_version,
            "cuda_version": machine.host.cuda_version,
            "kernel": machine.host.kernel,
            "gpu_count": len(machine.gpus),
        }
        if redact:
            from k3diag.redact import redact_evidence

            evidence, manifest, report = redact_evidence(evidence, manifest)
            err.print(f"redacted: {report.summary() if hasattr(report, 'summary') else report}")
        from k3diag.bundle import write_bundle

        try:
            written = write_bundle(evidence, manifest, output)
        except BundleError as exc:  # its message names the path and the fix
            err.print(f"k3diag collect: {exc}")
            raise typer.Exit(2) from None
        except OSError as exc:
            err.print(f"k3diag collect: could not write {output} ({exc.strerror or exc}); check the path")
            raise typer.Exit(2) from None
        failed = [item for item in evidence if item.error]
        typer.echo(f"wrote {written}: {len(evidence)} evidence item(s), {len(machine.gpus)} GPU(s) seen")
        for item in failed:
            err.print(f"  note: {item.error}")
        typer.echo(f"analyze it with: k3diag analyze {written}")


def _stderr_console():
    import os

    from rich.console import Console

    # Messages carry paths and tool output, which may hold `[...]`: never markup. Long sentences
    # stay on one line when stderr is a log file, not cut at 80 columns.
    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")), highlight=False, markup=False,
                   soft_wrap=True)
