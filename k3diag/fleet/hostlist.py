"""Slurm-style host lists: `gpu[001-004,017]` folded from names, and unfolded back.

Operators paste a drain list straight into `scontrol update NodeName=...`, `pdsh -w` or `clush -w`,
which all read this syntax; the folding keeps zero padding (`gpu001`..`gpu004`, not `gpu1`..`gpu4`).
"""

from __future__ import annotations

import re
from collections import defaultdict

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)([^\d]*)$")
_BRACKET = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<suffix>[^\[\]]*)$")
# An unfolded range longer than this is refused: `n[0-99999999]` in a typo must not fill the memory.
MAX_EXPANSION = 1_000_000


class HostListError(ValueError):
    """A host list expression that cannot be unfolded; `str()` says why."""


def fold_hosts(names: list[str]) -> str:
    """One comma-separated expression for these names, sorted, duplicates dropped.

    Names ending in a number are grouped by what precedes and follows that number and by its width
    (so `n9` and `n010` never share a range); others are listed as they are.
    """
    groups: dict[tuple[str, str, int], set[int]] = defaultdict(set)
    plain: set[str] = set()
    for name in names:
        name = name.strip()
        if not name:
            continue
        match = _TRAILING_NUMBER.match(name)
        if match is None or "[" in name or "]" in name or "," in name:
            plain.add(name)
            continue
        prefix, digits, suffix = match.groups()
        # Width 0 marks "no padding": 9 and 10 may share a range; 09 and 10 share width 2.
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups[(prefix, suffix, width)].add(int(digits))
    # Unpadded numbers that happen to be as wide as a padded group join it (`gpu100` with `gpu001`).
    for (prefix, suffix, width), numbers in list(groups.items()):
        if width == 0:
            continue
        loose = groups.get((prefix, suffix, 0))
        if loose:
            fitting = {n for n in loose if len(str(n)) == width}
            numbers.update(fitting)
            loose.difference_update(fitting)
    parts: list[tuple[str, str]] = []
    for (prefix, suffix, width), numbers in groups.items():
        if not numbers:
            continue
        ordered = sorted(numbers)
        if len(ordered) == 1:
            parts.append((prefix, f"{prefix}{_pad(ordered[0], width)}{suffix}"))
            continue
        ranges = ",".join(_ranges(ordered, width))
        parts.append((prefix, f"{prefix}[{ranges}]{suffix}"))
    parts.extend((name, name) for name in plain)
    return ",".join(text for _, text in sorted(parts))


def _pad(number: int, width: int) -> str:
    return str(number).zfill(width) if width else str(number)


def _ranges(numbers: list[int], width: int) -> list[str]:
    out: list[str] = []
    start = previous = numbers[0]
    for number in numbers[1:] + [None]:  # type: ignore[list-item]
        if number is not None and number == previous + 1:
            previous = number
            continue
        out.append(_pad(start, width) if start == previous else f"{_pad(start, width)}-{_pad(previous, width)}")
        if number is not None:
            start = previous = number
    return out


def unfold_hosts(expression: str) -> list[str]:
    """Every name an expression stands for, in order: `gpu[001-003],cpu1` -> gpu001, gpu002, gpu003, cpu1."""
    names: list[str] = []
    for part in _split_top_level(expression):
        part = part.strip()
        if not part:
            continue
        match = _BRACKET.match(part)
        if match is None:
            if "[" in part or "]" in part:
                raise HostListError(f"{part!r} is not a host list expression (one [...] per name, e.g. gpu[001-004])")
            names.append(part)
            continue
        prefix, suffix = match.group("prefix"), match.group("suffix")
        for piece in match.group("ranges").split(","):
            piece = piece.strip()
            low, _, high = piece.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise HostListError(f"{piece!r} in {part!r} is not a number or a range of numbers")
            width = len(low) if low.startswith("0") and len(low) > 1 else 0
            first, last = int(low), int(high) if high else int(low)
            if last < first:
                raise HostListError(f"the range {piece!r} in {part!r} runs backwards")
            if last - first + len(names) > MAX_EXPANSION:
                raise HostListError(f"{expression!r} stands for more than {MAX_EXPANSION} names")
            names.extend(f"{prefix}{_pad(n, width)}{suffix}" for n in range(first, last + 1))
    return names


def _split_top_level(expression: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, []
    for char in expression:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts
