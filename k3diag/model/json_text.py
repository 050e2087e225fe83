"""The JSON text k3diag writes is always JSON: RFC 8259 has no NaN or Infinity.

Python's encoder writes a non-finite float as the bare word `NaN` or `Infinity` by default, which
`jq`, `JSON.parse`, Go and serde_json refuse, taking the whole report with it. Every writer encodes
with `allow_nan=False` and, in the rare case that raises, encodes a copy in which each such number is
`null` (unknown: k3diag's word for a number it does not have). The common case costs nothing more.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

_PLAIN = (str, int, bool, type(None))


def finite_only(value: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """`value` with every NaN or infinite float in it replaced by None. Objects the encoder would hand to
    `default` are converted by it first, so their numbers are seen too. Tuples and sets become lists, as
    the encoder writes them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict):
        return {key: finite_only(item, default) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(item, default) for item in value]
    if default is None:
        return value  # the encoder will say what it cannot encode
    return finite_only(default(value), default)


def dumps(value: Any, *, default: Callable[[Any], Any] | None = None, **options: Any) -> str:
    """`json.dumps(value, **options)`, with `null` for each non-finite number."""
    return finite_encoder(default, **options)(value)


def finite_encoder(default: Callable[[Any], Any] | None = None, **options: Any) -> Callable[[Any], str]:
    """An `encode` function (`json.JSONEncoder(**options).encode`, what `json.dumps` calls) that writes `null`
    for each non-finite number."""
    encode = json.JSONEncoder(default=default, allow_nan=False, **options).encode

    def encode_finite(value: Any) -> str:
        try:
            return encode(value)
        except ValueError as exc:
            if "not JSON compliant" not in str(exc):  # a circular reference: not ours to hide
                raise
            return encode(finite_only(value, default))

    return encode_finite
