"""Format hints (`FormatSpec.hint`) tried through literals before any regex runs.

A hint is a case-insensitive regex every output of a format contains somewhere. Run as one
regex over a 256 KiB head, a hint costs milliseconds, and thirty-six of them most of the time
detection takes. Each top-level alternative of a hint is split off and reduced to the literals
any match of it must contain (`required_literals`: `LnkCap` -> `lnkcap`, `\\[\\s*\\d+\\.\\d+\\]` ->
`[`, `\\s(?:int8|half)\\s` -> `int8` or `half`); they are looked for with `str.find` (C speed) in
the text folded to lower case once (`fold`). An alternative whose literals are absent cannot
match; one that is a bare literal matches exactly when its literal occurs (ASCII text); only the
others run their regex, and only where their literals occur. The answer is always the one the
whole regex would give (`tests/parse/test_detect_equivalence.py` compares them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

try:  # Python 3.11+
    from re import _parser as _sre  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre  # type: ignore[no-redef]

# The only characters outside ASCII that `re.IGNORECASE` equates with ASCII ones (found by trying
# every code point; a test keeps this table honest): mapped before lower-casing, so a text that
# matches a hint case-insensitively always holds the hint's lower-case literals.
_RE_I_ASCII = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}

_GLOBAL_FLAGS_RE = re.compile(r"\(\?[aiLmsux]+\)")
_LITERAL = _sre.LITERAL
_SUBPATTERN = _sre.SUBPATTERN
_BRANCH = _sre.BRANCH
_REPEATS = tuple(getattr(_sre, name) for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre, name))
_ATOMIC = getattr(_sre, "ATOMIC_GROUP", None)


def fold(text: str) -> str:
    """`text` lower-cased the way the hints' literals are (see `_RE_I_ASCII`)."""
    if text.isascii():
        return text.lower()
    return text.translate(_RE_I_ASCII).lower()


@dataclass(frozen=True)
class _Alternative:
    """One top-level alternative of a hint, with the literals any match of it contains."""

    source: str  # the alternative's own regex text
    # what every match contains (see `required_literals`), the most telling clause first
    clauses: tuple[tuple[str, ...], ...]
    literal: bool  # the alternative is one plain ASCII literal (its one clause)

    @property
    def regex(self) -> "re.Pattern[str]":
        return _compiled(self.source)


@dataclass(frozen=True)
class Hint:
    """A format's hint, split into its alternatives (`compiled_hint`)."""

    alternatives: tuple[_Alternative, ...]

    def search(self, text: str, folded: str) -> bool:
        """Whether the hint's regex would find a match in `text`; `folded` is `fold(text)`."""
        exact = text.isascii()
        pending: list[_Alternative] = []
        for alternative in self.alternatives:
            if not all(any(needle in folded for needle in clause) for clause in alternative.clauses):
                continue
            if alternative.literal and exact:
                return True
            pending.append(alternative)
        # literal checks first, regexes only for what they could not settle
        return any(alternative.regex.search(text) is not None for alternative in pending)


@cache
def _compiled(source: str) -> "re.Pattern[str]":
    return re.compile(source, re.I)


# Characters that can make a regex more than its plain text; an alternative without any of them is one
# literal, read as it stands (see `compiled_hint`).
_REGEX_SYNTAX = frozenset("\\.^$*+?{}[]()|#")


@cache
def compiled_hint(pattern: str) -> Hint:
    alternatives = []
    for source in split_alternatives(pattern):
        if source.isascii() and _REGEX_SYNTAX.isdisjoint(source) and source:
            # A plain ASCII literal (most alternatives: `LnkCap`, `NVSMI LOG`): what `_sre.parse` and
            # `required_literals` make of it, without parsing it (parsing the 37 hints cost ~4 ms of every
            # run; a test holds this to the parse).
            alternatives.append(_Alternative(source, ((source.lower(),),), True))
            continue
        items = list(_sre.parse(source, re.I))
        literal = bool(items) and all(op is _LITERAL and av < 128 for op, av in items)
        clauses = sorted(set(required_literals(items)), key=lambda clause: (-min(map(len, clause)), len(clause)))
        alternatives.append(_Alternative(source, tuple(clauses), literal))
    return Hint(tuple(alternatives))


def split_alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of `pattern` (`a|(?:b|c)|[|]` -> `a`, `(?:b|c)`, `[|]`)."""
    if _GLOBAL_FLAGS_RE.match(pattern):
        return [pattern]  # `(?m)a|b`: the flags belong to every alternative
    parts: list[str] = []
    depth, start, index, in_class = 0, 0, 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            # `[]...]` and `[^]...]`: a `]` first in the class is one of its characters
            if pattern[index + 1 : index + 2] == "^":
                index += 1
            if pattern[index + 1 : index + 2] == "]":
                index += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:index])
            start = index + 1
        index += 1
    parts.append(pattern[start:])
    return parts


def required_literals(items) -> tuple[tuple[str, ...], ...]:
    """What every match of the parsed regex `items` contains, as clauses: each clause is a tuple of
    lower-case ASCII strings one of which a match holds; a match holds one of every clause
    (`CA\\s+'` -> `("ca",), ("'",)`). Empty when nothing is known to be required."""
    clauses: list[tuple[str, ...]] = []
    run: list[str] = []
    for op, av in items:
        if op is _LITERAL and av < 128:
            run.append(chr(av).lower())
            continue
        if run:
            clauses.append(("".join(run),))
            run = []
        if op is _SUBPATTERN:
            clauses.extend(required_literals(av[-1]))
        elif op in _REPEATS and av[0] >= 1:
            clauses.extend(required_literals(av[2]))
        elif _ATOMIC is not None and op is _ATOMIC:
            clauses.extend(required_literals(av))
        elif op is _BRANCH:
            # one of the alternatives matched: the union of each one's best clause is required
            best = [_best(required_literals(branch)) for branch in av[1]]
            if all(clause is not None for clause in best):
                clauses.append(tuple(sorted({needle for clause in best for needle in clause})))  # type: ignore[union-attr]
        # anything else (classes, anchors, `.`, lookarounds) ends a run and requires nothing
    if run:
        clauses.append(("".join(run),))
    return tuple(clauses)


def _best(clauses: tuple[tuple[str, ...], ...]) -> tuple[str, ...] | None:
    """The clause that rules out most: its shortest string longest, then the fewest strings."""
    if not clauses:
        return None
    return max(clauses, key=lambda clause: (min(map(len, clause)), -len(clause)))
