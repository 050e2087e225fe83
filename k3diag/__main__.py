"""The process entry point: `python -m k3diag` and the `k3diag` script (pyproject's `[project.scripts]`)."""

import gc
import sys


def main() -> None:
    # Start-up creates some 100,000 objects that live until exit (modules, classes, typer's command tree);
    # the cyclic collector scans them again on every older-generation pass, ~8 ms of a 150 ms run, and
    # finds nothing. Paused while they are made and then frozen (moved out of the collector's view), they
    # cost nothing more, and the collector works as usual on what the command itself allocates.
    gc.disable()
    from k3diag.cli import app_for

    application = app_for(sys.argv[1:])
    gc.freeze()
    gc.enable()
    application()


if __name__ == "__main__":
    main()
