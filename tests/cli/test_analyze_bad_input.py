"""Bad input to `k3diag analyze`: one sentence each, the rest of the report still comes out."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()


def _report(args: list[str]) -> tuple[int, dict]:
    result = runner.invoke(app, ["analyze", *args, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, json.loads(result.stdout)


def test_missing_file_is_a_usage_error_naming_the_full_path(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "nope.txt"), "--json"])
    assert result.exit_code == 64
    assert result.stdout == ""
    assert f"k3diag analyze: {tmp_path / 'nope.txt'} does not exist; check the path" in result.stderr


def test_binary_junk_and_empty_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 64)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, report = _report([str(junk), str(empty)])
    assert code == 3
    warnings = {i["path"]: i["warnings"][0] for i in report["inputs"]}
    assert "looks like binary data" in warnings[str(junk)]
    assert warnings[str(empty)] == "the file is empty"


def test_unknown_text_names_what_it_looked_like(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("Dear vendor,\nplease send the nccl-tests output.\n")
    code, report = _report([str(notes)])
    assert code == 3
    warning = report["inputs"][0]["warnings"][0]
    assert "format not recognized" in warning and "Dear vendor," in warning


def test_unreadable_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("GPU0 X\n")
    secret.chmod(0)
    try:
        code, report = _report([str(secret)])
    finally:
        secret.chmod(0o600)
    if os.geteuid() == 0:
        # root reads anything; the file is then just not a known format
        assert report["inputs"][0]["format"] == "unknown"
    else:
        assert "permission denied" in report["inputs"][0]["warnings"][0]


def test_terminal_output_for_nothing_analyzable(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    result = runner.invoke(app, ["analyze", str(notes)])
    assert result.exit_code == 3
    assert "format not recognized" in result.output
    assert "Nothing could be analyzed" in result.output
