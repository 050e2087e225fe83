"""The result block `vllm bench serve` (and `benchmarks/benchmark_serving.py`) and SGLang's
`bench_serving` print to the terminal: what people paste far more often than the JSON file.

    ============ Serving Benchmark Result ============
    Successful requests:                     1000
    Failed requests:                         0            (vLLM since 2025-10)
    Maximum request concurrency:             64           (only with --max-concurrency)
    Benchmark duration (s):                  30.85
    Total input tokens:                      229711
    Total generated tokens:                  203068
    Request throughput (req/s):              32.42
    Output token throughput (tok/s):         6582.87
    Peak output token throughput (tok/s):    14046.00     (vLLM since 2025-08)
    Total Token throughput (tok/s):          14029.44
    ---------------Time to First Token----------------
    Mean TTFT (ms):                          9626.13
    Median TTFT (ms):                        9459.70
    P99 TTFT (ms):                           12666.73
    ... TPOT, ITL, E2EL (the --percentile-metrics; P<n> for each --metric-percentiles)
    ==================================================

Each label is printed as `"{:<40} {:<10}"`, so values carry trailing spaces. SGLang's block starts with
`Backend:`, `Traffic request rate:`, `Max request concurrency:` and has `Total generated tokens
(retokenized):`, `Concurrency:` and an `End-to-End Latency` group (`Mean E2E Latency (ms):`). The block
holds no model name: it is taken from the command line or `Namespace(... model='...')` above it when the
paste has one. Each block becomes the dict the JSON reader of its tool reads, so both paths agree.
"""

from __future__ import annotations

import re

from k3diag.model.source import SourceRef
from k3diag.parse.serving import sglang_bench, vllm_bench
from k3diag.parse.serving.common import ServingResult, num

FORMAT = "serving-result-text"
# the `=` runs around the title; a paste rendered as markdown (GitHub turns a line of `=` into a heading
# underline) keeps only ` Serving Benchmark Result ` and loses the closing line
# No two repeats that can take the same blank meet (`\s*=*\s*` is quadratic in a line of blanks): blanks after
# the bar only when there is a bar, and a closing bar is optional as a whole, its blanks included. `blank` is
# `\s` for one line, `[^\S\n]` for a whole text searched line by line (a `\s` there crosses lines, and a run of
# blank lines became cubic: 2,000 took 5 s).
def _banner(blank: str) -> str:
    return rf"^{blank}*(?P<bar>=*)(?:(?<==){blank}*)?Serving Benchmark Result{blank}*(?:=+{blank}*)?$"


_BANNER_RE = re.compile(_banner(r"\s"))
_END_RE = re.compile(r"^\s*={20,}\s*$")
_LINE_RE = re.compile(r"^\s*(?P<label>[A-Za-z][^:]{1,60}?):\s+(?P<value>\S+)")
_LATENCY_RE = re.compile(
    r"^(?P<stat>Mean|Median|Std|P(?P<p>\d+(?:\.\d+)?)) (?P<metric>TTFT|TPOT|ITL|E2EL|E2E Latency) \(ms\)$")
_MODEL_RE = re.compile(r"(?:--model(?:-path)?[= ]+|\bmodel=')(?P<model>[^\s',)]+)")
# the load, when the command line or the `Namespace(...)` dump above the block says it (never a default)
_LOAD_ARG_RES = (
    ("max_concurrency", re.compile(r"(?:--max-concurrency[= ]+|\bmax_concurrency=)(?P<v>\d+)\b")),
    ("request_rate", re.compile(r"(?:--request-rate[= ]+|\brequest_rate=)(?P<v>inf|\d+(?:\.\d+)?)\b")),
    ("num_prompts", re.compile(r"(?:--num-prompts[= ]+|\bnum_prompts=)(?P<v>\d+)\b")),
)
# label as printed -> the key the tool's JSON result uses for it
_LABELS = {
    "successful requests": "completed",
    "failed requests": "failed",
    "maximum request concurrency": "max_concurrency",
    "max request concurrency": "max_concurrency",
    "traffic request rate": "request_rate",
    "request rate configured (rps)": "request_rate",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_token_throughput",
    "concurrency": "concurrency",
    "backend": "backend",
    # speculative decoding: vLLM's `Speculative Decoding` group (the keys its --save-result JSON uses),
    # SGLang's `Accept length:` line (its JSON's `accept_length`)
    "acceptance rate (%)": "spec_decode_acceptance_rate",
    "acceptance length": "spec_decode_acceptance_length",
    "drafts": "spec_decode_num_drafts",
    "draft tokens": "spec_decode_draft_tokens",
    "accepted tokens": "spec_decode_accepted_tokens",
    "accept length": "accept_length",
}
_SGLANG_ONLY = {"total_output_tokens_retokenized", "concurrency", "input_throughput", "accept_length"}


