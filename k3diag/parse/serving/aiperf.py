"""AIPerf `profile_export_aiperf.json` and GenAI-Perf `profile_export*_genai_perf.json`.

Both write one object per metric, `{"unit": "ms", "avg": ..., "p50": ..., "p90": ..., "p99": ...}`
(GenAI-Perf and AIPerf >= 0.2 at the top level, early AIPerf under `"records"`), plus `input_config`:
GenAI-Perf keeps its flat CLI options there (`model` list, `concurrency`, `request_rate`,
`synthetic_input_tokens_mean`, `output_tokens_mean`); AIPerf nests them (`models.items[].name` or
`endpoint.model_names`, `loadgen.concurrency`, `phases[].concurrency`, `runtime.concurrency`).
Their `inter_token_latency` is per request (latency - TTFT) / (tokens - 1): what vLLM calls TPOT.
"""

from __future__ import annotations

import re
from typing import Any

from k3diag.model.serving import Latency, ServingRun
from k3diag.parse.serving.common import ServingResult, find_docs, finite, first, integer, num, source_ref

FORMAT = "aiperf"
_METRIC_RE = re.compile(r'"(request_throughput|time_to_first_token|request_latency|output_token_throughput)"\s*:\s*\{')
_UNIT_SCALE = {"ms": 1.0, "msec": 1.0, "s": 1000.0, "sec": 1000.0, "seconds": 1000.0, "us": 0.001, "ns": 1e-6}


def sniff(text: str) -> float:
    if not _METRIC_RE.search(text):
        return 0.0
    return 0.9 if '"unit"' in text and '"avg"' in text else 0.5


def parse(section, input_name: str) -> ServingResult:
    result = ServingResult()
    docs, warnings = find_docs(section.text, section.first_line)
    result.warnings.extend(warnings)
    for doc in docs:
        metrics = _metrics(doc.value)
        if not metrics:
            continue
        result.runs.append(run_from_doc(doc.value, metrics, input_name, source_ref(input_name, doc)))
    if not result.runs:
        result.warnings.append(f"{input_name}: no AIPerf/GenAI-Perf metrics object was found")
    return result


def _metrics(doc: dict) -> dict[str, dict]:
    table = doc.get("records") if isinstance(doc.get("records"), dict) else doc
    out = {str(k): v for k, v in table.items() if isinstance(v, dict) and ("avg" in v or "p50" in v)}
    return out if any(k in out for k in ("request_throughput", "time_to_first_token", "request_latency",
                                         "output_token_throughput")) else {}


def _latency(metric: dict | None) -> Latency:
    if not isinstance(metric, dict):
        return Latency()
    unit = str(metric.get("unit") or "ms").strip().lower()
    scale = _UNIT_SCALE.get(unit, 1.0)

    def pick(key: str) -> float | None:
        value = finite(metric.get(key))
        return value * scale if value is not None else None

    return Latency(mean=pick("avg"), p50=pick("p50"), p90=pick("p90"), p95=pick("p95"), p99=pick("p99"))


def _avg(metric: Any) -> float | None:
    return finite(metric.get("avg")) if isinstance(metric, dict) else None


def _config_value(config: dict, *paths: tuple[str, ...]) -> Any:
    for path in paths:
        node: Any = config
        for part in path:
            if isinstance(node, list):
                node = next((item.get(part) for item in node if isinstance(item, dict) and item.get(part) is not None), None)
            elif isinstance(node, dict):
                node = node.get(part)
            else:
                node = None
            if node is None:
                break
        if node is not None:
            return node
    return None


def run_from_doc(doc: dict, metrics: dict[str, dict], input_name: str, ref) -> ServingRun:
    run = ServingRun(tool=FORMAT, input=input_name, source=ref)
    config = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
    model = _config_value(config, ("model",), ("models", "items", "name"), ("endpoint", "model_names"),
                          ("formatted_model_name",))
    if isinstance(model, list):
        model = model[0] if model else None
    run.model = str(model) if model is not None else None
    concurrency = _config_value(config, ("concurrency",), ("loadgen", "concurrency"), ("phases", "concurrency"),
                                ("runtime", "concurrency"))
    run.concurrency = finite(concurrency)
    run.request_rate = num(_config_value(config, ("request_rate",), ("loadgen", "request_rate"),
                                         ("phases", "request_rate")))
    run.requests = integer(_avg(metrics.get("request_count")))
    run.input_len = _avg(metrics.get("input_sequence_length"))
    run.output_len = _avg(metrics.get("output_sequence_length"))
    duration = metrics.get("benchmark_duration")
    if isinstance(duration, dict):
        value = _avg(duration)
        unit = str(duration.get("unit") or "sec").lower()
        run.duration_s = value / 1000.0 if value is not None and unit.startswith("ms") else value
    run.request_per_s = _avg(metrics.get("request_throughput"))
    run.output_tok_per_s = _avg(metrics.get("output_token_throughput"))
    run.total_tok_per_s = _avg(metrics.get("total_token_throughput"))
    run.ttft = _latency(metrics.get("time_to_first_token"))
    run.itl = _latency(metrics.get("inter_token_latency"))
    if not run.itl.empty():
        run.tpot = _latency(metrics.get("inter_token_latency"))
        run.tpot.note = "inter_token_latency: (request latency - TTFT) / (output tokens - 1) per request"
    run.e2el = _latency(metrics.get("request_latency"))
    version = first(doc, "aiperf_version", "genai_perf_version")
    if version is not None:
        run.metadata["version"] = str(version)
    if config.get("subcommand") == "profile" or "synthetic_input_tokens_mean" in config:
        run.metadata["tool"] = "genai-perf"
    elif "aiperf_version" in doc or "phases" in config or "loadgen" in config:
        run.metadata["tool"] = "aiperf"
    if run.ttft.empty() and not (config.get("streaming") is True):
        run.warnings.append(f"{input_name}: no time_to_first_token: the run was not streaming, so TTFT and TPOT "
                            "were not measured")
    return run
