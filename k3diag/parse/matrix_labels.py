"""GPU indices that label benchmark matrices (p2pBandwidthLatencyTest, nvbandwidth): one rule for when one is
damaged.

A row label sizes the matrix the parser builds (rows 0 to the largest label), and a device index sizes the
peer-access table, so a damaged one (digits run together in a paste, a 400-digit number) would ask for a
matrix no machine holds: the parse ran out of memory. These tools print the GPUs one process sees, and no
NVLink domain announced has more than 576, so an index above `MAX_GPU_INDEX` is read as damaged.
"""

from __future__ import annotations

MAX_GPU_INDEX = 1023
# longer than any index up to MAX_GPU_INDEX, and checked before int(): CPython refuses to convert a string of
# more than 4,300 digits (ValueError), which would lose the whole input rather than one line
_MAX_INDEX_DIGITS = len(str(MAX_GPU_INDEX))


def gpu_index(digits: str) -> int | None:
    """`digits` (a run of 0-9) as a GPU index, or None when it is longer or larger than any GPU index."""
    if len(digits) > _MAX_INDEX_DIGITS:
        return None
    value = int(digits)
    return value if value <= MAX_GPU_INDEX else None


def damaged_index_warning(lines: list[str]) -> str | None:
    """One sentence for the lines skipped because a GPU index on them is damaged (`line 12: row 7777...`)."""
    if not lines:
        return None
    shown = "; ".join(lines[:10]) + (f"; and {len(lines) - 10:,} more lines" if len(lines) > 10 else "")
    return f"damaged GPU index (none is above {MAX_GPU_INDEX}) on {shown}: those lines are skipped"
