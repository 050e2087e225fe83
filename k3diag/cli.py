"""The command line. Thin: each command lives in `k3diag.commands.<name>` and imports its
heavy machinery inside the command body so `k3diag --help` and `--version` stay fast."""

from __future__ import annotations

import sys

import typer

from k3diag import __version__
from k3diag.commands import COMMAND_MODULES, modules_for_argv, register_all
from k3diag.exit_codes import EXIT_USAGE

# A wrong command line (unknown option, bad value, missing argument) exits 64, sysexits' EX_USAGE, not click's
# 2: exit 2 means "failures found" to the CI gates and fleet tools that read k3diag's exit codes. Every usage
# error click and typer raise (BadParameter, NoSuchOption, MissingParameter, ...) is a UsageError; typer
# ships its own copy of click (typer._click) in recent versions, so the code is set on the class typer
# raises. Only a click already imported (by typer) is touched: importing the other copy costs ~8 ms of start-up.
def _usage_errors_exit_64() -> None:
    for name in ("typer._click.exceptions", "click.exceptions"):
        module = sys.modules.get(name)
        if module is not None:
            module.UsageError.exit_code = EXIT_USAGE


_usage_errors_exit_64()


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"k3diag {__version__}")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """k3diag reads a live host, a bundle, or saved tool outputs and tells the story."""


def build_app(modules: tuple[str, ...] = COMMAND_MODULES) -> typer.Typer:
    """The typer application with the commands of `modules` (every command by default)."""
    application = typer.Typer(
        name="k3diag",
        help="Explain why a multi-GPU server will or will not serve a huge model well.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # Help and usage errors in click's plain form, as Unix tools print them (and to a pipe or a log
        # without box drawing): typer's rich help imports rich's Markdown and traceback modules, which
        # made `k3diag --help` 2.5x `import typer` (0.28 s against 0.11 s).
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    application.callback()(_root)
    register_all(application, modules)
    return application


def __getattr__(name: str):
    # `from k3diag.cli import app` (tests, embedders): the whole application, built on first use.
    if name == "app":
        application = globals()["app"] = build_app()
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_for(argv: list[str]) -> typer.Typer:
    """The application for one run. A run names one command: only that one is registered (building all
    nine costs ~15 ms of every start-up). `k3diag`, `--help`, `--version` and a misspelt command get them
    all, so help lists every command and click's "No such command" can suggest the right one."""
    return build_app(modules_for_argv(argv))


def main() -> None:
    """Run the command line (for embedders and tests; the process entry is `k3diag.__main__.main`)."""
    app_for(sys.argv[1:])()
