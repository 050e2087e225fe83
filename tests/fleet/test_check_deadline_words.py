"""`k3diag check`'s deadline note counts the commands it did not run in words, with the verb agreeing."""

from __future__ import annotations

from k3diag.fleet.check_run import _note_deadline_stops
from k3diag.model.machine import Machine


def _machine(stopped: bool, skipped: int) -> Machine:
    machine = Machine()
    if stopped:
        machine.note("collect", "the collection's deadline stopped `nvidia-smi -q` after 30 s")
    for index in range(skipped):
        machine.note("collect", f"`tool{index}` was not run: the collection's deadline had passed")
    return machine


def _said(stopped: bool, skipped: int) -> tuple[str | None, str]:
    machine = _machine(stopped, skipped)
    short = _note_deadline_stops(machine, 30.0)
    return short, next(n.message for n in machine.notes if n.subject == "check")


def test_commands_not_run_one_and_several() -> None:
    short, note = _said(True, 1)
    assert note.startswith("k3diag check reached its 30 s deadline: `nvidia-smi -q` was stopped and 1 more command "
                           "was not run; "), note
    short, note = _said(True, 3)
    assert "`nvidia-smi -q` was stopped and 3 more commands were not run; " in note
    assert short == "stopped at the 30 s deadline while running `nvidia-smi -q`"
    short, note = _said(False, 1)
    assert short == "stopped at the 30 s deadline: 1 command not run"
    assert note.startswith("k3diag check reached its 30 s deadline: 1 command was skipped; "), note
    short, note = _said(False, 2)
    assert short == "stopped at the 30 s deadline: 2 commands not run"
    assert note.startswith("k3diag check reached its 30 s deadline: 2 commands were skipped; "), note
