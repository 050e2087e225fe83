"""A folder that may be listed but not entered (mode rw- without x, as a careless `chmod -R a-x` leaves it):
every command that walks folders names the file it could not read and goes on, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "nvidia" / "topo-m-2gpu-nv2-numa-na.txt"


def _without_override() -> list[str]:
    """The command prefix that takes root's right to enter any folder away (root keeps its files: the
    interpreter may live under a 0700 /root); nothing for another user."""
    if not hasattr(os, "geteuid"):
        pytest.skip("POSIX permissions only")
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without util-linux's setpriv to drop CAP_DAC_OVERRIDE")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.fixture()
def tree():
    top = Path(tempfile.mkdtemp(prefix="k3diag-perm-"))  # not under pytest's 0700 base, which nobody can enter
    try:
        top.chmod(0o755)
        shutil.copy(TOPO, top / "topo.txt")
        (top / "topo.txt").chmod(0o644)
        locked = top / "locked"
        locked.mkdir()
        (locked / "report.json").write_text("{}")
        locked.chmod(0o666)  # listed, not entered
        yield top, locked
    finally:
        locked.chmod(0o755)
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("command", [["analyze"], ["fleet"], ["serving"], ["topo", "--from"]])
def test_a_folder_that_cannot_be_entered_is_named_not_a_traceback(tree, command: list[str]) -> None:
    top, locked = tree
    prefix = _without_override()
    probe = subprocess.run([*prefix, sys.executable, "-c", f"import os; os.lstat({str(locked / 'report.json')!r})"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        pytest.skip("this user enters the folder anyway")
    target = locked if command[0] in ("fleet", "serving") else top
    result = subprocess.run([*prefix, sys.executable, "-m", "k3diag", *command, str(target)], capture_output=True,
                            text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text
    assert f"{locked / 'report.json'}" in text and "Permission denied" in text, text
    assert "check the permissions of its folder" in text, text
    if command[0] == "analyze":
        assert "Verdict [OK]: Good for tensor parallelism up to TP2" in text  # topo.txt is still read and judged


@pytest.mark.parametrize("command, code", [
    (["analyze", "{f}"], 64), (["audit", "{f}", "--model", "k3"], 64), (["serving", "{f}"], 64),
    (["advise", "--model", "k3", "--from", "{f}"], 64), (["topo", "--from", "{f}"], 64),
    (["check", "--from", "{f}"], 64), (["check", "--from", "{f}", "--format", "nagios"], 3),
    (["fleet", "{f}"], 3),
])
def test_an_unreadable_file_is_one_sentence_naming_it(tmp_path: Path, command: list[str], code: int) -> None:
    # click's `Usage: ... Error: Invalid value for 'paths': Path ... is not readable.` (four lines), a
    # traceback from serving, "InputPathError" in check's status line: now one k3diag sentence each
    prefix = _without_override()
    top = Path(tempfile.mkdtemp(prefix="k3diag-perm-"))
    try:
        top.chmod(0o755)
        locked = top / "topo.txt"
        shutil.copy(TOPO, locked)
        locked.chmod(0)
        probe = subprocess.run([*prefix, sys.executable, "-c", f"open({str(locked)!r}).close()"], capture_output=True)
        if probe.returncode == 0:
            pytest.skip("this user reads the file anyway")
        args = [part.replace("{f}", str(locked)) for part in command]
        result = subprocess.run([*prefix, sys.executable, "-m", "k3diag", *args], capture_output=True, text=True,
                                env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
        text = result.stdout + result.stderr
        assert result.returncode == code, text
        assert str(locked) in text and "Traceback" not in text and "Usage:" not in text, text
        assert "Error" not in text, text  # neither click's `Error:` nor an exception's name
    finally:
        shutil.rmtree(top, ignore_errors=True)
