"""Every JSON text k3diag writes is JSON (RFC 8259): a NaN or infinite number is `null`, never the bare
words `NaN` or `Infinity` that `jq`, `JSON.parse`, Go and serde_json refuse, taking the whole report."""

from __future__ import annotations

import io
import json
import math

import pytest

from k3diag.model import json_text
from k3diag.render import json_report


def _strict(text: str):
    """Parse as a strict reader does: the constants Python's parser accepts are refused."""
    def refuse(word: str):
        raise ValueError(f"not JSON: {word}")
    return json.loads(text, parse_constant=refuse)


class _Reading:
    def to_json(self) -> dict:
        return {"bandwidth_gbs": math.inf, "latency_us": math.nan, "ok": 1.5}


REPORT = {"schema": "k3diag.report/1", "plan": {"dims": [{"size": 1, "bandwidth_gbs": float("inf")}]},
          "readings": [_Reading()], "many": [{"v": float("nan") if i == 300 else i / 2} for i in range(600)],
          "neg": -math.inf, "fine": [0.25, 3]}
EXPECTED = {"schema": "k3diag.report/1", "plan": {"dims": [{"size": 1, "bandwidth_gbs": None}]},
            "readings": [{"bandwidth_gbs": None, "latency_us": None, "ok": 1.5}],
            "many": [{"v": None if i == 300 else i / 2} for i in range(600)], "neg": None, "fine": [0.25, 3]}


@pytest.mark.parametrize("indent", [None, 2])
def test_the_report_writer_writes_null_for_numbers_json_has_not(indent) -> None:
    out = io.StringIO()
    json_report.write(REPORT, out, indent=indent)
    text = out.getvalue()
    assert "Infinity" not in text and "NaN" not in text
    assert _strict(text) == EXPECTED
    assert _strict(json_report.dumps(REPORT)) == EXPECTED


def test_the_indented_report_is_the_text_json_dump_writes() -> None:
    out = io.StringIO()
    json_report.write(EXPECTED, out, indent=2)
    assert out.getvalue() == json.dumps(EXPECTED, indent=2) + "\n"
    empty = io.StringIO()
    json_report.write({}, empty, indent=2)
    assert empty.getvalue() == "{}\n"


def test_every_other_writer_shares_the_rule() -> None:
    assert json_text.dumps({"a": [math.inf, (1, math.nan)]}, indent=1) == json.dumps({"a": [None, [1, None]]}, indent=1)
    assert json_text.dumps([_Reading()], default=lambda o: o.to_json()) == \
        '[{"bandwidth_gbs": null, "latency_us": null, "ok": 1.5}]'
    assert json_text.finite_encoder(separators=(",", ":"))({"x": -math.inf}) == '{"x":null}'
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):  # not a number: not hidden
        json_text.dumps(cycle)
