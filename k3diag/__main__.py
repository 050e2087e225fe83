"""The process entry point: `python -m k3diag` and the `k3diag` script (pyproject's `[project.scripts]`)."""

import os
import sys


class _ReaderMayLeave:
    """Standard output for a reader that may stop reading (`k3diag analyze x | head -1`, `| grep -q FAIL`).

    click turns the broken pipe into exit 1, which a CI gate or `set -o pipefail` reads as "warnings" for a
    machine that failed (2) or passed (0). Here the first broken write points the descriptor at /dev/null
    instead, as a pipe reader that left would want, and the command ends with the exit code of its verdict.
    """

    def __init__(self, stream, text: bool = True, diagnostics: bool = False) -> None:
        self._stream = stream
        self._text = text
        # standard error: progress and messages, never the result. A failure to write them (`2>&1 | head -1`,
        # `2>/dev/full`) must not end the command (collect wrote no bundle, exit 1) nor change its exit code
        self._diagnostics = diagnostics

    def write(self, data):
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            self._reader_left()
            return len(data)
        except OSError as exc:
            self._failed(exc)
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, error: OSError) -> None:
        if self._diagnostics:
            self._reader_left()
            return
        # Kept for `main` to say, even where a library swallows the exception: click probes a stream with
        # `write("")` inside `except Exception`, and `k3diag --help >/dev/full` then exited 0 with nothing out.
        # What is still buffered goes nowhere, so it does not fail again at exit.
        OUTPUT_FAILURES.append(error)
        self._reader_left()
        raise OutputFailed(error) from None

    @property
    def buffer(self):
        # The audit writes its JSON as bytes through the text stream's buffer.
        return _ReaderMayLeave(self._stream.buffer, text=False, diagnostics=self._diagnostics) if self._text \
            else self._stream.buffer

    def _reader_left(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


# The write errors of standard output met in this run (not a reader that left): `main` ends with EX_IOERR.
OUTPUT_FAILURES: list[OSError] = []


class OutputFailed(Exception):
    """Standard output could not be written for another reason than a reader that left: `> report.json` on a
    full disk (ENOSPC), `>/dev/full`, a descriptor opened read-only. Not an OSError, so click does not take
    it for its own broken-pipe case; `main` says so in one sentence and exits EX_IOERR."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _ClosedOutput:
    """Standard output when the process was started with it closed (`k3diag analyze x >&-`): a command that
    writes nothing there runs as usual; the first write is `OutputFailed`, not an AttributeError on None."""

    encoding = "utf-8"

    def write(self, data):
        import errno

        error = OSError(errno.EBADF, "it is closed")
        OUTPUT_FAILURES.append(error)
        raise OutputFailed(error)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    @property
    def buffer(self) -> "_ClosedOutput":
        return self


def _say_output_failed(error: OSError) -> None:
    from k3diag.commands import modules_for_argv

    modules = modules_for_argv(sys.argv[1:])  # the command the run names, as the application was built for
    who = "k3diag " + modules[0].rsplit(".", 1)[1] if len(modules) == 1 else "k3diag"
    reason = error.strerror or str(error)
    try:
        sys.stderr.write(f"{who}: could not write to standard output ({reason}); "
                         "what it shows is incomplete\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # standard error is gone too: the exit code is all that is left to say it


def main() -> None:
    # Start-up creates some 100,000 objects that live until exit (modules, classes, typer's command tree);
    # the cyclic collector scans them again on every older-generation pass, ~8 ms of a 150 ms run, and
    # finds nothing. Paused while they are made and then frozen (moved out of the collector's view), they
    # cost nothing more, and the collector works as usual on what the command itself allocates.
    from k3diag.gcpause import collector_paused

    if sys.stdout is None:
        sys.stdout = _ClosedOutput()
    elif hasattr(sys.stdout, "fileno"):
        sys.stdout = _ReaderMayLeave(sys.stdout)
    if sys.stderr is not None and hasattr(sys.stderr, "fileno"):
        sys.stderr = _ReaderMayLeave(sys.stderr, diagnostics=True)
    from k3diag.lifecycle import EXIT_TERMINATED, Terminated, terminate_on_sigterm

    with collector_paused(freeze=True):
        from k3diag.cli import app_for
        from k3diag.commands import modules_for_argv

        application = app_for(sys.argv[1:])
    outcome: SystemExit | None = None
    try:
        # `kill PID`, `docker stop`: every clean-up runs (temporary files, forked workers, child commands)
        with terminate_on_sigterm():
            application()
    except OutputFailed:
        pass  # said below
    except SystemExit as done:
        outcome = done
    except Terminated:
        outcome = SystemExit(EXIT_TERMINATED)
    if OUTPUT_FAILURES:  # whatever the command meant to exit with, what it showed is incomplete
        from k3diag.exit_codes import EXIT_IOERR

        _say_output_failed(OUTPUT_FAILURES[0])
        outcome = SystemExit(EXIT_IOERR)
    if outcome is not None and outcome.code == 64:
        outcome = _plugin_usage_answer(sys.argv[1:]) or outcome
    if outcome is None:
        return
    if (isinstance(outcome.code, int) or outcome.code is None) and _is_the_program() \
            and modules_for_argv(sys.argv[1:]) in _READ_ONLY_COMMANDS:
        import atexit

        # The exit (its traceback, so the frames and what they hold) goes with the handler: dropped
        # before the handler runs, it would free all of the records first, the teardown this skips.
        atexit.register(_leave_now, int(outcome.code or 0), outcome)
    raise outcome


def _plugin_usage_answer(argv: list[str]) -> SystemExit | None:
    """`k3diag check --format nagios|npd` given a command line click refused (an unknown option, a bad
    value): the UNKNOWN answer `usage_answer` gives the errors the command finds itself."""
    if not argv or argv[0] != "check":
        return None
    fmt = None
    for index, arg in enumerate(argv):
        if arg == "--format" and index + 1 < len(argv):
            fmt = argv[index + 1]
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
    if fmt not in ("nagios", "npd"):
        return None
    from k3diag.render.check_formats import usage_answer

    line, code = usage_answer(fmt, "wrong command line (its standard error says why)")
    try:
        sys.stdout.write(line)
        sys.stdout.flush()
    except (OSError, OutputFailed):
        pass
    return SystemExit(code)


# Commands that write nothing but standard output and standard error (no file, no bundle, no child left).
_READ_ONLY_COMMANDS = (("k3diag.commands.analyze",), ("k3diag.commands.topo",))


def _is_the_program() -> bool:
    """Whether this `main` is the process's own entry (`python -m k3diag`, the `k3diag` script), not a
    function another program calls and may outlive."""
    return getattr(sys.modules.get("__main__"), "main", None) is main


def _leave_now(code: int, _exit: BaseException | None = None) -> None:
    """At exit, end the process with `code` without the interpreter's teardown, when nothing is left for it.

    The teardown frees every object one by one: after a 5,000-device `lspci -vv` some 150,000 records and
    a 25 MB text (~47 M instructions, 1.4% of the run), only for the memory to be returned when the process
    ends anyway. Registered last, this runs first of the `atexit` handlers, after everything else the
    program ran; it ends the process only when it is the one handler (a temporary folder's clean-up or a
    process pool registers another), no other thread runs, k3diag is still the program (a `runpy` caller
    that caught the exit and went on ends as it would) and standard output and error flush cleanly.
    Otherwise the usual exit follows, with the same code."""
    import atexit
    import threading

    pending = getattr(atexit, "_ncallbacks", None)  # CPython's count of registered handlers, this one included
    if pending is None or pending() != 1 or threading.active_count() > 1 or not _is_the_program():
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - the usual exit reports it as it always did
        return
    os._exit(code)


if __name__ == "__main__":
    main()
