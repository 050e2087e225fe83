"""Detection in one pass picks what the old detection picked: the same normalized text, the same
sections (text, first line, command, host) and the same format for each, and the same streaming
verdict, on every text fixture and on each pasted the ways people paste: CRLF, colours, prompts,
e-mail quoting, tabs turned to spaces, several outputs in one paste. The old code is frozen in
`detect_reference.py`."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from k3diag.evidence import Evidence
import detect_reference as reference
from k3diag.parse.detect import STREAM_SNIFF_BYTES, detect, split_sections, streaming_format
from k3diag.parse.hints import _RE_I_ASCII, compiled_hint, fold, split_alternatives
from k3diag.parse.registry import FORMATS, available_formats
from k3diag.parse.text import C0_BYTES, CONTROL_RE, clean_text, looks_binary, normalize

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _text_fixtures() -> list[Path]:
    found = []
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".keep", ".gz", ".xz", ".zst", ".tar", ".zip"):
            continue
        data = path.read_bytes()
        if data.strip() and not looks_binary(data):
            found.append(path)
    return found


TEXTS = _text_fixtures()


def _colour(text: str) -> str:
    """Every third word in green, a title sequence on the first line, a reset at each line's end."""
    lines = []
    for number, line in enumerate(text.split("\n")):
        words = line.split(" ")
        words = [f"\x1b[1;32m{word}\x1b[0m" if i % 3 == 1 and word else word for i, word in enumerate(words)]
        prefix = "\x1b]0;user@node: ~\x07" if number == 0 else ""
        lines.append(prefix + " ".join(words) + ("\x1b[K" if line else ""))
    return "\n".join(lines)


VARIANTS = {
    "as saved": lambda text: text,
    "CRLF": lambda text: text.replace("\n", "\r\n"),
    "colours": _colour,
    "prompts": lambda text: "user@gpu-node-3:~$ cat out.txt\n" + text.rstrip("\n") + "\nuser@gpu-node-3:~$ \n",
    "bare prompt": lambda text: "$ sudo lspci -vv\n\n" + text + "\n# \n",
    "e-mail quoting": lambda text: "".join("> " + line + "\n" for line in text.split("\n")),
    "tabs to spaces": lambda text: text.expandtabs(4),
    "NULs and C1": lambda text: text.replace("\n", "\x00\n", 3).replace(" ", "\x85 ", 2),
}


def _picture(sections, detector) -> list[tuple]:
    return [(s.text, s.first_line, s.command, s.host, getattr(detector(s.text, s.command), "name", None))
            for s in sections]


def _assert_same(raw: str, label: str) -> None:
    old_text, old_dropped = reference.clean_text(raw)
    new_text, new_dropped = clean_text(raw)
    assert (new_text, new_dropped) == (old_text, old_dropped), f"{label}: normalized text differs"
    assert normalize(new_text) == new_text, f"{label}: normalizing twice changes the text"
    old = _picture(reference.split_sections(old_text), reference.detect)
    new = _picture(split_sections(new_text, normalized=True), detect)
    assert new == old, f"{label}: sections or formats differ"
    head = old_text[:STREAM_SNIFF_BYTES]
    assert getattr(streaming_format(head), "name", None) == getattr(reference.streaming_format(head), "name", None), \
        f"{label}: streaming verdict differs"
    assert [spec.name for spec in available_formats(head)] == [spec.name for spec in reference.available_formats(head)], \
        f"{label}: candidate formats differ"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_fixture_is_cut_and_named_as_before(variant: str) -> None:
    for path in TEXTS:
        raw = path.read_bytes().decode("utf-8", errors="replace")
        _assert_same(VARIANTS[variant](raw), f"{path.relative_to(FIXTURES)} ({variant})")


