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


@pytest.mark.parametrize("name", [
    "serving/vllm-bench-serve-qwen3vl-8b-1qps.json",
    "serving/aiperf-0.8-profile_export_aiperf.json",
    "serving/trtllm-bench-report-generated.json",
    "serving/llmperf-yi34b-vllm-4xa10g-c1_summary.json",
    "bench/nvbandwidth-v0.5-json-1gpu-verbose.json",
])
@pytest.mark.parametrize("token", ["1" * 400, "-" + "9" * 398 + ".55"])
def test_a_json_number_no_float_holds_is_read_as_null(name: str, token: str) -> None:
    # Python's JSON reader takes a 400-digit integer; `float()` of it raised OverflowError in the parser and the
    # result was lost: 134 of 524 such mutations over the JSON fixtures. Each of the first numbers in turn:
    text = (FIXTURES / name).read_text()
    plain = _summary(build_machine([Evidence(name="out.json", data=text.encode())]))
    for found in list(re.finditer(r"(?<=[:\[,\s])-?\d+(?:\.\d+)?(?=[,\s\]}])", text))[:12]:
        damaged = text[:found.start()] + token + text[found.end():]
        read = build_machine([Evidence(name="out.json", data=damaged.encode())])
        warnings = [warning for record in read.inputs for warning in record.warnings]
        assert not any("parser failed" in warning for warning in warnings), (found.group(), warnings)
        # said where the parser could not take it (a value it only keeps stays as written)
        assert all(warning.endswith("a number of 400 digits, which no tool prints (a damaged line?), was read as "
                                    "null") for warning in warnings if "digits" in warning), warnings
        assert _summary(read) == plain, found.group()


def test_serving_says_what_reading_a_result_warned(tmp_path: Path) -> None:
    # the warnings of a result that was read reached `--json` only (`inputs[].warnings`), never the text report
    import subprocess
    import sys

    text = (FIXTURES / "serving" / "vllm-bench-serve-qwen3vl-8b-1qps.json").read_text()
    found = re.search(r'"completed": (\d+)', text)
    path = tmp_path / "run.json"
    path.write_text(text[:found.start(1)] + "1" + "0" * 400 + text[found.end(1):])
    done = subprocess.run([sys.executable, "-m", "k3diag", "serving", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=FIXTURES.parent, env={"PYTHONPATH": str(FIXTURES.parent),
                                                                 "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
    assert "Traceback" not in done.stderr
    assert "No serving benchmark result was found" not in done.stdout
    assert f"{path}: line 1: a number of 401 digits, which no tool prints (a damaged line?), was read as null" \
        in done.stdout, done.stdout
