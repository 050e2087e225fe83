"""Decoding saved outputs (UTF-16 from PowerShell, byte order marks) and recognizing shell prompts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.parse.detect import split_sections
from k3diag.parse.text import decode_text, detect_encoding, is_shell_prompt, looks_binary, normalize, prompt_command

HEADER = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"


@pytest.mark.parametrize(
    "data, codec",
    [
        (HEADER.encode("utf-8"), "utf-8"),
        (b"\xef\xbb\xbf" + HEADER.encode("utf-8"), "utf-8-sig"),
        (b"\xff\xfe" + HEADER.encode("utf-16-le"), "utf-16"),
        (b"\xfe\xff" + HEADER.encode("utf-16-be"), "utf-16"),
        (HEADER.encode("utf-16-le"), "utf-16-le"),
        (HEADER.encode("utf-16-be"), "utf-16-be"),
        (HEADER.encode("utf-32"), "utf-32"),
        (bytes(4096), "utf-8"),  # all NUL: binary, not UTF-16
        (b"", "utf-8"),
    ],
)
def test_detect_encoding(data: bytes, codec: str) -> None:
    assert detect_encoding(data) == codec
    if data and any(data):
        assert decode_text(data) == HEADER


def test_utf16_of_non_latin_text_is_still_recognized() -> None:
    # A Chinese Windows: some NULs are missing from the odd bytes, most are there.
    text = "GPU0 型号 NVIDIA GeForce RTX 4090\n" * 20
    assert detect_encoding(text.encode("utf-16-le")) == "utf-16-le"


def test_normalize_drops_byte_order_marks_anywhere() -> None:
    # `cat a.txt b.txt > all.txt` of two files saved by Notepad puts a BOM mid-file.
    assert normalize("\ufeffGPU0\tX\n\ufeffGPU1\tX\r\n") == "GPU0\tX\nGPU1\tX\n"


@pytest.mark.parametrize(
    "line, command, prompt",
    [
        ("PS C:\\> nvidia-smi.exe topo -m", "nvidia-smi.exe topo -m", True),
        ("PS C:\\Users\\admin> nvidia-smi topo -p2p r", "nvidia-smi topo -p2p r", True),
        ("PS C:\\> ", None, True),
        ("PS C:\\>", None, True),
        ("user@gpu-node:~$ cd ~", None, True),
        ("[root@gpu-node ~]#", None, True),
        ("$ nvidia-smi topo -m", "nvidia-smi topo -m", False),  # lone `$`: only with a known tool
        ("#", None, False),  # nccl-tests prints such lines
        ("# nThread 1 nGpus 8 minBytes 8", None, False),
        ("GPU0\t X \tSYS", None, False),
    ],
)
def test_prompts(line: str, command: str | None, prompt: bool) -> None:
    assert prompt_command(line) == command
    assert is_shell_prompt(line) is prompt


def test_bare_prompt_ends_the_output_and_keeps_line_numbers() -> None:
    text = (
        "PS C:\\> nvidia-smi.exe topo -m\n"
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tPHB\t0-63\t0\n"
        "GPU1\tPHB\t X \t0-63\t0\n"
        "PS C:\\> \n"
    )
    sections = split_sections(text)
    assert len(sections) == 1
    assert sections[0].command == "nvidia-smi.exe topo -m"
    assert sections[0].first_line == 1
    assert "PS C:\\>" not in sections[0].text.split("\n", 1)[1]


def test_unknown_command_prompt_is_blanked_in_place() -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \nuser@host:~$ cd ~\n"
    sections = split_sections(text)
    joined = "\n".join(section.text for section in sections).split("\n")
    assert "user@host:~$ cd ~" not in joined
    # Whatever was cut or glued back, the lines still sit where they were in the file.
    for section in sections:
        for offset, line in enumerate(section.text.split("\n")):
            if line:
                assert text.split("\n")[section.first_line - 1 + offset] == line


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=4096))
def test_decoding_never_raises_on_random_bytes(data: bytes) -> None:
    codec = detect_encoding(data)
    text = decode_text(data, codec)
    assert isinstance(text, str)
    looks_binary(text.encode("utf-8"))


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=4, max_size=400))
def test_utf16_ascii_text_round_trips(text: str) -> None:
    for encoded in (text.encode("utf-16-le"), b"\xff\xfe" + text.encode("utf-16-le"), text.encode("utf-16-be")):
        assert decode_text(encoded) == text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["PS C:\\> ", "PS C:\\> nvidia-smi.exe topo -m", "u@h:~$ ls", "GPU0\t X \tPHB",
                                  "\tGPU0\tGPU1", "", "#", "Legend:"]), max_size=30))
def test_split_sections_with_prompts_never_raises(lines: list[str]) -> None:
    for section in split_sections("\n".join(lines)):
        assert section.first_line >= 1


def test_control_characters_are_found_in_every_piece_of_a_large_ascii_text() -> None:
    """`clean_text` looks for C0 controls in a large ASCII text a piece at a time (a search for each control character): one
    at either edge of a piece, or in the short last piece, is dropped as the regex would drop it."""
    from k3diag.evidence import _CHECK_BYTES
    from k3diag.parse.text import CONTROL_RE, clean_text

    piece = _CHECK_BYTES  # the pieces `has_c0_controls` checks
    base = ("\t\tLnkSta:\tSpeed 16GT/s, Width x16\n" * 80_000)[: 2 * piece + 1000]
    for position in (0, piece - 1, piece, 2 * piece - 1, 2 * piece, len(base) - 1):
        for control in ("\x00", "\x07", "\x1f", "\x7f"):
            text = base[:position] + control + base[position + 1:]
            cleaned, dropped = clean_text(text)
            assert (cleaned, dropped) == CONTROL_RE.subn("", text), (position, control)
    assert clean_text(base) == (base, 0)