def test_several_outputs_in_one_paste_are_cut_as_before() -> None:
    rng = random.Random(13)
    small = [path for path in TEXTS if path.stat().st_size < 64 * 1024]
    for round_ in range(150):
        picked = rng.sample(small, 3)
        parts = [path.read_bytes().decode("utf-8", errors="replace") for path in picked]
        glue = rng.choice(["\n", "\n\n", "\nuser@node7:~$ nvidia-smi topo -m\n", "\n$ lspci -vv\n", "\n[root@n1 ~]# \n",
                           "\nPS C:\\Users\\me> nvidia-smi.exe topo -m\n", "\nPS C:\\>\n", "\n(venv) me@h:~/x# ./all_reduce_perf -g 8\n\n",
                           "\n> nvidia-smi -q\n"])
        raw = glue.join(parts)
        if round_ % 2:
            raw = VARIANTS[rng.choice(list(VARIANTS))](raw)
        _assert_same(raw, " + ".join(str(path.relative_to(FIXTURES)) for path in picked))


def test_reading_then_normalizing_once_gives_the_old_text() -> None:
    """`join.build` normalizes what `Evidence.read_text` returns with `controls_dropped`; the old path
    normalized it in full."""
    for path in TEXTS[::3]:
        raw = path.read_bytes()
        for data in (raw, raw.replace(b"\n", b"\x00\r\n", 5) + "\u0085 caf\u00e9\x1b[0m\n".encode()):
            text, _ = Evidence(name=path.name, data=data).read_text()
            assert clean_text(text, controls_dropped=True)[0] == reference.clean_text(text)[0], path.name


def test_the_control_characters_as_bytes_are_the_control_class() -> None:
    ascii_controls = re.findall(CONTROL_RE.pattern, "".join(map(chr, range(128))))
    assert sorted(ascii_controls) == sorted(map(chr, C0_BYTES))


def test_only_four_characters_outside_ascii_fold_onto_ascii_ones() -> None:
    """`hints.fold` maps these before lower-casing; were there another, a hint's literal could miss a
    text its regex matches."""
    every = "".join(chr(code) for code in range(0x80, 0x110000) if not 0xD800 <= code < 0xE000)
    assert {ord(char) for char in re.findall("[\x00-\x7f]", every, re.I)} == set(_RE_I_ASCII)


def test_hint_literals_are_in_every_text_the_hint_regex_matches() -> None:
    """Each alternative's literals are necessary: wherever the alternative's regex matches, the folded
    text holds one of each clause."""
    for spec in FORMATS:
        assert "|".join(split_alternatives(spec.hint)) == spec.hint
        for alternative in compiled_hint(spec.hint).alternatives:
            for path in TEXTS:
                text = path.read_bytes().decode("utf-8", errors="replace")[:STREAM_SNIFF_BYTES]
                match = alternative.regex.search(text)
                if match is None:
                    continue
                folded = fold(match.group(0))
                for clause in alternative.clauses:
                    assert any(needle in folded for needle in clause), (spec.name, alternative.source, clause)


def test_a_hint_is_found_in_unicode_text_its_regex_matches() -> None:
    spec = next(spec for spec in FORMATS if spec.name == "lspci-vv")
    assert spec.may_match("\u2003\u2003LN\u212aSTA: Speed 16GT/s")  # KELVIN SIGN for K: re.I says yes
    assert not spec.may_match("nothing of the kind \u00e9")


@pytest.mark.parametrize("variant", ["as saved", "prompts", "e-mail quoting", "tabs to spaces"])
def test_no_hint_hides_a_text_its_sniffer_would_score(variant: str) -> None:
    """A hint only spares work when it is a superset of what its sniffer accepts: a sniffer scoring a
    text its hint rejects (any score: a command on the prompt adds 0.3) could have won detection."""
    from k3diag.parse.registry import parser_module

    specs = [(spec, parser_module(spec)) for spec in FORMATS]
    for path in TEXTS:
        text = normalize(VARIANTS[variant](path.read_bytes().decode("utf-8", errors="replace")))[:64 * 1024]
        folded = fold(text)
        for spec, module in specs:
            if module is None or spec.may_match(text, folded):
                continue
            try:
                score = float(module.sniff(text))
            except Exception:
                continue
            assert score <= 0, f"{path.relative_to(FIXTURES)} ({variant}): {spec.name} scores {score} but its hint says no"
