"""The command line. Thin: each command lives in `k3diag.commands.<name>` and imports its
heavy machinery inside the command body so `k3diag --help` and `--version` stay fast."""

from __future__ import annotations

import typer

from k3diag import __version__
from k3diag.commands import COMMAND_MODULES, register_all
from k3diag.exit_codes import EXIT_USAGE

# A wrong command line (unknown option, bad value, missing argument) exits 64, sysexits' EX_USAGE, not click's
# 2: exit 2 means "failures found" to the CI gates and fleet tools that read k3diag's exit codes. Every usage
# error click and typer raise (BadParameter, NoSuchOption, MissingParameter, ...) is a UsageError; typer
# ships its own copy of click (typer._click), so the code is set on the class typer raises.
def _usage_errors_exit_64() -> None:
    import importlib

    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.UsageError.exit_code = EXIT_USAGE


_usage_errors_exit_64()

app = typer.Typer(
    name="k3diag",
    help="Explain why a multi-GPU server will or will not serve a huge model well.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"k3diag {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """k3diag reads a live host, a bundle, or saved tool outputs and tells the story."""


register_all(app, COMMAND_MODULES)


def main() -> None:
    app()
