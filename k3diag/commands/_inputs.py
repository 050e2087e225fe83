"""Reading the paths a command was given; a path that does not exist or cannot be read is a usage error."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from k3diag.exit_codes import EXIT_USAGE
from k3diag.gcpause import collector_paused

if TYPE_CHECKING:
    from k3diag.inputs import InputPathError


def load_machine_or_exit(paths: list[Path], command: str, several: bool = False):
    """`k3diag.inputs.load_machine` (with `several`: `load_machines`, one model per machine the inputs
    describe), or every unusable path named on stderr and exit 64 (EX_USAGE)."""
    from k3diag.inputs import InputPathError, load_machine, load_machines

    try:
        # The records of a large input (a 5,000-device `lspci -vv`: ~150,000 devices, links and references,
        # no cycle among them) live until the command exits: frozen once read, the collector's later passes
        # do not scan them again and again (~9 and ~18 ms of a ~700 ms run, finding nothing).
        with collector_paused(freeze=True):
            return load_machines(paths) if several else load_machine(paths)
    except InputPathError as exc:
        exit_unusable_paths(exc, command)


def exit_unusable_paths(exc: InputPathError, command: str) -> NoReturn:
    """Every path an `InputPathError` names, one line each on stderr (escaped: a file name is anyone's
    text), then exit 64 (EX_USAGE): what every command does with a path it cannot read."""
    from k3diag.render.escape import safe_message

    for sentence in exc.sentences:
        typer.echo(f"k3diag {command}: {safe_message(sentence)}", err=True)
    raise typer.Exit(EXIT_USAGE) from None

