"""The shortcuts of the format hints give what the slow way gives: a plain literal alternative is what
`_sre.parse` and `required_literals` make of it, and the bus id alternative of the query-gpu CSV hint
finds what the regex it replaced found."""

from __future__ import annotations

import random
import re
import warnings

from k3diag.parse.hints import _LITERAL, _Alternative, _sre, compiled_hint, required_literals, split_alternatives
from k3diag.parse.registry import FORMATS


def _parsed(source: str) -> _Alternative:
    """An alternative as `compiled_hint` builds it from the parse (its slow path)."""
    items = list(_sre.parse(source, re.I))
    literal = bool(items) and all(op is _LITERAL and av < 128 for op, av in items)
    clauses = sorted(set(required_literals(items)), key=lambda clause: (-min(map(len, clause)), len(clause)))
    return _Alternative(source, tuple(clauses), literal)


def test_every_hint_alternative_is_what_its_parse_gives() -> None:
    plain = 0
    for spec in FORMATS:
        alternatives = compiled_hint(spec.hint).alternatives
        assert [alternative.source for alternative in alternatives] == split_alternatives(spec.hint)
        for alternative in alternatives:
            assert alternative == _parsed(alternative.source), (spec.name, alternative.source)
            plain += alternative.literal
    assert plain > 50  # most alternatives are plain literals: the shortcut is taken


def test_a_literal_of_any_printable_ascii_is_what_its_parse_gives() -> None:
    rng = random.Random(13)
    printable = [chr(code) for code in range(32, 127)]
    for _ in range(3000):
        source = "".join(rng.choice(printable) for _ in range(rng.randint(1, 12)))
        for part in split_alternatives(source):
            with warnings.catch_warnings():
                # `[[` or `&&` in a set is a FutureWarning of `re` (a syntax it may give a meaning): not a hint
                warnings.simplefilter("error", FutureWarning)
                try:
                    expected = _parsed(part)
                except (re.error, FutureWarning):
                    continue  # not a regex: no hint is written so
            assert compiled_hint(part).alternatives[0] == expected, part


def test_the_csv_bus_id_alternative_matches_where_the_plain_regex_matches() -> None:
    spec = next(spec for spec in FORMATS if spec.name == "nvidia-smi-query-gpu-csv")
    bus_id = re.compile(split_alternatives(spec.hint)[-1], re.I)
    plain = re.compile(r"[0-9a-f]{8}:[0-9a-f]{2}:", re.I)
    rng = random.Random(7)
    alphabet = "0123456789abcdefABCDEFgG: \n,."
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert (bus_id.search(text) is None) == (plain.search(text) is None), text
    assert bus_id.search("0, NVIDIA H100, 00000000:1B:00.0, GPU-5f1e")
    assert not bus_id.search("0000:1b:00.0 3D controller: NVIDIA Corporation")
