"""`vllm bench serve --save-result` JSON, `--append-result` JSON lines, and the older
`benchmarks/benchmark_serving.py` results.

Keys as `vllm/benchmarks/serve.py` writes them: `model_id`, `num_prompts`, `request_rate` (a number or
"inf"), `max_concurrency`, `completed`, `failed` (absent before 2025), `total_input_tokens`,
`total_output_tokens`, `request_throughput`, `request_goodput` (`request_goodput:` with a colon in
benchmark_serving.py), `output_throughput`, `total_token_throughput`, and for each of ttft, tpot,
itl, e2el (only those named in `--percentile-metrics`, default ttft,tpot,itl) `mean_<m>_ms`,
`median_<m>_ms`, `std_<m>_ms` and `p<P>_<m>_ms` for each `--metric-percentiles` (default 99 only).
`--metadata KEY=VALUE` pairs land at the top level as strings: `tp=4 gpus=0,1,2,3` says the layout.
`--save-detailed` keeps per-request `ttfts`, `itls`, `latencies` (seconds); percentiles the summary
lacks are computed from them and marked so.
"""

from __future__ import annotations

import re

from k3diag.model.serving import ServingRun
from k3diag.parse.serving.common import (
    ServingResult,
    check_layout,
    fill_benchmark_serving_load,
    fill_missing,
    find_docs,
    finite,
    first,
    flat_latency,
    integer,
    latency_from_values,
    layout_from_mapping,
    num,
    source_ref,
)

FORMAT = "vllm-bench-serve"
_RESULT_KEY_RE = re.compile(r'"(request_throughput|output_throughput)"\s*:\s*[-\d.eEnNI"]')
_VLLM_KEY_RE = re.compile(r'"(model_id|endpoint_type|request_goodput:?|mean_tpot_ms|mean_e2el_ms|total_token_throughput|burstiness)"')
_SGLANG_RE = re.compile(r'"(total_output_tokens_retokenized|mean_e2e_latency_ms|accept_length)"')

# Keys the tool itself writes; anything else at the top level with a string value came from --metadata.
_OWN_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "request_goodput:", "output_throughput", "total_token_throughput",
    "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts",
    "errors", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx", "best_of", "use_beam_search",
    "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "benchmark_start_time_unix",
    "benchmark_end_time_unix", "infer_input_lens", "input_texts",
}


def sniff(text: str) -> float:
    if _SGLANG_RE.search(text):
        return 0.0
    if not _RESULT_KEY_RE.search(text):
        return 0.0
    return 0.9 if _VLLM_KEY_RE.search(text) else 0.6


def parse(section, input_name: str) -> ServingResult:
    result = ServingResult()
    docs, warnings = find_docs(section.text, section.first_line)
    result.warnings.extend(warnings)
    for doc in docs:
        value = doc.value
        if "request_throughput" not in value and "output_throughput" not in value:
            continue
        run = run_from_doc(value, input_name, source_ref(input_name, doc))
        if doc.truncated:
            run.warnings.append(f"{input_name}:{doc.line}: the result was cut off; fields after the cut are missing")
        result.runs.append(run)
    if not result.runs:
        result.warnings.append(f"{input_name}: no vllm bench serve result object was found")
    return result


def run_from_doc(doc: dict, input_name: str, ref) -> ServingRun:
    completed = integer(doc.get("completed"))
    run = ServingRun(tool=FORMAT, input=input_name, source=ref)
    run.model = _text(first(doc, "model_id", "model"))
    run.date = _text(doc.get("date"))
    run.requests = completed
    run.failed = integer(doc.get("failed"))
    if run.failed is None and completed is not None and integer(doc.get("num_prompts")) is not None:
        # benchmark_serving.py had no "failed": the prompts that did not complete did fail.
        run.failed = max(integer(doc.get("num_prompts")) - completed, 0)
    total_in, total_out = fill_benchmark_serving_load(run, doc, completed)
    run.total_tok_per_s = finite(doc.get("total_token_throughput"))
    if run.total_tok_per_s is None and run.duration_s and total_in is not None and total_out is not None:
        run.total_tok_per_s = (total_in + total_out) / run.duration_s
    for metric in ("ttft", "tpot", "itl", "e2el"):
        setattr(run, metric, flat_latency(doc, metric))
    _fill_from_details(run, doc)
    run.metadata = {str(k): str(v) for k, v in doc.items()
                    if k not in _OWN_KEYS and isinstance(v, (str, int, float)) and not isinstance(v, bool)
                    and not re.match(r"^(mean|median|std|p\d+(\.\d+)?)_\w+_ms$", str(k))}
    layout = layout_from_mapping(run.metadata, "file", "--metadata", run.warnings)
    if layout is not None:
        run.layout = layout
    check_layout(run)
    return run


def _fill_from_details(run: ServingRun, doc: dict) -> None:
    """--save-detailed keeps per-request values in seconds; fill percentiles the summary lacks."""
    note = "computed from the per-request values in the file"
    ttfts = doc.get("ttfts")
    if isinstance(ttfts, list) and ttfts:
        fill_missing(run.ttft, latency_from_values(ttfts, 1000.0, note))
    latencies = doc.get("latencies")
    if isinstance(latencies, list) and latencies:
        fill_missing(run.e2el, latency_from_values(latencies, 1000.0, note))
    itls = doc.get("itls")
    if isinstance(itls, list) and itls and all(isinstance(x, list) for x in itls[:50]):
        flat = [v for row in itls if isinstance(row, list) for v in row]
        fill_missing(run.itl, latency_from_values(flat, 1000.0, note))
        output_lens = doc.get("output_lens")
        if isinstance(ttfts, list) and isinstance(latencies, list) and isinstance(output_lens, list):
            tpots = []
            for ttft, latency, out in zip(ttfts, latencies, output_lens):
                t, lat, n = num(ttft), num(latency), integer(out)
                if t is not None and lat is not None and n is not None and n > 1:
                    tpots.append((lat - t) / (n - 1))
            fill_missing(run.tpot, latency_from_values(tpots, 1000.0, note))


def _text(value) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None
