"""Values of the JSON readings k3diag's collectors write (NVML, amdsmi): one rule for what a count is."""

from __future__ import annotations

import math
from typing import Any


def whole_number(value: Any, minimum: int = 0) -> int | None:
    """`value` as a count when it is a whole number of at least `minimum` (`16` or `16.0`); None for anything
    else: absent (`null`), a string, a fraction, NaN or Infinity (which Python's JSON reader takes), a bool, or
    less than `minimum`. The caller says which of them is a damaged reading (a value that is there)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    return None
