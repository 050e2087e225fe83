"""The process entry point: `python -m k3diag` and the `k3diag` script (pyproject's `[project.scripts]`)."""

import os
import sys


class _ReaderMayLeave:
    """Standard output for a reader that may stop reading (`k3diag analyze x | head -1`, `| grep -q FAIL`).

    click turns the broken pipe into exit 1, which a CI gate or `set -o pipefail` reads as "warnings" for a
    machine that failed (2) or passed (0). Here the first broken write points the descriptor at /dev/null
    instead, as a pipe reader that left would want, and the command ends with the exit code of its verdict.
    """

    def __init__(self, stream, text: bool = True) -> None:
        self._stream = stream
        self._text = text

    def write(self, data):
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            self._reader_left()
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left()

    @property
    def buffer(self):
        # The audit writes its JSON as bytes through the text stream's buffer.
        return _ReaderMayLeave(self._stream.buffer, text=False) if self._text else self._stream.buffer

    def _reader_left(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main() -> None:
    # Start-up creates some 100,000 objects that live until exit (modules, classes, typer's command tree);
    # the cyclic collector scans them again on every older-generation pass, ~8 ms of a 150 ms run, and
    # finds nothing. Paused while they are made and then frozen (moved out of the collector's view), they
    # cost nothing more, and the collector works as usual on what the command itself allocates.
    from k3diag.gcpause import collector_paused

    if sys.stdout is not None and hasattr(sys.stdout, "fileno"):
        sys.stdout = _ReaderMayLeave(sys.stdout)
    with collector_paused(freeze=True):
        from k3diag.cli import app_for

        application = app_for(sys.argv[1:])
    application()


if __name__ == "__main__":
    main()
