"""Counts in prose: `1 finding`, `2 findings`, never `finding(s)`."""

from __future__ import annotations


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`counted(1, "GPU")` is `1 GPU`, `counted(3, "GPU")` `3 GPUs`; `plural` for the irregular ones
    (`counted(2, "kind of problem", "kinds of problem")`)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
