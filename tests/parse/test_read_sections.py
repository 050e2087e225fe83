"""`join.build.read_sections` (the text read without its final newline, so the last section is not a
copy) cuts a file into the same sections as normalizing the whole text and splitting it."""

from __future__ import annotations

from pathlib import Path

from k3diag.evidence import Evidence
from k3diag.join.build import read_sections
from k3diag.parse.detect import split_sections
from k3diag.parse.text import clean_text

REPO = Path(__file__).resolve().parents[2]
LSPCI = (REPO / "fixtures" / "pcie" / "lspci-vvv-dell-root-ports-acs-gpud.txt").read_bytes().rstrip(b"\n")
TOPO = (REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt").read_bytes().rstrip(b"\n")

ENDINGS = [b"", b"\n", b"\n\n", b"\n\n\n", b"\r\n", b"\r\n\r\n", b"\r", b"\n\r", b"\r\r\n", b" \n", b"\t\n\n",
           b"\n\x00", b"\x00\n", b"\n\x1b[0m", b"\x1b[0m\n", b"\x1b[\n", b"\x1b]0;title\n", b"\n\xc2\x85",
           b"\xc2\x85\n", b"\n\xef\xbb\xbf", b"\n\xff", b"\xff\n", b"\n$ ", b"\nuser@node1:~$ \n"]


# what may stand inside a text: control bytes (dropped and noted while reading), ANSI colours with a
# control byte in a title, a C1 control, CRs
INSIDE = [b"", b"\x00\x00", b"\x07", b"\x7f", b"\x1b[1;31m", b"\x1b]0;ti\x01tle\x07", b"\xc2\x85", b"\r\n",
          b"\xe2\x80\x94"]


def reference(data: bytes, name: str = "in.txt") -> tuple[list, list[str]]:
    """The sections and the reading notes as before: the whole text read, normalized, then split."""
    evidence = Evidence(name=name, data=data)
    text, _ = evidence.read_text()
    text, _ = clean_text(text, controls_dropped=True)
    return [(s.text, s.first_line, s.command, s.host) for s in split_sections(text, normalized=True)], \
        evidence.take_notes()


def read_now(data: bytes) -> tuple[list, list[str]]:
    evidence = Evidence(name="in.txt", data=data)
    _, _, sections = read_sections(evidence)
    return [(s.text, s.first_line, s.command, s.host) for s in sections], evidence.take_notes()


def test_every_ending_and_content_gives_the_same_sections_and_notes() -> None:
    checked = 0
    for body in (LSPCI, TOPO, LSPCI + b"\n\n$ nvidia-smi topo -m\n" + TOPO, b"", b"x"):
        for inside in INSIDE:
            middle = len(body) // 2
            text = body[:middle] + inside + body[middle:]
            for ending in ENDINGS:
                data = text + ending
                assert read_now(data) == reference(data), (body[-20:], inside, ending)
                checked += 1
    assert checked == 5 * len(INSIDE) * len(ENDINGS)


def test_a_control_byte_is_noted_once_whichever_way_it_is_found(tmp_path: Path) -> None:
    path = tmp_path / "lspci.txt"
    path.write_bytes(LSPCI[:500] + b"\x00" + LSPCI[500:] + b"\n")
    evidence = Evidence(name="lspci.txt", path=path)
    text, _, sections = read_sections(evidence)
    assert "\x00" not in text and len(sections) == 1
    assert evidence.take_notes() == reference(path.read_bytes(), "lspci.txt")[1] != []


def test_one_output_is_the_text_as_read_not_a_copy() -> None:
    text, _, sections = read_sections(Evidence(name="lspci.txt", data=LSPCI + b"\n"))
    assert len(sections) == 1 and sections[0].text is text and not text.endswith("\n")
