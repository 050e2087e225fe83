"""The process entry point: `python -m k3diag` and the `k3diag` script (pyproject's `[project.scripts]`)."""

import gc
import sys


# Commands that read their inputs, analyse them once and exit: their records (devices, links, evidence
# references) hold no cycle worth collecting, so the collector stays paused to the end; on a 5,000-device
# lspci its passes cost ~50 ms, 5% of the run (measured with gc.callbacks). Long-running commands
# (check, fleet, collect, probe, serving) get it back.
ONE_SHOT = {(f"k3diag.commands.{name}",) for name in ("analyze", "audit", "advise")}


def main() -> None:
    # Start-up creates some 100,000 objects that live until exit (modules, classes, typer's command tree);
    # the cyclic collector scans them again on every older-generation pass, ~8 ms of a 150 ms run, and
    # finds nothing. Paused while they are made and then frozen (moved out of the collector's view), they
    # cost nothing more, and the collector works as usual on what the command itself allocates.
    gc.disable()
    from k3diag.cli import build_app
    from k3diag.commands import modules_for_argv

    modules = modules_for_argv(sys.argv[1:])
    application = build_app(modules)
    gc.freeze()
    if modules not in ONE_SHOT:
        gc.enable()
    application()


if __name__ == "__main__":
    main()
