"""Reading the paths a command was given; a path that does not exist or cannot be read is a usage error."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import typer

from k3diag.exit_codes import EXIT_USAGE


def load_machine_or_exit(paths: list[Path], command: str, several: bool = False):
    """`k3diag.inputs.load_machine` (with `several`: `load_machines`, one model per machine the inputs
    describe), or every unusable path named on stderr and exit 64 (EX_USAGE)."""
    from k3diag.inputs import InputPathError, load_machine, load_machines
    from k3diag.render.escape import safe_message

    try:
        with _records_kept_out_of_the_collector():
            return load_machines(paths) if several else load_machine(paths)
    except InputPathError as exc:
        for sentence in exc.sentences:
            typer.echo(f"k3diag {command}: {safe_message(sentence)}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


@contextmanager
def _records_kept_out_of_the_collector() -> Iterator[None]:
    """The cyclic collector paused while the inputs are read, and what was read then frozen (`gc.freeze`),
    as `__main__` does with start-up's objects.

    The records of a large input (a 5,000-device `lspci -vv`: ~150,000 devices, links and references, no
    cycle among them) live until the command exits. The parsers pause the collector while they build them,
    but the first collection after that scanned them all as young objects, and a later older-generation
    pass scanned them again (~9 and ~18 ms of a ~700 ms run, found nothing). This is a command's one
    reading of its inputs in its own process, so nothing frozen here outlives its use for long: acyclic
    records are still freed as soon as nothing holds them."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
