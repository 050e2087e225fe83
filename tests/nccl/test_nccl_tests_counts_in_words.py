"""What the nccl-tests parser says about a cut or damaged table counts in words: 'the table stops after 1 size',
'5 sizes'; '1 table line could not be read ...: line 3', '2 table lines ...; first at lines 3, 5'."""

from __future__ import annotations

from nccl_fixtures import fixture_path

from k3diag.parse import nccl_tests
from k3diag.parse.text import Section

AFTER_ROWS = "nccl-tests-rows-then-failure-several-hosts-322.txt"


def _warnings(text: str) -> list[str]:
    return nccl_tests.parse(Section(text=text, first_line=1), "t.txt").warnings


def _lines() -> list[str]:
    return fixture_path("bench", AFTER_ROWS).read_text().splitlines(keepends=True)


def test_the_table_stops_after_one_size_and_after_several() -> None:
    lines = _lines()
    rows = [i for i, line in enumerate(lines) if line.startswith(("  1073741824", "  2147483648", "  4294967296",
                                                                   "  8589934592", " 17179869184"))]
    one = "".join(line for i, line in enumerate(lines) if i not in rows[1:])
    assert any("; the table stops after 1 size, the last 1073741824 bytes" in w for w in _warnings(one)), _warnings(one)
    assert any("; the table stops after 5 sizes, the last 17179869184 bytes" in w for w in _warnings("".join(lines)))


def test_unreadable_table_lines_one_and_several() -> None:
    lines = _lines()
    rows = [i for i, line in enumerate(lines) if line.startswith(("  2147483648", "  8589934592"))]
    cut = {index: lines[index][:62] + "\n" for index in rows}
    one = "".join(cut.get(i, line) if i == rows[0] else line for i, line in enumerate(lines))
    said = [w for w in _warnings(one) if "could not be read" in w]
    assert said == [f"1 table line could not be read (cut, wrapped or misaligned): line {rows[0] + 1}"], said
    two = "".join(cut.get(i, line) for i, line in enumerate(lines))
    said = [w for w in _warnings(two) if "could not be read" in w]
    assert said == [f"2 table lines could not be read (cut, wrapped or misaligned); first at lines {rows[0] + 1}, "
                    f"{rows[1] + 1}"], said
