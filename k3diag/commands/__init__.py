"""One module per command; each exposes `register(app)` and keeps heavy imports inside the body."""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES: tuple[str, ...] = (
    "k3diag.commands.topo",
    "k3diag.commands.analyze",
    "k3diag.commands.collect",
    "k3diag.commands.advise",
    "k3diag.commands.audit",
    "k3diag.commands.check",
    "k3diag.commands.fleet",
    "k3diag.commands.probe",
    "k3diag.commands.serving",
)


def modules_for_argv(argv: list[str]) -> tuple[str, ...]:
    """The command modules a run with these arguments needs: the named command's alone, or every one when
    the first word that is not an option is no command (or there is none: `k3diag --help`)."""
    for word in argv:
        if word.startswith("-"):
            continue
        module = f"k3diag.commands.{word}"
        return (module,) if module in COMMAND_MODULES else COMMAND_MODULES
    return COMMAND_MODULES


def register_all(app: typer.Typer, modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command not written yet
                continue
            raise
        module.register(app)
