"""What the input reader says about what it left out counts in words, with the verb agreeing."""

from __future__ import annotations

from pathlib import Path

from k3diag.inputs import MAX_FOLDER_DEPTH, _walk_folder, pick_machine
from k3diag.model.machine import Machine, MachineSet


def _warnings(folder: Path) -> list[str]:
    return [w for record in _walk_folder(folder)[1] for w in record.warnings]


def test_hidden_files_one_and_several(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / ".bash_history").write_text("x")
    (tmp_path / "one" / "topo.txt").write_text("x")
    assert (f"1 hidden file or folder in {tmp_path / 'one'} (names starting with '.') was not read; give it as a "
            "path to read them") in _warnings(tmp_path / "one")
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / ".a").write_text("x")
    (tmp_path / "two" / ".b").mkdir()
    assert (f"2 hidden files or folders in {tmp_path / 'two'} (names starting with '.') were not read; give them "
            "as paths to read them") in _warnings(tmp_path / "two")


def test_folders_too_deep_several(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(MAX_FOLDER_DEPTH)])
    (deep / "x").mkdir(parents=True)
    (deep / "y").mkdir()
    said = [w for w in _warnings(tmp_path) if "nest deeper" in w]
    assert said and said[0].startswith(f"2 folders in {tmp_path} nest deeper than {MAX_FOLDER_DEPTH} levels and were "
                                       "not read: "), said
    assert said[0].endswith("; give them as paths of their own")


def test_the_machines_left_out_one_and_several() -> None:
    for count, said in ((2, "the 1 other is left out"), (3, "the 2 others are left out")):
        machines = MachineSet(machines=[Machine() for _ in range(count)])
        machine, _, _ = pick_machine(machines)
        [note] = [n.message for n in machine.notes if n.subject == "inputs"]
        assert f"these inputs describe {count} machines; only " in note and said in note, note
