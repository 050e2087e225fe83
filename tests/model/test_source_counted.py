"""References whose line number is counted on first use (`counted_ref`, what the bulk lspci parser
makes) are `SourceRef`s to everyone who uses one: same fields, equal and hashed alike, pickled and
copied as plain `SourceRef`s without the text they count in."""

from __future__ import annotations

import copy
import pickle
import random
from dataclasses import FrozenInstanceError, asdict, replace

import pytest

from k3diag.model.source import LineCounter, SourceRef, counted_ref


def lines_and_offsets(text: str, first_line: int) -> list[tuple[int, int]]:
    """(offset of each line's first character, its number), counted the slow way."""
    out, offset = [], 0
    for number, line in enumerate(text.split("\n"), start=first_line):
        out.append((offset, number))
        offset += len(line) + 1
    return out


def test_line_numbers_match_a_plain_count_in_any_order() -> None:
    rng = random.Random(7)
    # lines long and short, so offsets fall on both sides of the counter's 64 Ki-character marks
    text = "\n".join("x" * rng.choice((0, 1, 80, 5000, 70000)) for _ in range(400))
    for first_line in (1, 41):
        counter = LineCounter(text, first_line)
        expected = lines_and_offsets(text, first_line)
        for offset, number in rng.sample(expected, len(expected)):
            assert counter.line_at(offset) == number
        assert counter.line_at(len(text)) == expected[-1][1]


def test_a_counted_reference_is_the_plain_one_to_its_users() -> None:
    text = "00:01.0 PCI bridge: Intel\n\tLnkSta:\tSpeed 8GT/s, Width x16\n\tNUMA node: 1"
    ref = counted_ref("lspci.txt", LineCounter(text, 10), text.index("\tLnkSta"), "\tLnkSta:\tSpeed 8GT/s, Width x16")
    plain = SourceRef("lspci.txt", 11, "\tLnkSta:\tSpeed 8GT/s, Width x16")
    assert isinstance(ref, SourceRef)
    assert ref.line == 11 and ref.input == "lspci.txt" and ref.text == plain.text
    assert ref == plain and plain == ref and not (ref != plain)
    assert ref != SourceRef("lspci.txt", 12, plain.text) and SourceRef("other.txt", 11, plain.text) != ref
    assert hash(ref) == hash(plain) and {ref, plain} == {plain} and plain in [ref]
    assert repr(ref) == repr(plain)
    assert ref.to_json() == plain.to_json() == {"input": "lspci.txt", "line": 11, "text": plain.text}
    assert ref.cite() == plain.cite() == "lspci.txt:11: LnkSta:\tSpeed 8GT/s, Width x16"
    assert asdict(ref) == asdict(plain)
    assert replace(ref, line=3) == SourceRef("lspci.txt", 3, plain.text)
    with pytest.raises(FrozenInstanceError):
        ref.line = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ref.no_such_field  # noqa: B018


def test_pickled_or_copied_it_becomes_a_plain_reference_without_the_text() -> None:
    text = "a\n" * 100_000 + "the line"
    ref = counted_ref("big.txt", LineCounter(text, 1), len(text) - len("the line"), "the line")
    for other in (pickle.loads(pickle.dumps(ref)), copy.copy(ref), copy.deepcopy(ref)):
        assert type(other) is SourceRef
        assert other == ref and other == SourceRef("big.txt", 100_001, "the line")
    assert len(pickle.dumps(ref)) < 200  # the 200 KB text it counts in does not travel
    unread = counted_ref("big.txt", LineCounter(text, 1), 0, "a")
    assert pickle.loads(pickle.dumps(unread)) == SourceRef("big.txt", 1, "a")


def test_references_of_one_parse_share_their_input_and_counter_and_are_plain_to_their_users() -> None:
    """`counted_refs` (one class per parse, holding the input's name and the counter): each reference
    is what `counted_ref` makes, field for field, and as plain to its users."""
    from k3diag.model.source import counted_refs

    text = "00:01.0 PCI bridge: Intel\n\tLnkSta:\tSpeed 8GT/s, Width x16\n\tNUMA node: 1"
    counter = LineCounter(text, 10)
    make = counted_refs("lspci.txt", counter)
    line = "\tLnkSta:\tSpeed 8GT/s, Width x16"
    ref, again = make(text.index("\tLnkSta"), line), make(text.index("\tNUMA"), "\tNUMA node: 1")
    plain = SourceRef("lspci.txt", 11, line)
    assert isinstance(ref, SourceRef) and type(ref) is type(again)
    assert "input" not in ref.__dict__ and set(ref.__dict__) == {"text", "_at"}  # two entries a reference
    assert ref == plain and plain == ref and hash(ref) == hash(plain) and repr(ref) == repr(plain)
    assert (again.input, again.line, again.text) == ("lspci.txt", 12, "\tNUMA node: 1")
    assert ref.to_json() == plain.to_json() and ref.cite() == plain.cite() and asdict(ref) == asdict(plain)
    assert replace(ref, line=3) == SourceRef("lspci.txt", 3, line)
    with pytest.raises(FrozenInstanceError):
        ref.line = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ref.no_such_field  # noqa: B018
    unread = make(0, "00:01.0 PCI bridge: Intel")
    for other in (pickle.loads(pickle.dumps(unread)), copy.copy(unread), copy.deepcopy(unread)):
        assert type(other) is SourceRef and other == SourceRef("lspci.txt", 10, "00:01.0 PCI bridge: Intel")
    assert len(pickle.dumps(make(5, "x"))) < 200  # neither the counter nor its text travels
