"""A number no int holds (a run of over 4,300 digits: a damaged or glued line) in any section: read as not
available, said with its line, and the rest of the section read. Before, `int()` raised ValueError (or a
float of it, OverflowError) out of the parser and the whole section was lost for one value ("the
nvidia-smi-query parser failed on this input (ValueError: Exceeds the limit (4300 digits) ...)"): 12 formats
over the fixtures, one number mutated at a time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NUMBER = re.compile(r"(?<![\w.])\d{2,}(?![\w.])")
DIGITS = "9" * 5000


def _summary(machine) -> tuple:
    return ([record.format for record in machine.inputs], len(machine.gpus), len(machine.benchmarks),
            len(machine.extras.get("serving_runs", []) or []), len(machine.fabric.ib_ports)
            if hasattr(machine.fabric, "ib_ports") else None)


@pytest.mark.parametrize("name, token", [
    ("nvidia/smi-q-8xh100-565-multi-gpu-fabric.txt", "N/A"),
    ("nvidia/csv-l40s-8x-idle-gen1.txt", "N/A"),
    ("bench/nccl-tests-1gpu-a6000-head.txt", "N/A"),
    ("serving/vllm-bench-serve-text-failed-line-annotated-cut-26478.txt", "N/A"),
    ("serving/h100-llama70b/llama70b-tp8.json", "null"),
])
def test_a_number_no_int_holds_is_read_as_not_available(name: str, token: str) -> None:
    text = (FIXTURES / name).read_text()
    found = NUMBER.search(text, len(text) * 3 // 10)
    damaged = text[:found.start()] + DIGITS + text[found.end():]
    line = text.count("\n", 0, found.start()) + 1
    plain = build_machine([Evidence(name="out.txt", data=text.encode())])
    read = build_machine([Evidence(name="out.txt", data=damaged.encode())])
    warnings = [warning for record in read.inputs for warning in record.warnings]
    assert not any("parser failed" in warning for warning in warnings), warnings
    assert f"line {line}: a number of 5,000 digits, which no tool prints (a damaged line?), was read as {token}" \
        in warnings, warnings
    assert _summary(read) == _summary(plain)
