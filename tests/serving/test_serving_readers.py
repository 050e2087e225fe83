"""The serving readers against real result files as people save and paste them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from k3diag.join.build import detect
from k3diag.parse.serving import aiperf, llmperf, p2p_cache, sglang_bench, trtllm_bench, vllm_bench, vllm_log
from k3diag.parse.serving.common import find_docs, int_list, layout_from_name
from k3diag.parse.text import Section, normalize

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"


def _section(name: str, text: str | None = None) -> Section:
    return Section(text=normalize(text if text is not None else (FIXTURES / name).read_text()), first_line=1, command=None)


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("vllm-benchmark-serving-llmd-qps-sweep.jsonl", "vllm-bench-serve"),
        ("vllm-bench-serve-qwen3vl-8b-1qps.json", "vllm-bench-serve"),
        ("sglang-bench-serving-glm52-h200-cut.json", "sglang-bench-serving"),
        ("trtllm-bench-report-generated.json", "trtllm-bench"),
        ("aiperf-0.8-profile_export_aiperf.json", "aiperf"),
        ("genai-perf-gpt4o-mini-profile_export_genai_perf.json", "aiperf"),
        ("llmperf-yi34b-vllm-4xa10g-c16_summary.json", "llmperf"),
        ("vllm-engine-internvl3-78b-tp4-l40s.log", "vllm-engine-log"),
        ("gpu_p2p_access_cache_for_0,1,2,3.json", "vllm-p2p-cache"),
    ],
)
def test_format_is_detected_from_content(name: str, fmt: str) -> None:
    spec = detect(normalize((FIXTURES / name).read_text()))
    assert spec is not None and spec.name == fmt


def test_old_benchmark_serving_sweep_reads_every_line_with_colon_goodput_and_metadata() -> None:
    result = vllm_bench.parse(_section("vllm-benchmark-serving-llmd-qps-sweep.jsonl"), "sweep.jsonl")
    assert [run.source.line for run in result.runs] == [1, 2, 3]
    first, _, last = result.runs
    assert first.model == "meta-llama/Llama-3.2-3B-Instruct"
    assert first.request_rate == 10.0 and math.isinf(last.request_rate) and first.concurrency is None
    assert first.failed == 0  # no "failed" key: num_prompts - completed
    assert first.input_len == pytest.approx(999.0) and first.output_len == pytest.approx(81050 / 300)
    assert first.output_tok_per_s == pytest.approx(2249.247, rel=1e-6)
    # vLLM's default --metric-percentiles 99: median and P99, no P95
    assert first.tpot.p50 == pytest.approx(13.5125, rel=1e-4) and first.tpot.p99 == pytest.approx(17.652, rel=1e-4)
    assert first.tpot.p95 is None and first.e2el.empty()
    assert first.metadata["gpu"] == "4xNVIDIA_L40S" and first.metadata["decode_replicas"] == "4"
    assert first.layout.source == "unknown"  # the metadata names no TP size


def test_new_vllm_result_with_failed_and_peak_keys() -> None:
    (run,) = vllm_bench.parse(_section("vllm-bench-serve-qwen3vl-8b-1qps.json"), "r.json").runs
    assert run.failed == 0 and run.requests == 200 and run.input_len == 200 and run.output_len == 128
    assert run.ttft.p99 == pytest.approx(143.3256, rel=1e-5)
    assert "max_concurrent_requests" not in run.metadata and run.metadata == {}


def test_vllm_metadata_names_the_layout() -> None:
    text = (FIXTURES / "vllm-bench-serve-qwen3vl-8b-1qps.json").read_text().replace(
        '"num_prompts": 200,', '"num_prompts": 200, "tp": "4", "gpus": "0,1,2,3",')
    (run,) = vllm_bench.parse(_section("", text), "r.json").runs
    assert (run.layout.tp, run.layout.gpus, run.layout.source) == (4, [0, 1, 2, 3], "file")
    assert run.output_tok_per_s_per_gpu == pytest.approx(125.792 / 4, rel=1e-4)


def test_save_detailed_fills_percentiles_from_per_request_values() -> None:
    text = ('{"model_id": "m", "completed": 4, "num_prompts": 4, "total_input_tokens": 40, "total_output_tokens": 40,'
            ' "request_throughput": 1.0, "output_throughput": 10.0, "median_ttft_ms": 100.0, "p99_ttft_ms": 130.0,'
            ' "ttfts": [0.1, 0.1, 0.1, 0.13], "latencies": [1.0, 1.1, 1.2, 1.3], "output_lens": [10, 10, 10, 10],'
            ' "itls": [[0.1], [0.1], [0.11], [0.12]]}')
    (run,) = vllm_bench.parse(_section("", text), "d.json").runs
    assert run.ttft.p99 == 130.0  # the summary's own value wins
    assert run.ttft.p95 == pytest.approx(125.5) and run.ttft.note.startswith("computed from the per-request")
    assert run.e2el.p50 == pytest.approx(1150.0) and run.tpot.p50 is not None


def test_sglang_paste_cut_off_mid_key_keeps_what_is_there() -> None:
    result = sglang_bench.parse(_section("sglang-bench-serving-glm52-h200-cut.json"), "cut.json")
    (run,) = result.runs
    assert "cut off" in result.warnings[0] and "line 2" in result.warnings[0]
    assert math.isinf(run.request_rate) and run.concurrency == 1
    assert run.input_len == 8192 and run.output_len == 1024 and run.output_tok_per_s == pytest.approx(173.0546, rel=1e-6)
    assert run.e2el.p95 == pytest.approx(5985.1189, rel=1e-6) and run.tpot.p99 == pytest.approx(5.1816, rel=1e-4)
    assert run.itl.empty()  # the paste ends inside "mean_itl_ms"


def test_sglang_server_info_gives_tp_and_dp() -> None:
    line = ('{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 16, "completed": 64,'
            ' "total_input_tokens": 65536, "total_output_tokens": 65536, "total_output_tokens_retokenized": 65530,'
            ' "request_throughput": 1.5, "output_throughput": 1536.0, "mean_e2e_latency_ms": 9000.0,'
            ' "median_tpot_ms": 9.1, "p99_tpot_ms": 11.0,'
            ' "server_info": {"model_path": "Qwen/Qwen3-32B", "tp_size": 2, "dp_size": 2, "pp_size": 1}}\n')
    runs = sglang_bench.parse(_section("", line * 2), "s.jsonl").runs
    assert len(runs) == 2 and runs[1].source.line == 2
    assert (runs[0].layout.tp, runs[0].layout.dp, runs[0].layout.gpu_count) == (2, 2, 4)
    assert runs[0].model == "Qwen/Qwen3-32B" and runs[0].concurrency_per_replica == 8


def test_trtllm_world_info_and_percentile_tables() -> None:
    (run,) = trtllm_bench.parse(_section("trtllm-bench-report-generated.json"), "report.json").runs
    assert (run.layout.tp, run.layout.pp, run.layout.source) == (2, 1, "file")
    assert run.output_tok_per_s == 11592.0 and run.output_tok_per_s_per_gpu == 5796.0
    assert run.tpot.p99 == 2.91 and run.ttft.p50 == 61.0 and run.e2el.mean == 2755.0
    assert "average number of requests in flight" in run.warnings[0]


def test_aiperf_nested_config_and_non_streaming_run() -> None:
    (run,) = aiperf.parse(_section("aiperf-0.8-profile_export_aiperf.json"), "profile_export_aiperf.json").runs
    assert run.model == "mock-model" and run.concurrency == 4 and run.requests == 64
    assert run.input_len == 550 and run.e2el.p99 == pytest.approx(15.1439, rel=1e-4)
    assert run.ttft.empty() and "not streaming" in run.warnings[0]


def test_genai_perf_flat_config() -> None:
    (run,) = aiperf.parse(_section("genai-perf-gpt4o-mini-profile_export_genai_perf.json"), "g.json").runs
    assert run.model == "openai/gpt-4o-mini" and run.concurrency == 1 and run.metadata["tool"] == "genai-perf"
    assert run.ttft.p95 == pytest.approx(3289.2534, rel=1e-6) and run.output_len == pytest.approx(100.6875)


def test_aiperf_records_layout_and_seconds_unit() -> None:
    text = ('{"records": {"request_throughput": {"unit": "requests/sec", "avg": 2.0},'
            ' "time_to_first_token": {"unit": "sec", "avg": 0.2, "p50": 0.19, "p99": 0.4},'
            ' "inter_token_latency": {"unit": "ms", "avg": 20.0, "p99": 30.0},'
            ' "output_token_throughput": {"unit": "tokens/sec", "avg": 500.0}},'
            ' "input_config": {"endpoint": {"model_names": ["m"]}, "loadgen": {"concurrency": 8}}}')
    (run,) = aiperf.parse(_section("", text), "a.json").runs
    assert run.ttft.p99 == pytest.approx(400.0) and run.tpot.p99 == 30.0 and run.concurrency == 8
    assert run.model == "m"


def test_llmperf_summary_seconds_to_ms() -> None:
    (run,) = llmperf.parse(_section("llmperf-yi34b-vllm-4xa10g-c16_summary.json"), "s.json").runs
    assert run.model == "01-ai/Yi-1.5-34B-Chat" and run.concurrency == 16 and run.requests == 112
    assert run.ttft.p99 == pytest.approx(7938.05, rel=1e-5) and run.tpot.p50 == pytest.approx(113.263, rel=1e-5)
    assert run.output_tok_per_s == pytest.approx(124.2928, rel=1e-6)
    assert run.request_per_s == pytest.approx(46.8214 / 60, rel=1e-4)


def test_vllm_engine_log_tp_and_custom_allreduce_reason() -> None:
    result = vllm_log.parse(_section("vllm-engine-internvl3-78b-tp4-l40s.log"), "vllm.log")
    engine = result.engine
    assert (engine.tp, engine.pp, engine.version, engine.model) == (4, 1, "0.6.6.post1", "OpenGVLab/InternVL3-78B")
    assert engine.custom_allreduce == "disabled"
    assert engine.custom_allreduce_reason == "it's not supported on more than two PCIe-only GPUs"
    assert engine.nccl_version == "2.21.5" and result.nccl is None


def test_vllm_engine_log_without_warning_means_custom_allreduce_on_and_hands_nccl_lines_on() -> None:
    text = ("INFO 05-25 15:30:01 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with config: model='m', "
            "tensor_parallel_size=2, disable_custom_all_reduce=False, quantization=None\n"
            "host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
            "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0xab - Init COMPLETE\n")
    result = vllm_log.parse(_section("", text), "v.log")
    assert result.engine.tp == 2 and result.engine.custom_allreduce == "enabled"
    assert result.nccl is not None and result.nccl.connections[0].transport == "P2P"


def test_p2p_cache_uses_the_file_name_for_physical_ids() -> None:
    text = '{\n    "0->0": true,\n    "0->1": false,\n    "1->0": false,\n    "1->1": true\n}\n'
    result = p2p_cache.parse(_section("", text), "/root/.cache/vllm/gpu_p2p_access_cache_for_2,3.json")
    assert result.cache.failed_pairs() == [(2, 3), (3, 2)] and result.cache.source.line == 3
    plain = p2p_cache.parse(_section("", text), "cache.json")
    assert plain.cache.failed_pairs() == [(0, 1), (1, 0)] and "logical device indices" in plain.warnings[0]


def test_json_in_a_log_with_crlf_and_ansi_is_found() -> None:
    line = (FIXTURES / "vllm-bench-serve-qwen3vl-8b-1qps.json").read_text().strip()
    text = "\x1b[32m$ cat result.json\x1b[0m\r\n" + line + "\r\nsome trailing log line\r\n"
    docs, warnings = find_docs(normalize(text))
    assert len(docs) == 1 and docs[0].line == 2 and not warnings


@pytest.mark.parametrize(("value", "ids"), [("0,1,2,3", [0, 1, 2, 3]), ("0-3", [0, 1, 2, 3]), ([2, 3], [2, 3]),
                                            ("4", [4]), ("gpu0", None), ("", None)])
def test_gpu_lists_as_people_write_them(value, ids) -> None:
    assert int_list(value) == ids


def test_layout_from_file_name_is_a_last_resort() -> None:
    layout = layout_from_name("results/qwen-2xtp2-gpus0,1,2,3-c16.json")
    assert (layout.tp, layout.dp, layout.gpus, layout.source) == (2, 2, [0, 1, 2, 3], "filename")
    assert layout_from_name("vllm-infqps-concurrency16-Qwen.json") is None


def test_readers_never_raise_on_hostile_input() -> None:
    for module in (vllm_bench, sglang_bench, trtllm_bench, aiperf, llmperf, vllm_log, p2p_cache):
        for text in ("", "{", '{"request_throughput": ', "[" * 5000, '{"results_ttft_s_mean": "x"}', "\x00\x01"):
            result = module.parse(_section("", text), "bad.json")
            assert isinstance(result.warnings, list)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PIECES = st.sampled_from(['{', '}', '[', ']', '"request_throughput": ', '"output_throughput": 1.5', ', ', '\n',
                           '"mean_e2e_latency_ms": 3', '"world_info": {"tp_size": 2}', 'Infinity', 'NaN', '"x"',
                           '"0->1": false', '"results_ttft_s_mean": 0.2', '"unit": "ms", "avg": 1', 'null', '1e309',
                           '"tp": "4", "gpus": "0-3"', '"time_to_first_token": {'])


@settings(max_examples=150, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_fragments_of_result_files_never_raise(text: str) -> None:
    for module in (vllm_bench, sglang_bench, trtllm_bench, aiperf, llmperf, vllm_log, p2p_cache):
        module.sniff(text)
        result = module.parse(_section("", text), "fuzz.json")
        assert all(isinstance(w, str) for w in result.warnings)
        for run in getattr(result, "runs", []):
            json.dumps(run.to_json(), allow_nan=False)  # the JSON report never carries NaN or Infinity


@pytest.mark.parametrize("command", [["analyze"], ["serving"]])
def test_a_parallel_size_no_job_has_is_said_not_multiplied(tmp_path: Path, command: list[str]) -> None:
    # `"tp_size": 1e308` is an integer to Python's JSON reader; the run's GPU count (TP x PP x DP) then
    # overflowed the float of its per-GPU rate, and the report was lost (OverflowError) for one damaged value
    import subprocess
    import sys

    text = (FIXTURES / "trtllm-bench-report-generated.json").read_text()
    path = tmp_path / "report.json"
    path.write_text(text.replace('"tp_size": 2,', '"tp_size": 1e308,', 1))
    done = subprocess.run([sys.executable, "-m", "k3diag", *command, str(path), "--json"], capture_output=True,
                          text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    said = "world_info tp_size 1e+308 is more GPUs than any job has (at most 1,048,576); read as not known"
    assert said in json.dumps(report)
    (run,) = trtllm_bench.parse(_section("", path.read_text()), "report.json").runs
    # the world size stands in for the size that was not read, as it does when tp_size is absent
    assert (run.layout.tp, run.layout.gpu_count, run.output_tok_per_s_per_gpu) == (2, 2, 5796.0)


def test_a_vllm_log_parallel_size_no_job_has_is_said_not_read() -> None:
    text = (FIXTURES / "vllm-engine-internvl3-78b-tp4-l40s.log").read_text()
    result = vllm_log.parse(_section("", text.replace("tensor_parallel_size=4", "tensor_parallel_size=" + "7" * 400, 1)),
                            "engine.log")
    assert result.engine.tp is None
    assert "engine.log:3: tensor_parallel_size 777777... (400 digits) is more GPUs than any job has (at most 1,048,576); " \
           "read as not known" in result.warnings
