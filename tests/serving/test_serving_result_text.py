"""The result block `vllm bench serve` and SGLang's `bench_serving` print, as pasted into issues: read into
the same runs as the JSON files (it used to be 'format not recognized')."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from k3diag.join.build import detect
from k3diag.parse.serving import summary_text
from k3diag.parse.text import Section, normalize

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
VLLM = "vllm-bench-serve-text-llama8b-sharegpt-18566.txt"
VLLM_CUT = "vllm-bench-serve-text-failed-line-annotated-cut-26478.txt"
SGLANG = "sglang-bench-serving-text-vllm-chat-multimodal-cut-9812.txt"


def _parse(name: str, text: str | None = None):
    text = normalize(text if text is not None else (FIXTURES / name).read_text())
    return summary_text.parse(Section(text=text, first_line=1, command=None), name)


@pytest.mark.parametrize("name", [VLLM, VLLM_CUT, SGLANG])
def test_detected(name: str) -> None:
    spec = detect(normalize((FIXTURES / name).read_text()))
    assert spec is not None and spec.name == "serving-result-text"


def test_vllm_block_with_the_command_above_it() -> None:
    result = _parse(VLLM)
    (run,) = result.runs
    assert result.warnings == [] and run.warnings == []
    assert run.tool == "vllm-bench-serve" and run.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert run.source.line == 4 and run.requests == 1000 and run.duration_s == 30.85
    assert run.request_per_s == 32.42 and run.output_tok_per_s == 6582.87 and run.total_tok_per_s == 14029.44
    assert run.input_len == pytest.approx(229.711) and run.output_len == pytest.approx(203.068)
    assert (run.ttft.mean, run.ttft.p50, run.ttft.p99) == (9626.13, 9459.70, 12666.73)
    assert (run.tpot.p50, run.tpot.p99, run.itl.p99) == (48.84, 211.21, 214.35)
    assert run.ttft.p95 is None and run.e2el.empty()
    # the command named no --max-concurrency or --request-rate: no load is made up
    assert run.concurrency is None and run.request_rate is None


def test_annotated_and_cut_block_says_it_was_cut() -> None:
    (run,) = _parse(VLLM_CUT).runs
    assert run.failed == 0  # `Failed requests: 0  <<<<<<< New line`: the note after the value is not the value
    assert run.requests == 1000 and run.ttft.p99 == 18164.16 and run.tpot.empty()
    assert run.warnings == [f"{VLLM_CUT}:1: the result block was cut off before its closing `=====` line; the "
                            "numbers after the cut are missing"]


def test_sglang_block_is_an_sglang_run() -> None:
    (run,) = _parse(SGLANG).runs
    assert run.tool == "sglang-bench-serving" and run.metadata["backend"] == "vllm-chat"
    assert math.isinf(run.request_rate) and run.concurrency is None  # `Max request concurrency: not set`
    assert run.requests == 768 and run.total_tok_per_s == 17934.09
    assert (run.e2el.mean, run.e2el.p50) == (25747.35, 25224.20) and run.ttft.p99 == 42164.54


def test_load_from_the_command_line() -> None:
    # the 18566 block under a command line that names the load (made here: the flags are vllm bench serve's)
    text = ("vllm bench serve --model Qwen/Qwen3-0.6B --max-concurrency 16 --request-rate 8\n"
            + (FIXTURES / VLLM).read_text().split("\n", 3)[3])
    (run,) = _parse("cmd.txt", text).runs
    assert (run.model, run.concurrency, run.request_rate) == ("Qwen/Qwen3-0.6B", 16, 8)


def test_banner_without_numbers() -> None:
    result = _parse("x", "============ Serving Benchmark Result ============\nTraceback (most recent call last):\n")
    assert result.runs == [] and result.warnings == ["x:1: a `Serving Benchmark Result` block without its numbers"]


def test_banner_without_its_equals_signs() -> None:
    # kyuz0/amd-strix-halo-vllm-toolboxes#72: pasted outside a code fence, the markdown ate the `=` runs (and the
    # closing line); the paste also stops at `P99 TPOT (ms):` with no value
    name = "vllm-bench-serve-text-markdown-ate-banner-rps-cut-strix72.txt"
    assert detect(normalize((FIXTURES / name).read_text())).name == "serving-result-text"
    (run,) = _parse(name).runs
    assert run.source.line == 5 and run.request_rate == 4.0 and run.requests == 5 and run.failed == 0
    assert (run.tpot.mean, run.tpot.p50, run.tpot.p99) == (132.42, 132.29, None)
    assert run.warnings == []  # no closing line to expect: nothing says it was cut, and nothing is made up


def test_two_blocks_of_a_sweep_are_two_runs() -> None:
    # vllm-project/vllm-ascend#1605: `qps1` and `qps4` blocks one after another, the second cut by the excerpt
    runs = _parse("vllm-bench-serve-text-two-blocks-qps-labels-ascend1605.txt").runs
    assert [(r.source.line, r.request_per_s, r.duration_s) for r in runs] == [(4, 0.76, 262.49), (27, 1.49, 134.10)]
    assert runs[0].warnings == [] and runs[0].itl.p99 == 339.63
    assert runs[1].ttft.empty() and "cut off" in runs[1].warnings[0]
