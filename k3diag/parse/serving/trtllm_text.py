"""The report `trtllm-bench ... throughput` prints when it finishes (what people paste; `--report_json`
writes the same numbers as JSON, read by `trtllm_bench`).

    ===========================================================
    = PYTORCH BACKEND                      (`= ENGINE DETAILS` for a TensorRT engine)
    ===========================================================
    Model:                  meta-llama/Llama-3.1-8B-Instruct
    TensorRT-LLM Version:   0.21.0rc0
    = REQUEST DETAILS        Number of requests, Number of concurrent requests (the average in flight),
                             Average Input/Output Length (tokens)
    = WORLD + RUNTIME INFORMATION   TP Size, PP Size, EP Size, Max Runtime Batch Size, Max Runtime Tokens
    = PERFORMANCE OVERVIEW   Request Throughput (req/sec), Total Output Throughput (tokens/sec), Total Token
                             Throughput (tokens/sec), Total Latency (ms), Average request latency (ms),
                             Per GPU Output Throughput (tps/gpu), Average time-to-first-token [TTFT] (ms), ...
    -- Per-Request Time-per-Output-Token [TPOT] Breakdown (ms)     [TPOT] P50    : 7.6079 (and P90, P95,
                             P99, MINIMUM, MAXIMUM, AVERAGE); the same for [TTFT] and [Latency]

Labels vary between versions (`Per GPU Output Throughput (tokens/sec/gpu)`, a tab before the value); a
paste may hold the overview alone. Each report becomes the dict `--report_json` writes, so both paths
agree. Pure functions.
"""

from __future__ import annotations

import re

from k3diag.model.source import SourceRef
from k3diag.parse.serving.common import ServingResult, num

# `= PERFORMANCE OVERVIEW` between rules of `=`, and one of its throughput lines
_OVERVIEW_RE = re.compile(r"(?m)^[^\S\n]*=\s*PERFORMANCE OVERVIEW\s*$")
_THROUGHPUT_RE = re.compile(r"(?m)^[^\S\n]*(?:Request|Total Output) Throughput \((?:req|tokens)/sec\):")
_TITLE_RE = re.compile(r"^\s*=\s*(?P<title>[A-Z](?:[A-Z0-9 +/&()-]*[A-Z0-9+/&()-])?)\s*$")
_RULE_RE = re.compile(r"^\s*={20,}\s*$")
_VALUE_RE = re.compile(r"^\s*(?P<label>[A-Za-z][^:]{1,80}?):\s+(?P<value>\S+)")
_BREAKDOWN_RE = re.compile(
    r"^\s*\[(?P<metric>TPOT|TTFT|Latency)\]\s+(?P<stat>P\d+|MINIMUM|MAXIMUM|AVERAGE)\s*:\s*(?P<value>\S+)")
# label (lower case, the unit's spelling aside) -> (table, key) of the JSON report
_FIELDS = {
    "model": ("engine", "model"),
    "model path": ("engine", "model_path"),
    "tensorrt-llm version": ("engine", "version"),
    "dtype": ("engine", "dtype"),
    "number of requests": ("request_info", "num_requests"),
    "number of concurrent requests": ("request_info", "avg_num_concurrent_requests"),
    "average input length (tokens)": ("request_info", "avg_input_length"),
    "average output length (tokens)": ("request_info", "avg_output_length"),
    "tp size": ("world_info", "tp_size"),
    "pp size": ("world_info", "pp_size"),
    "ep size": ("world_info", "ep_size"),
    "max runtime batch size": ("world_info", "max_batch_size"),
    "max runtime tokens": ("world_info", "max_num_tokens"),
    "request throughput (req/sec)": ("performance", "request_throughput_req_s"),
    "total output throughput (tokens/sec)": ("performance", "system_output_throughput_tok_s"),
    "total token throughput (tokens/sec)": ("performance", "system_total_throughput_tok_s"),
    "total latency (ms)": ("performance", "total_latency_ms"),
    "average request latency (ms)": ("performance", "avg_request_latency_ms"),
    "per gpu output throughput (tps/gpu)": ("performance", "output_throughput_per_gpu_tok_s"),
    "per gpu output throughput (tokens/sec/gpu)": ("performance", "output_throughput_per_gpu_tok_s"),
    "average time-to-first-token [ttft] (ms)": ("streaming_metrics", "avg_ttft_ms"),
    "average time-per-output-token [tpot] (ms)": ("streaming_metrics", "avg_tpot_ms"),
}
_TEXT_FIELDS = {"model", "model_path", "version", "dtype"}
_BREAKDOWN_TABLES = {"TPOT": ("streaming_metrics", "tpot_percentiles"),
                     "TTFT": ("streaming_metrics", "ttft_percentiles"),
                     "Latency": ("performance", "request_latency_percentiles_ms")}
