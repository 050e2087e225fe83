"""Counts in prose: `1 finding`, `2 findings`, never `finding(s)`; `12,288`, never `12288`."""

from __future__ import annotations


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`counted(1, "GPU")` is `1 GPU`, `counted(3, "GPU")` `3 GPUs`, `counted(2142720, "line")`
    `2,142,720 lines`; `plural` for the irregular ones (`counted(2, "kind of problem", "kinds of problem")`)."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


def per_kind(counts: dict[str, int], kinds: tuple[str, ...] | None = None) -> str:
    """`{"NET": 9216, "P2P": 133632}` as `9,216 NET, 133,632 P2P`: the kinds in `kinds` (zeros included) in
    that order, or else every kind with a count, by name; empty when there is none."""
    if kinds is None:
        kinds = tuple(kind for kind in sorted(counts) if counts[kind])
    return ", ".join(f"{counts.get(kind, 0):,} {kind}" for kind in kinds)


def shown_number(value: object) -> str:
    """A number a file held as a sentence quotes it when it is damaged: a JSON float as Python writes it short
    (`1e+308`), digits whole when short, else their first six and how many there are (`777777... (400
    digits)`), so a 5,000-digit run never fills a warning."""
    if isinstance(value, float):
        return f"{value:g}"
    digits = str(value).strip()
    return digits if len(digits) <= 12 else f"{digits[:6]}... ({len(digits)} digits)"


def one_line(text: object) -> str:
    """`text` with every run of whitespace (newlines included) as one space: for the formats read line by line."""
    return " ".join(str(text).split())
