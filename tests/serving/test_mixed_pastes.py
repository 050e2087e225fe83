"""A vLLM server log and the printed `Serving Benchmark Result` block pasted together, in either order: both
are read (the result block was lost whichever format won the detection). Two real outputs:
fixtures/serving/vllm-engine-internvl3-78b-tp4-l40s.log and vllm-bench-serve-text-llama8b-sharegpt-18566.txt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

SERVING = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
ENGINE = (SERVING / "vllm-engine-internvl3-78b-tp4-l40s.log").read_text()
BLOCK = (SERVING / "vllm-bench-serve-text-llama8b-sharegpt-18566.txt").read_text()
runner = CliRunner()


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.stdout


@pytest.mark.parametrize("order", ["log then result", "result then log"])
def test_the_server_log_and_the_printed_result_are_both_read(order: str, tmp_path: Path) -> None:
    paste = tmp_path / "paste.txt"
    paste.write_text(ENGINE + "\n" + BLOCK if order == "log then result" else BLOCK + "\n" + ENGINE)
    serving = json.loads(_invoke("analyze", str(paste), "--json"))["serving"]
    (run,) = serving["runs"]
    assert (run["model"], run["requests"], run["throughput"]["output_tok_per_s"], run["tpot_ms"]["p99"]) == \
        ("meta-llama/Llama-3.1-8B-Instruct", 1000, 6582.87, 211.21)
    (engine,) = serving["engines"]
    assert (engine["version"], engine["tp"], engine["custom_allreduce"]) == ("0.6.6.post1", 4, "disabled")

    out = _invoke("serving", str(paste))
    assert "No serving benchmark result was found" not in out
    table = next(line for line in out.splitlines() if line.startswith("TP4 "))
    assert table.split()[:2] == ["TP4", "engine-log"] and "32.42" in table and "6,583" in table
    assert "[BAD] vLLM custom all-reduce disabled: it's not supported on more than two PCIe-only GPUs" in out