def sniff(text: str) -> float:
    head = text[:400_000]
    if not re.search(_banner(r"[^\S\n]"), head, re.M):
        return 0.0
    return 0.95 if re.search(r"(?m)^[^\S\n]*(?:Successful requests|Request throughput \(req/s\)):", head) else 0.6


def parse(section, input_name: str, *, engine_lines: bool = True) -> ServingResult:
    """`engine_lines`: also read the vLLM server log pasted around the blocks (`vllm_log`, which reads the
    blocks inside a server log with `engine_lines=False`), so neither part of such a paste is lost."""
    result = ServingResult()
    lines = section.text.split("\n")
    model: str | None = None
    load: dict = {}  # from the command line above the block
    index = 0
    while index < len(lines):
        line = lines[index]
        found = _MODEL_RE.search(line)
        if found and not _BANNER_RE.match(line):
            model = found.group("model").strip("\"'")
        for key, arg_re in _LOAD_ARG_RES:
            arg = arg_re.search(line)
            if arg:
                load[key] = num(arg.group("v").rstrip(","))
        if not _BANNER_RE.match(line):
            index += 1
            continue
        start = index
        expects_end = bool(_BANNER_RE.match(line).group("bar"))
        doc: dict = {}
        index += 1
        while index < len(lines) and not _END_RE.match(lines[index]) and not _BANNER_RE.match(lines[index]):
            _read_line(lines[index], doc)
            index += 1
        closed = index < len(lines) and _END_RE.match(lines[index]) is not None
        ref = SourceRef(input_name, section.first_line + start, line.rstrip())
        if "request_throughput" not in doc and "output_throughput" not in doc:
            result.warnings.append(f"{input_name}:{ref.line}: a `Serving Benchmark Result` block without its numbers")
            continue
        if model and "model_id" not in doc:
            doc["model_id"] = model
        for key, value in load.items():
            doc.setdefault(key, value)
        sglang = bool(_SGLANG_ONLY & doc.keys()) or any(k.endswith("_e2e_latency_ms") for k in doc)
        if sglang:
            doc.setdefault("total_throughput", doc.pop("total_token_throughput", None))
            run = sglang_bench.run_from_doc(doc, input_name, ref)
        else:
            run = vllm_bench.run_from_doc(doc, input_name, ref)
        if not closed and expects_end:
            run.warnings.append(f"{input_name}:{ref.line}: the result block was cut off before its closing `=====` "
                                "line; the numbers after the cut are missing")
        result.runs.append(run)
    if not result.runs and not result.warnings:
        result.warnings.append(f"{input_name}: no `Serving Benchmark Result` block was found")
    if engine_lines:
        from k3diag.parse.serving import vllm_log

        if vllm_log.sniff(section.text) >= 0.5:
            engine = vllm_log.parse(section, input_name, results=False)
            result.engine = engine
            result.warnings.extend(engine.warnings)
    return result


def _read_line(line: str, doc: dict) -> None:
    match = _LINE_RE.match(line)
    if match is None:
        return
    label, value = match.group("label").strip(), match.group("value")
    if value.lower() in ("not", "none", "n/a"):  # `Max request concurrency: not set`
        return
    number = num(value.rstrip(","))
    if number is not None and re.fullmatch(r"-?\d+", value.rstrip(",")):
        # counts stay counts (`Drafts: 446819`), as the tool's JSON writes them; from the digits, not the float
        # (exact past 2**53, and a run of digits no int holds raises ValueError, not OverflowError from inf)
        number = int(value.rstrip(","))
    latency = _LATENCY_RE.match(label)
    if latency:
        metric = {"E2E Latency": "e2e_latency"}.get(latency.group("metric"), latency.group("metric").lower())
        stat = latency.group("stat").lower() if latency.group("p") is None else f"p{latency.group('p')}"
        if number is not None:
            doc[f"{stat}_{metric}_ms"] = number
        return
    key = _LABELS.get(label.lower())
    if key is None:
        return
    doc[key] = value if key == "backend" else number
