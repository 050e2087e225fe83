"""Evidence streaming stays bounded on hostile files."""

from __future__ import annotations

from pathlib import Path

from k3diag.evidence import _CHECK_BYTES, MAX_LINE_CHARS, MAX_TEXT_BYTES, MAX_WHOLE_LINE_CHARS, Evidence, _clean_utf8


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


def _pieces_text(evidence: Evidence) -> tuple[str, bool, list[str]]:
    """What `read_text` gives through the pieces path alone (the reference its one-step path must equal)."""
    pieces, truncated = [], False
    for piece, cut in evidence._pieces(MAX_TEXT_BYTES, MAX_WHOLE_LINE_CHARS):
        pieces.append(piece)
        truncated = truncated or cut
    return "".join(pieces), truncated, evidence.take_notes()


def test_reading_in_one_step_gives_what_the_pieces_give(tmp_path: Path) -> None:
    """`read_text` decodes a clean UTF-8 file in one step; wherever a control byte, an overlong line, a
    byte order mark, bad UTF-8 or a multi-byte character across a MiB boundary sits, it must give
    the text and the notes the pieces path gives."""
    block = "\tLnkSta:\tSpeed 16GT/s, Width x16\n" * 40_000  # about 1.3 MB: pieces cut inside it
    mib = 1024 * 1024
    cases = {
        "clean": block.encode(),
        "bom": b"\xef\xbb\xbf" + block.encode(),
        "euro across a MiB boundary": (block[: mib - 1] + "\u20ac" + block[mib:]).encode(),
        "bad utf-8": block.encode()[:mib] + b"\xff\xfe" + block.encode()[mib:],
        "NUL at the start": b"\x00" + block.encode(),
        "BEL at the last byte of a MiB": block.encode()[: mib - 1] + b"\x07" + block.encode()[mib:],
        "VT at the first byte of a checked piece": block.encode()[:_CHECK_BYTES] + b"\x0b"
        + block.encode()[_CHECK_BYTES + 1:],
        "DEL at the end": block.encode() + b"\x7f",
        "line of exactly the longest": block.encode() + b"y" * MAX_WHOLE_LINE_CHARS + b"\n" + block.encode(),
        "line one over the longest": block.encode() + b"y" * (MAX_WHOLE_LINE_CHARS + 1) + b"\nend\n",
        "long last line without newline": block.encode() + b"z" * (MAX_WHOLE_LINE_CHARS + 7),
        "empty": b"",
    }
    for label, data in cases.items():
        path = tmp_path / "in.txt"
        path.write_bytes(data)
        for make in (lambda: Evidence(name="in.txt", path=path), lambda: Evidence(name="in.txt", data=data)):
            want = _pieces_text(make())
            evidence = make()
            text, truncated = evidence.read_text()
            assert (text, truncated, evidence.take_notes()) == want, label
    long_line = Evidence(name="in.txt", data=cases["line one over the longest"])
    text, _ = long_line.read_text()
    assert max(map(len, text.split("\n"))) == MAX_WHOLE_LINE_CHARS
    assert any("longer than 1 MiB" in note for note in long_line.take_notes())
    # the one-step path is the one that ran on the clean cases, and stood aside on the others
    assert _clean_utf8(cases["clean"], "utf-8") == block
    for label in ("NUL at the start", "BEL at the last byte of a MiB", "VT at the first byte of a checked piece",
                  "DEL at the end", "line one over the longest",
                  "long last line without newline"):
        assert _clean_utf8(cases[label], "utf-8") is None, label


def test_a_file_over_the_limit_is_cut_as_before(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"line\n" * 1000)
    text, truncated = Evidence(name="big.txt", path=path).read_text(limit=2000)
    assert truncated and text == "line\n" * 400


def test_the_control_bytes_are_what_reading_drops() -> None:
    """`C0_BYTES` (the one-step read's check, and `parse.text`'s for large ASCII text) and the class the
    pieces path drops are the same characters; `has_c0_controls` finds each in bytes and in text, at
    either edge of a checked piece."""
    import re

    from k3diag.evidence import _CONTROL_RE, C0_BYTES, has_c0_controls

    assert set(re.findall(_CONTROL_RE.pattern, "".join(map(chr, range(256))))) == set(map(chr, C0_BYTES))
    base = "a" * (2 * _CHECK_BYTES + 10)
    assert not has_c0_controls(base) and not has_c0_controls(base.encode()) and not has_c0_controls(b"")
    for code in range(128):
        for position in (0, _CHECK_BYTES - 1, _CHECK_BYTES, len(base) - 1):
            text = base[:position] + chr(code) + base[position + 1:]
            want = code in C0_BYTES
            assert has_c0_controls(text) is want and has_c0_controls(text.encode()) is want, (code, position)


def test_a_file_over_the_limit_is_read_once(tmp_path: Path, monkeypatch) -> None:
    """The one-step read stands aside for a file its size says is over the limit, before reading it: the
    pieces path alone reads (and cuts) it."""
    path = tmp_path / "big.txt"
    path.write_bytes(b"line\n" * 1000)
    evidence = Evidence(name="big.txt", path=path)
    opened = evidence._open
    read: list[int] = []

    class Counting:
        def __init__(self, handle) -> None:
            self.handle = handle

        def read(self, size: int = -1) -> bytes:
            chunk = self.handle.read(size)
            read.append(len(chunk))
            return chunk

        def __getattr__(self, name: str):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.handle.close()

    assert evidence.encoding == "utf-8"  # its sniff of the head is not what is counted
    monkeypatch.setattr(evidence, "_open", lambda: Counting(opened()))
    text, truncated = evidence.read_text(limit=2000)
    assert truncated and text == "line\n" * 400
    assert sum(read) <= 2001
