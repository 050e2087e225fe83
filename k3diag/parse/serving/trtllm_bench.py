"""`trtllm-bench ... throughput --report_json FILE`.

Layout as `tensorrt_llm/bench/dataclasses/reporting.py` (`get_statistics_dict`) writes it: `engine`
{model, model_path, backend, version, dtype}, `world_info` {tp_size, pp_size, ep_size, world_size,
max_batch_size, max_num_tokens, ...}, `request_info` {num_requests, avg_num_concurrent_requests,
avg_input_length, avg_output_length}, `performance` {total_latency_ms, avg_request_latency_ms,
request_throughput_req_s, system_output_throughput_tok_s, system_total_throughput_tok_s,
output_throughput_per_user_tok_s, output_throughput_per_gpu_tok_s, request_latency_percentiles_ms},
and with `--streaming` `streaming_metrics` {avg_ttft_ms, avg_tpot_ms, ttft_percentiles,
tpot_percentiles, ...}. Percentile tables hold p50/p90/p95/p99 and minimum/maximum/average.
"""

from __future__ import annotations

import re

from k3diag.model.serving import Latency, RunLayout, ServingRun
from k3diag.parse.serving.common import ServingResult, find_docs, finite, first, integer, parallel_size, source_ref

FORMAT = "trtllm-bench"
_MARK_RE = re.compile(r'"world_info"\s*:')


def sniff(text: str) -> float:
    # The JSON report (`"world_info"`), or the report trtllm-bench prints (`PERFORMANCE OVERVIEW`), which
    # `trtllm_text` scores and `parse` hands there: the two halves of the format's hint in the registry
    if not _MARK_RE.search(text):
        from k3diag.parse.serving import trtllm_text

        return trtllm_text.sniff(text)
    return 0.95 if re.search(r'"(request_throughput_req_s|system_output_throughput_tok_s|performance)"', text) else 0.6


def parse(section, input_name: str) -> ServingResult:
    from k3diag.parse.serving import trtllm_text

    if trtllm_text.sniff(section.text) > 0 and not _MARK_RE.search(section.text):
        return trtllm_text.parse(section, input_name)
    result = ServingResult()
    docs, warnings = find_docs(section.text, section.first_line)
    result.warnings.extend(warnings)
    for doc in docs:
        if not isinstance(doc.value.get("world_info"), dict) and not isinstance(doc.value.get("performance"), dict):
            continue
        run = run_from_doc(doc.value, input_name, source_ref(input_name, doc))
        result.runs.append(run)
    if not result.runs:
        result.warnings.append(f"{input_name}: no trtllm-bench report (world_info, performance) was found")
    return result


def _table(doc: dict, key: str) -> dict:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _percentiles(table: dict, mean: float | None = None) -> Latency:
    return Latency(
        mean=finite(first(table, "average", "avg", "mean")) if mean is None else mean,
        p50=finite(first(table, "p50", "median")),
        p90=finite(table.get("p90")),
        p95=finite(table.get("p95")),
        p99=finite(table.get("p99")),
    )


def run_from_doc(doc: dict, input_name: str, ref) -> ServingRun:
    run = ServingRun(tool=FORMAT, input=input_name, source=ref)
    engine, world = _table(doc, "engine"), _table(doc, "world_info")
    requests, perf = _table(doc, "request_info"), _table(doc, "performance")
    streaming = _table(doc, "streaming_metrics")
    model = first(engine, "model", "model_path")
    run.model = str(model) if model is not None else None
    run.requests = integer(requests.get("num_requests"))
    run.input_len = finite(requests.get("avg_input_length"))
    run.output_len = finite(requests.get("avg_output_length"))
    concurrency = finite(requests.get("avg_num_concurrent_requests"))
    if concurrency is not None:
        run.concurrency = concurrency
        run.concurrency_is_average = True
        run.warnings.append(
            f"{input_name}: trtllm-bench records the average number of requests in flight "
            f"({concurrency:g}), not the --concurrency limit; runs are matched on that average"
        )
    total_ms = finite(perf.get("total_latency_ms"))
    run.duration_s = total_ms / 1000.0 if total_ms is not None else None
    run.request_per_s = finite(perf.get("request_throughput_req_s"))
    run.output_tok_per_s = finite(perf.get("system_output_throughput_tok_s"))
    run.total_tok_per_s = finite(perf.get("system_total_throughput_tok_s"))
    run.e2el = _percentiles(_table(perf, "request_latency_percentiles_ms"), finite(perf.get("avg_request_latency_ms")))
    if streaming:
        run.ttft = _percentiles(_table(streaming, "ttft_percentiles"), finite(streaming.get("avg_ttft_ms")))
        run.tpot = _percentiles(_table(streaming, "tpot_percentiles"), finite(streaming.get("avg_tpot_ms")))
    tp, pp, ep, world_size = (parallel_size(world.get(key), f"world_info {key}", run.warnings)
                              for key in ("tp_size", "pp_size", "ep_size", "world_size"))
    if tp is not None or world_size is not None:
        dp = None
        if world_size and tp and world_size > tp * (pp or 1) and world_size % (tp * (pp or 1)) == 0:
            dp = world_size // (tp * (pp or 1))
        used = " ".join(f"{k}={world.get(k)}" for k in ("tp_size", "pp_size", "ep_size", "world_size") if k in world)
        run.layout = RunLayout(tp=tp or world_size, pp=pp, dp=dp, ep=ep, source="file", detail=f"world_info {used}")
    for key in ("max_batch_size", "max_num_tokens"):
        if world.get(key) is not None:
            run.metadata[key] = str(world[key])
    if engine.get("backend"):
        run.metadata["backend"] = str(engine["backend"])
    per_gpu = finite(perf.get("output_throughput_per_gpu_tok_s"))
    if per_gpu is not None:
        run.metadata["output_throughput_per_gpu_tok_s"] = f"{per_gpu:g}"
    return run
