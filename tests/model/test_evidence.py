"""Evidence streaming stays bounded on hostile files."""

from __future__ import annotations

from pathlib import Path

from k3diag.evidence import MAX_LINE_CHARS, Evidence


def test_iter_lines_caps_overlong_lines(tmp_path: Path) -> None:
    path = tmp_path / "junk.log"
    path.write_bytes(b"first\r\n" + b"x" * (MAX_LINE_CHARS * 5 + 3) + b"\nlast line\n")
    lines = list(Evidence(name="junk.log", path=path).iter_lines())
    assert lines[0] == "first"
    assert len(lines[1]) == MAX_LINE_CHARS
    assert lines[2] == "last line"
    assert len(lines) == 3


def test_iter_lines_from_memory_and_file_agree(tmp_path: Path) -> None:
    data = b"a\nb\r\nc"
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    assert list(Evidence(name="m", data=data).iter_lines()) == list(Evidence(name="f", path=path).iter_lines()) == ["a", "b", "c"]
