"""SGLang `python -m sglang.bench_serving --output-file X.jsonl`: one JSON object per line, appended.

Keys as `sglang/bench_serving.py` writes them: `backend`, `dataset_name`, `request_rate` (Python writes
`Infinity` for the default), `max_concurrency`, `random_input_len`/`random_output_len`, `duration`,
`completed`, `total_input_tokens`, `total_output_tokens`, `total_output_tokens_retokenized`,
`request_throughput`, `input_throughput`, `output_throughput`, `total_throughput` (newer),
`mean/median/std/p90/p95/p99_e2e_latency_ms`, the same for `ttft`, `tpot`, `itl` (which percentiles
depends on the version), `concurrency` (the measured average), `accept_length`, `tag` (newer) and,
in newer versions, `server_info` (the server's `/get_server_info`: `tp_size`, `dp_size`, `pp_size`,
`model_path`; under `decode[0]` for a prefill/decode-disaggregated server).
"""

from __future__ import annotations

import re

from k3diag.model.serving import ServingRun
from k3diag.parse.serving.common import (
    ServingResult,
    check_layout,
    fill_benchmark_serving_load,
    find_docs,
    finite,
    first,
    flat_latency,
    integer,
    layout_from_mapping,
    source_ref,
)

FORMAT = "sglang-bench-serving"
_MARK_RE = re.compile(r'"(total_output_tokens_retokenized|mean_e2e_latency_ms|median_e2e_latency_ms)"')


def sniff(text: str) -> float:
    if not _MARK_RE.search(text):
        return 0.0
    return 0.9 if '"output_throughput"' in text or '"request_throughput"' in text else 0.6


def parse(section, input_name: str) -> ServingResult:
    result = ServingResult()
    docs, warnings = find_docs(section.text, section.first_line)
    result.warnings.extend(warnings)
    for doc in docs:
        value = doc.value
        if not any(key in value for key in ("output_throughput", "mean_e2e_latency_ms", "request_throughput")):
            continue
        run = run_from_doc(value, input_name, source_ref(input_name, doc))
        if doc.truncated:
            run.warnings.append(f"{input_name}:{doc.line}: the result was cut off; fields after the cut are missing")
        result.runs.append(run)
    if not result.runs:
        result.warnings.append(f"{input_name}: no SGLang bench_serving result object was found")
    return result


def _server_info(doc: dict) -> dict:
    info = doc.get("server_info")
    if not isinstance(info, dict):
        return {}
    decode = info.get("decode")
    if isinstance(decode, list) and decode and isinstance(decode[0], dict):
        return decode[0]
    return info


def run_from_doc(doc: dict, input_name: str, ref) -> ServingRun:
    run = ServingRun(tool=FORMAT, input=input_name, source=ref)
    info = _server_info(doc)
    model = first(doc, "model_id", "model", "served_model_name") or first(info, "served_model_name", "model_path")
    run.model = str(model) if model is not None else None
    completed = integer(doc.get("completed"))
    run.requests = completed
    total_in, total_out = fill_benchmark_serving_load(run, doc, completed)
    run.total_tok_per_s = finite(doc.get("total_throughput"))
    input_tps = finite(doc.get("input_throughput"))
    if run.total_tok_per_s is None and input_tps is not None and run.output_tok_per_s is not None:
        run.total_tok_per_s = input_tps + run.output_tok_per_s
    run.ttft = flat_latency(doc, "ttft")
    run.tpot = flat_latency(doc, "tpot")
    run.itl = flat_latency(doc, "itl")
    run.e2el = flat_latency(doc, "e2el", names=("e2e_latency", "e2el"))
    tag = doc.get("tag")
    if isinstance(tag, str) and tag:
        run.metadata["tag"] = tag
    for key in ("backend", "dataset_name", "random_input_len", "random_output_len", "accept_length"):
        if doc.get(key) is not None:
            run.metadata[key] = str(doc[key])
    layout = layout_from_mapping(info, "file", "server_info", run.warnings) if info else None
    if layout is None and isinstance(tag, str):
        # People put the layout in --tag when the server predates server_info.
        layout = layout_from_mapping(_tag_pairs(tag), "file", "--tag", run.warnings)
    if layout is not None and layout.dp and info.get("enable_dp_attention") is True:
        # DP attention (`--tp 8 --dp 8 --enable-dp-attention`) runs attention data-parallel inside the TP
        # group: tp_size GPUs in all, not tp_size x dp_size (docs.sglang.io, "DP, DPA and sgl-router").
        layout.dp = None
        layout.detail = f"{layout.detail} enable_dp_attention=true (DP attention inside the TP group)"
    if layout is not None:
        run.layout = layout
    check_layout(run)
    return run


def _tag_pairs(tag: str) -> dict:
    return dict(re.findall(r"([A-Za-z_]+)=([\w,.-]+)", tag))
