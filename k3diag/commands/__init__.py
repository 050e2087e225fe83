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


def register_all(app: typer.Typer, modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command not written yet
                continue
            raise
        module.register(app)
