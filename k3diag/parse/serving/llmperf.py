"""LLMPerf (`token_benchmark_ray.py --results-dir`) `<model>_<in>_<out>_summary.json`.

Keys as `token_benchmark_ray.py` flattens them: `model`, `mean_input_tokens`/`mean_output_tokens`
(what was asked), `num_concurrent_requests`, and `results_<metric>_<stat>` for `ttft_s`,
`inter_token_latency_s`, `end_to_end_latency_s`, `request_output_throughput_token_per_s`,
`number_input_tokens`, `number_output_tokens` with stats `quantiles_p25..p99`, `mean`, `min`, `max`,
`stddev`, plus `results_num_completed_requests`, `results_number_errors`,
`results_mean_output_throughput_token_per_s` (all requests together) and
`results_num_completed_requests_per_min`. Latencies are in seconds.
"""

from __future__ import annotations

import re

from k3diag.model.serving import Latency, ServingRun
from k3diag.parse.serving.common import ServingResult, find_docs, finite, integer, layout_from_mapping, source_ref

FORMAT = "llmperf"
_MARK_RE = re.compile(r'"results_(ttft_s|inter_token_latency_s|end_to_end_latency_s|mean_output_throughput)')


def sniff(text: str) -> float:
    return 0.95 if _MARK_RE.search(text) else 0.0


def parse(section, input_name: str) -> ServingResult:
    result = ServingResult()
    docs, warnings = find_docs(section.text, section.first_line)
    result.warnings.extend(warnings)
    for doc in docs:
        if not any(str(k).startswith("results_") for k in doc.value):
            continue
        result.runs.append(run_from_doc(doc.value, input_name, source_ref(input_name, doc)))
    if not result.runs:
        result.warnings.append(f"{input_name}: no LLMPerf summary was found")
    return result


def _latency(doc: dict, name: str) -> Latency:
    def pick(key: str) -> float | None:
        value = finite(doc.get(f"results_{name}_{key}"))
        return value * 1000.0 if value is not None else None

    return Latency(mean=pick("mean"), p50=pick("quantiles_p50"), p90=pick("quantiles_p90"),
                   p95=pick("quantiles_p95"), p99=pick("quantiles_p99"))


def run_from_doc(doc: dict, input_name: str, ref) -> ServingRun:
    run = ServingRun(tool=FORMAT, input=input_name, source=ref)
    run.model = str(doc["model"]) if doc.get("model") is not None else None
    run.concurrency = finite(doc.get("num_concurrent_requests"))
    run.requests = integer(doc.get("results_num_completed_requests"))
    run.failed = integer(doc.get("results_number_errors"))
    run.input_len = finite(doc.get("results_number_input_tokens_mean")) or finite(doc.get("mean_input_tokens"))
    run.output_len = finite(doc.get("results_number_output_tokens_mean")) or finite(doc.get("mean_output_tokens"))
    run.output_tok_per_s = finite(doc.get("results_mean_output_throughput_token_per_s"))
    per_min = finite(doc.get("results_num_completed_requests_per_min"))
    run.request_per_s = per_min / 60.0 if per_min is not None else None
    run.ttft = _latency(doc, "ttft_s")
    run.tpot = _latency(doc, "inter_token_latency_s")
    if not run.tpot.empty():
        run.tpot.note = "LLMPerf inter_token_latency: per request, generation time over output tokens"
    run.itl = _latency(doc, "inter_token_latency_s")
    run.e2el = _latency(doc, "end_to_end_latency_s")
    for key in ("mean_input_tokens", "mean_output_tokens", "version", "name"):
        if doc.get(key) is not None:
            run.metadata[key] = str(doc[key])
    layout = layout_from_mapping({k: v for k, v in doc.items() if not str(k).startswith("results_")}, "file", "summary", run.warnings)
    if layout is not None:
        run.layout = layout
    return run