_STATS = {"MINIMUM": "minimum", "MAXIMUM": "maximum", "AVERAGE": "average"}


def sniff(text: str) -> float:
    """How surely `text` is a printed trtllm-bench report: the trtllm-bench format's hint names
    `PERFORMANCE OVERVIEW`, `trtllm_bench.sniff` returns this score and `trtllm_bench.parse` hands such a
    text here."""
    if not _OVERVIEW_RE.search(text):
        return 0.0
    return 0.95 if _THROUGHPUT_RE.search(text) else 0.5


def parse(section, input_name: str) -> ServingResult:
    from k3diag.parse.serving import trtllm_bench

    result = ServingResult()
    reports: list[tuple[dict, int, str]] = []  # (doc, first line, its text)
    doc: dict = {}
    start: tuple[int, str] | None = None
    for offset, line in enumerate(section.text.split("\n")):
        line_no = section.first_line + offset
        title = _TITLE_RE.match(line)
        if title and not _RULE_RE.match(line):
            name = title.group("title")
            engine_title = "BACKEND" in name or "ENGINE" in name
            # a new report: its engine section, or a second overview, after an overview was read
            if "performance" in doc and (engine_title or name == "PERFORMANCE OVERVIEW"):
                # a report whose values came before any title (a paste that began below its banner) starts
                # where the section does, as at the end
                reports.append((doc, *(start or (section.first_line, ""))))
                doc, start = {}, None
            if start is None and (engine_title or name in ("REQUEST DETAILS", "WORLD + RUNTIME INFORMATION",
                                                           "PERFORMANCE OVERVIEW")):
                start = (line_no, line.strip())
            if engine_title and "BACKEND" in name:
                doc.setdefault("engine", {})["backend"] = name.replace("BACKEND", "").strip().lower() or None
            if name == "PERFORMANCE OVERVIEW":
                doc.setdefault("performance", {})
            continue
        breakdown = _BREAKDOWN_RE.match(line)
        if breakdown:
            table, key = _BREAKDOWN_TABLES[breakdown.group("metric")]
            stat = _STATS.get(breakdown.group("stat"), breakdown.group("stat").lower())
            value = num(breakdown.group("value"))
            if value is not None:
                doc.setdefault(table, {}).setdefault(key, {})[stat] = value
            continue
        found = _VALUE_RE.match(line)
        if found is None:
            continue
        field = _FIELDS.get(re.sub(r"\s+", " ", found.group("label").strip().lower()))
        if field is None:
            continue
        table, key = field
        raw = found.group("value")
        if key in _TEXT_FIELDS:
            if raw != "None":
                doc.setdefault(table, {})[key] = raw
            continue
        value = num(raw)
        if value is not None:
            doc.setdefault(table, {})[key] = int(value) if table == "world_info" and value.is_integer() else value
    if "performance" in doc:
        reports.append((doc, *(start or (section.first_line, ""))))
    for report, line_no, text in reports:
        run = trtllm_bench.run_from_doc(report, input_name, SourceRef(input_name, line_no, text))
        if not report.get("world_info"):
            run.warnings.append(f"{input_name}:{line_no}: the report has no `WORLD + RUNTIME INFORMATION` part, so "
                                f"its TP size is not read{_gpus_said(report)} (paste the whole report, or use "
                                "--report_json)")
        result.runs.append(run)
    if not result.runs:
        result.warnings.append(f"{input_name}: no trtllm-bench `PERFORMANCE OVERVIEW` with its numbers was found")
    return result


def _gpus_said(report: dict) -> str:
    """What the report's own per-GPU figure says of the GPU count (not a layout: TP, PP and EP are not in it)."""
    perf = report.get("performance", {})
    total, per_gpu = perf.get("system_output_throughput_tok_s"), perf.get("output_throughput_per_gpu_tok_s")
    if not total or not per_gpu:
        return ""
    gpus = total / per_gpu
    if round(gpus) < 1 or abs(gpus - round(gpus)) > 0.01:
        return ""
    return (f"; its per-GPU output throughput ({per_gpu} of {total} tok/s) says it ran on {round(gpus)} "
            f"GPU{'s' if round(gpus) > 1 else ''}")
