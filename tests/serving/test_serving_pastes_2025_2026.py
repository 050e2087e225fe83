"""Real outputs of recent serving benchmarks and vLLM logs (fixtures/serving/SOURCES.md), as `k3diag serving`
shows them: a vLLM 0.10 log hard-wrapped by the viewer it was copied from, a README sweeping two request
shapes on TP1 and TP2, vLLM's `Speculative Decoding` group and SGLang's `Accept length:`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from k3diag.cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
A100 = FIXTURES / "a100-qwen2-7b-two-gpus-vs-one"
runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["serving", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout


def report(*args: str) -> dict:
    code, out = run(*args, "--json")
    data = json.loads(out)
    assert data["exit_code"] == code
    return data


def test_a_wrapped_vllm_log_still_gives_the_tp_size_and_the_whole_custom_allreduce_reason() -> None:
    # `tensor_parallel_si` / `ze=2` and `lacks GPU` / ` P2P capability`: the log was cut at the viewer's width
    data = report(str(A100 / "two-gpus"))
    layouts = data["layouts"]
    assert len(layouts) == 4
    assert {(layout["tp"], layout["source"]) for layout in layouts} == {(2, "engine-log")}
    assert layouts[0]["layout_detail"] == "vLLM log vllm-7B-2gpuA10080GB-0.5GRAM-same-node.log"
    assert layouts[0]["model"] == "Qwen2-7B-Instruct"
    code, out = run(str(A100 / "two-gpus"))
    assert ("[BAD] vLLM custom all-reduce disabled: your platform lacks GPU P2P capability or P2P test failed; "
            "every all-reduce goes through NCCL") in out


def test_the_one_gpu_log_says_tp1_from_its_wrapped_config_line() -> None:
    data = report(str(A100 / "one-gpu"))
    assert {(layout["tp"], layout["source"]) for layout in data["layouts"]} == {(1, "engine-log")}
    assert [layout["requests"] for layout in data["layouts"]][-1] == 924
    assert data["layouts"][-1]["failed"] == 76  # --num-prompts 1000 on the command line above the block


def test_a_sweep_over_two_request_shapes_is_ranked_on_the_shape_both_layouts_ran() -> None:
    data = report(str(A100), "--slo-tpot-ms", "130")
    assert data["comparable"] is True
    best = data["best"]
    assert best["label"] == "TP1"
    assert best["output_tok_per_s_per_gpu"] == 4442.73  # 200 prompts, 1024 in / 1024 out, P99 TPOT 47.2 ms
    assert best["runner_up"] == "TP2"
    assert best["ratio_to_runner_up"] == 2.509  # against 3541.34 tok/s over 2 GPUs
    assert data["verdict"].startswith("TP1 serves the most output tokens/s per GPU at P99 TPOT <= 130 ms: "
                                      "4442.7 tok/s/GPU, 2.51x TP2 (1770.7)")
    short = [layout for layout in data["layouts"] if layout["output_len"] is not None and layout["output_len"] < 200]
    assert len(short) == 3
    assert all(layout["excluded"].startswith("it was measured at another request shape (mean input 102")
               and "mean output 127 tokens) than the ranked runs (mean input 1022 tokens, mean output 1015 tokens)"
               in layout["excluded"] for layout in short)
    assert any("the runs hold several request shapes; compared on mean input 1022 tokens, mean output 1015 tokens"
               in note for note in data["notes"])
    jsonschema.validate(data, json.loads((Path(__file__).resolve().parents[2] / "k3diag" / "data" / "schema"
                                          / "serving.schema.json").read_text()))


def test_without_a_load_in_any_result_the_reason_says_so_once_per_file() -> None:
    code, out = run(str(A100))
    assert code == 3
    assert ("Not ranked: no result recorded its load (neither --max-concurrency nor the request rate); rerun with "
            "--max-concurrency") in out
    assert "per replica ()" not in out
    assert out.count("neither concurrency nor request rate recorded") == 2
    assert "README-test5.md): neither concurrency nor request rate recorded for 10 runs" in out


def test_vllm_speculative_decoding_group_is_kept_with_the_json_keys() -> None:
    data = report(str(FIXTURES / "vllm-bench-serve-text-qwen36-dflash-specdec-speculators613.md"))
    (layout,) = data["layouts"]
    assert layout["metadata"] == {
        "spec_decode_acceptance_rate": "47.16", "spec_decode_acceptance_length": "4.77",
        "spec_decode_num_drafts": "446819", "spec_decode_draft_tokens": "3574552",
        "spec_decode_accepted_tokens": "1685779"}
    assert (layout["requests"], layout["failed"], layout["concurrency"]) == (640, 0, 32.0)
    assert layout["throughput"]["output_tok_per_s"] == 2905.22
    assert layout["tpot_ms"]["p50"] == 11.77 and layout["itl_ms"]["p99"] == 157.48


def test_sglang_accept_length_and_the_p90_p95_lines_of_a_newer_block() -> None:
    data = report(str(FIXTURES / "sglang-bench-serving-text-kimi-k26-npu-dpattn-specdec.md"))
    first, second = data["layouts"]
    assert (first["tool"], first["metadata"]["accept_length"], second["metadata"]["accept_length"]) == (
        "sglang-bench-serving", "4.6", "4.55")
    assert (first["requests"], first["concurrency"], first["request_rate"]) == (768, 192.0, "inf")
    assert first["e2el_ms"]["p90"] == 88258.84 and first["itl_ms"]["p95"] == 64.22
    assert second["ttft_ms"]["p95"] == 25936.86 and second["tpot_ms"]["p90"] == 52.17
    assert first["input_len"] == 3500.0 and second["output_len"] == 1500.0


def test_sglang_dp_attention_counts_the_tp_group_once() -> None:
    # `--tp 8 --dp 8 --enable-dp-attention` (SGLang's DP-attention guide; datacrunch-research/h200-benchmarks runs
    # DeepSeek so on "8 x H200"): attention is data-parallel inside the TP group, so the server uses 8 GPUs, not 64.
    # The line has the key set of the test above with server_info as /get_server_info reports those flags.
    from k3diag.parse.serving import sglang_bench
    from k3diag.parse.text import Section

    line = ('{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 64, "completed": 256,'
            ' "total_input_tokens": 262144, "total_output_tokens": 262144, "total_output_tokens_retokenized": 262100,'
            ' "request_throughput": 2.0, "output_throughput": 2048.0, "mean_e2e_latency_ms": 30000.0,'
            ' "server_info": {"model_path": "deepseek-ai/DeepSeek-V3", "tp_size": 8, "dp_size": 8,'
            ' "enable_dp_attention": true}}\n')
    (run,) = sglang_bench.parse(Section(text=line, first_line=1), "dpa.jsonl").runs
    assert (run.layout.tp, run.layout.dp, run.layout.gpu_count) == (8, None, 8)
    assert run.output_tok_per_s_per_gpu == 256.0 and run.concurrency_per_replica == 64
    assert run.layout.detail.endswith("enable_dp_attention=true (DP attention inside the TP group)")
    assert run.warnings == []


def _trtllm_text(name: str):
    # trtllm-bench's printed report, read by the trtllm-bench reader. `k3diag serving` detects it once the
    # format's hint in k3diag/parse/registry.py also names `PERFORMANCE OVERVIEW` (today it asks for
    # `"world_info"`, the JSON report's key) and trtllm_bench.sniff returns trtllm_text.sniff's score; the
    # reader is tested directly until then.
    from k3diag.parse.serving import trtllm_bench, trtllm_text
    from k3diag.parse.text import Section, normalize

    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert trtllm_text.sniff(text) >= 0.9
    return trtllm_bench.parse(Section(text=normalize(text), first_line=1), name)


def test_trtllm_bench_printed_report_gives_tp_lengths_percentiles_in_ms() -> None:
    (run,) = _trtllm_text("trtllm-bench-report-text-llama31-8b-nvidia-blog.txt").runs
    assert run.tool == "trtllm-bench" and run.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (run.layout.tp, run.layout.pp, run.layout.source, run.layout.detail) == (
        1, 1, "file", "world_info tp_size=1 pp_size=1")
    assert (run.requests, run.concurrency, run.input_len, run.output_len) == (100, 94.605, 128.0, 128.0)
    assert (run.request_per_s, run.output_tok_per_s, run.total_tok_per_s) == (86.5373, 11076.77, 22153.5399)
    assert run.duration_s == 1.1555715  # Total Latency (ms): 1155.5715
    assert (run.tpot.mean, run.tpot.p50, run.tpot.p99) == (7.3272, 7.6079, 8.1306)
    assert (run.ttft.p50, run.ttft.p95, run.e2el.p90, run.e2el.mean) == (159.7857, 226.9148, 1130.72, 1093.2284)
    assert run.metadata["backend"] == "pytorch" and run.metadata["max_batch_size"] == "3840"
    assert run.source.line == 3 and run.source.text == "= PYTORCH BACKEND"


def test_trtllm_bench_overview_alone_says_what_it_lacks_and_the_gpus_it_implies() -> None:
    (run,) = _trtllm_text("trtllm-bench-overview-only-deepseek-v32-b200.txt").runs  # values after a tab
    assert (run.request_per_s, run.output_tok_per_s, run.tpot.mean, run.ttft.mean) == (0.2678, 274.1786, 3.2344,
                                                                                        425.9885)
    assert run.layout.tp is None and run.layout.source == "unknown"
    assert run.warnings == [
        "trtllm-bench-overview-only-deepseek-v32-b200.txt:2: the report has no `WORLD + RUNTIME INFORMATION` part, "
        "so its TP size is not read; its per-GPU output throughput (68.5446 of 274.1786 tok/s) says it ran on 4 GPUs "
        "(paste the whole report, or use --report_json)"]


def test_the_printed_trtllm_bench_report_reaches_k3diag_serving() -> None:
    # detection now takes `PERFORMANCE OVERVIEW` (the report people paste), not only the JSON's "world_info"
    from typer.testing import CliRunner

    from k3diag.cli import app

    path = Path(__file__).resolve().parents[2] / "fixtures" / "serving" / "trtllm-bench-report-text-llama31-8b-nvidia-blog.txt"
    out = CliRunner().invoke(app, ["serving", str(path)]).stdout
    assert "TP1     file         average 94.605 in flight/replica  86.54  86.54      11,077     11,077         131.4" in out
    assert "159.8/226.9/232.4" in out


def test_a_trtllm_bench_report_cut_above_its_values_then_another_keeps_both() -> None:
    # two reports pasted one after the other, the first cut below its banner: its values come before any
    # title, and the second report's title made the parser fail ("TypeError: Value after * must be an iterable")
    from k3diag.parse.serving import trtllm_text
    from k3diag.parse.text import Section

    text = (FIXTURES / "trtllm-bench-overview-only-deepseek-v32-b200.txt").read_text()
    cut = "\n".join(text.split("\n")[3:])
    runs = trtllm_text.parse(Section(text=cut + "\n" + text, first_line=1), "two.txt").runs
    assert [(run.source.line, run.request_per_s) for run in runs] == [(1, 0.2678), (cut.count("\n") + 3, 0.2678)]
