"""What every serving-result reader shares: JSON documents found in pasted text, numbers, layouts.

Result files arrive as the tools write them (one JSON object, JSON lines from `--append-result` or
`--output-file`, pretty-printed objects one after another) and as people paste them (inside a log,
cut short by a chat app, with Python's `Infinity`/`NaN`). These helpers find every JSON object in
the text with its line number and, when an object was cut off, recover its flat `"key": value` pairs.
Pure functions: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from k3diag.model.serving import Latency, RunLayout, ServingRun
from k3diag.model.source import SourceRef
from k3diag.model.words import shown_number

# A result file is small; a --save-detailed one holds per-request lists and can reach tens of MB.
MAX_DOCS = 10_000
MAX_FAILED_STARTS = 200
_PAIR_RE = re.compile(
    r'"(?P<key>[^"\\]{1,120})"\s*:\s*(?P<value>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|null|true|false|-?Infinity|NaN|"(?:[^"\\]|\\.){0,400}")'
)
_INT_LIST_RE = re.compile(r"^\s*\[?\s*(\d+(?:\s*[,;: _-]\s*\d+)*)\s*\]?\s*$")


@dataclass
class Doc:
    """One JSON object found in the text: its value, the line it starts on, and whether it was cut off."""

    value: dict
    line: int
    first_text: str
    truncated: bool = False


@dataclass
class ServingResult:
    """What a serving reader returns (the registry's parser contract: `.warnings`)."""

    runs: list[ServingRun] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # the vllm_log.EngineLogResult of a vLLM server log pasted with a printed result block (summary_text)
    engine: object | None = None


def find_docs(text: str, first_line: int = 1) -> tuple[list[Doc], list[str]]:
    """Every top-level JSON object in `text`, in order, with 1-based line numbers."""
    warnings: list[str] = []
    docs: list[Doc] = []
    decoder = json.JSONDecoder()
    lines = text.split("\n")
    offsets = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 1
    index = 0
    consumed_to = -1
    failures = 0
    while index < len(lines):
        if offsets[index] < consumed_to:
            index += 1
            continue
        stripped = lines[index].lstrip()
        if not stripped.startswith(("{", "[")):
            index += 1
            continue
        start = offsets[index] + (len(lines[index]) - len(stripped))
        try:
            value, end = decoder.raw_decode(text, start)
        except RecursionError:
            warnings.append(f"line {first_line + index}: JSON nested too deeply to read; skipped")
            index += 1
            continue
        except json.JSONDecodeError as exc:
            if stripped.startswith("{"):
                recovered = recover_pairs(text[start:])
                if len(recovered) >= 3:
                    reason = exc.msg.removesuffix(" at").strip()
                    docs.append(Doc(recovered, first_line + index, lines[index].strip(), truncated=True))
                    warnings.append(
                        f"line {first_line + index}: the JSON object is cut off or malformed ({reason} near line "
                        f"{first_line + _line_of(offsets, exc.pos)}); {len(recovered)} top-level values were read "
                        "from what is there"
                    )
                    break
            failures += 1
            if failures >= MAX_FAILED_STARTS:
                # A big broken document would otherwise be re-decoded from each of its nested lines.
                warnings.append(f"stopped looking for JSON after {failures} lines that start an object but do not "
                                "parse (last at line {})".format(first_line + index))
                break
            index += 1
            continue
        consumed_to = end
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                docs.append(Doc(item, first_line + index, lines[index].strip()))
                if len(docs) >= MAX_DOCS:
                    warnings.append(f"more than {MAX_DOCS} results; only the first were read")
                    return docs, warnings
        index += 1
    return docs, warnings


def _line_of(offsets: list[int], pos: int) -> int:
    lo, hi = 0, len(offsets) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if offsets[mid] <= pos:
            lo = mid
        else:
            hi = mid - 1
    return lo


def recover_pairs(text: str) -> dict:
    """Flat `"key": scalar` pairs of an object that was cut off (nested objects are skipped)."""
    out: dict[str, Any] = {}
    depth = 0
    in_string = False
    escape = False
    # Only pairs at depth 1 belong to the object itself.
    spans: list[tuple[int, int]] = []
    start = None
    for i, ch in enumerate(text):
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            if depth == 1:
                start = i + 1
            elif depth == 2 and start is not None:
                spans.append((start, i))
                start = None
        elif ch in "}]":
            if depth == 2:
                start = i + 1
            depth -= 1
            if depth <= 0:
                break
    if start is not None:
        spans.append((start, len(text)))
    for a, b in spans:
        for match in _PAIR_RE.finditer(text[a:b]):
            key = match.group("key")
            raw = match.group("value")
            try:
                out[key] = json.loads(raw)
            except ValueError:
                continue
    return out


# --------------------------------------------------------------------------- values


def num(value: Any) -> float | None:
    """A number as the tools write it: int, float, "12.5", "inf", Infinity. Booleans are not numbers."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and math.isnan(value) else float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("inf", "infinity", "+inf"):
            return math.inf
        try:
            result = float(text)
        except ValueError:
            return None
        return None if math.isnan(result) else result
    return None


def integer(value: Any) -> int | None:
    number = num(value)
    if number is None or math.isinf(number) or number != int(number):
        return None
    return int(number)


# More GPUs along one axis of a job than any job has (the largest clusters announced hold ~10^5): a larger
# `tp_size` or `world_size` is a damaged value (`1e308`, an integer to Python's JSON reader), and a product of
# such sizes overflowed the float of a per-GPU rate (OverflowError: the whole report was lost).
MAX_PARALLEL_SIZE = 1 << 20


def parallel_size(value: Any, key: str, warnings: list[str] | None) -> int | None:
    """`value` as a TP, PP, DP, EP or world size (a whole number from 1 to `MAX_PARALLEL_SIZE`), else None;
    a whole number above that (a JSON number, or the digits of a log line) is said in `warnings`, naming
    `key`, not read."""
    digits = value.strip() if isinstance(value, str) else None
    if digits is not None and digits.isdigit() and len(digits) > len(str(MAX_PARALLEL_SIZE)):
        number, shown = MAX_PARALLEL_SIZE + 1, shown_number(digits)  # before int(): 4,300 digits make it raise
    else:
        number = integer(value)
        if number is None or number < 1:
            return None
        shown = shown_number(value if isinstance(value, float) else number)
    if number > MAX_PARALLEL_SIZE:
        if warnings is not None:
            warnings.append(f"{key} {shown} is more GPUs than any job has (at most {MAX_PARALLEL_SIZE:,}); "
                            "read as not known")
        return None
    return number


def finite(value: Any) -> float | None:
    number = num(value)
    return None if number is None or math.isinf(number) else number


def first(doc: dict, *keys: str) -> Any:
    for key in keys:
        if key in doc and doc[key] is not None:
            return doc[key]
    return None


def fill_benchmark_serving_load(run: ServingRun, doc: dict, completed: int | None) -> tuple[float | None, float | None]:
    """The keys vLLM's benchmark_serving.py wrote and SGLang's bench_serving kept (it began as a copy):
    concurrency, request rate, duration, mean lengths from the token totals, request and output
    throughput. Returns the (input, output) token totals for the caller's total-throughput rule,
    which differs between the two."""
    concurrency = num(doc.get("max_concurrency"))
    run.concurrency = None if concurrency is None or math.isinf(concurrency) else concurrency
    run.request_rate = num(doc.get("request_rate"))
    run.duration_s = finite(doc.get("duration"))
    total_in, total_out = finite(doc.get("total_input_tokens")), finite(doc.get("total_output_tokens"))
    if completed:
        run.input_len = total_in / completed if total_in is not None else None
        run.output_len = total_out / completed if total_out is not None else None
    run.request_per_s = finite(doc.get("request_throughput"))
    run.output_tok_per_s = finite(doc.get("output_throughput"))
    return total_in, total_out


def int_list(value: Any) -> list[int] | None:
    """GPU ids as people write them: [0, 1], "0,1,2,3", "0-3"... None when it is not a list of ids."""
    if isinstance(value, list):
        ids = [integer(v) for v in value]
        return [i for i in ids if i is not None] if all(i is not None for i in ids) and ids else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        single = integer(value)
        return [single] if single is not None else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    range_match = re.fullmatch(r"(\d+)\s*-\s*(\d+)", text)
    if range_match:
        a, b = int(range_match.group(1)), int(range_match.group(2))
        return list(range(a, b + 1)) if 0 <= b - a < 1024 else None
    if not _INT_LIST_RE.match(text):
        return None
    return [int(part) for part in re.findall(r"\d+", text)]


def flat_latency(doc: dict, metric: str, names: tuple[str, ...] | None = None) -> Latency:
    """vLLM/SGLang style keys: mean_<m>_ms, median_<m>_ms, p50/p90/p95/p99_<m>_ms."""
    names = names or (metric,)
    latency = Latency()
    for name in names:
        latency.mean = latency.mean if latency.mean is not None else finite(doc.get(f"mean_{name}_ms"))
        median = finite(first(doc, f"p50_{name}_ms", f"median_{name}_ms"))
        latency.p50 = latency.p50 if latency.p50 is not None else median
        for stat in ("p90", "p95", "p99"):
            if getattr(latency, stat) is None:
                setattr(latency, stat, finite(doc.get(f"{stat}_{name}_ms")))
    return latency


def percentile(values: list[float], q: float, presorted: bool = False) -> float | None:
    """Linear-interpolated percentile (numpy's default), for results that kept per-request values."""
    clean = values if presorted else sorted(
        v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    if not clean:
        return None
    if len(clean) == 1:
        return float(clean[0])
    rank = (len(clean) - 1) * q / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(clean) - 1)
    return float(clean[low] + (clean[high] - clean[low]) * (rank - low))


def latency_from_values(values: list[float], scale: float, note: str) -> Latency:
    clean = sorted(v * scale for v in values
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    if not clean:
        return Latency()
    return Latency(mean=math.fsum(clean) / len(clean), p50=percentile(clean, 50, True),
                   p90=percentile(clean, 90, True), p95=percentile(clean, 95, True), p99=percentile(clean, 99, True),
                   note=note)


def fill_missing(latency: Latency, computed: Latency) -> Latency:
    """Percentiles the summary lacks, taken from per-request values the file also kept."""
    if computed.empty():
        return latency
    filled = False
    for stat in ("mean", "p50", "p90", "p95", "p99"):
        if getattr(latency, stat) is None and getattr(computed, stat) is not None:
            setattr(latency, stat, getattr(computed, stat))
            filled = True
    if filled:
        latency.note = computed.note
    return latency


# --------------------------------------------------------------------------- layout keys

_TP_KEYS = ("tp", "tp_size", "tensor_parallel_size", "tensor-parallel-size", "tensor_parallel")
_PP_KEYS = ("pp", "pp_size", "pipeline_parallel_size", "pipeline-parallel-size")
_DP_KEYS = ("dp", "dp_size", "data_parallel_size", "data-parallel-size", "replicas")
_EP_KEYS = ("ep", "ep_size", "moe_ep_size", "expert_parallel_size")
_GPU_KEYS = ("gpus", "gpu_ids", "devices", "cuda_visible_devices", "CUDA_VISIBLE_DEVICES", "hip_visible_devices")


def layout_from_mapping(mapping: dict, source: str, detail_prefix: str,
                        warnings: list[str] | None = None) -> RunLayout | None:
    """TP/PP/DP and GPUs from a flat mapping (vLLM --metadata, SGLang server_info, a sidecar); a size no job
    has is said in `warnings` (`parallel_size`)."""
    lowered = {str(k).lower(): v for k, v in mapping.items()}
    found: dict[str, Any] = {}
    used: list[str] = []
    for name, keys in (("tp", _TP_KEYS), ("pp", _PP_KEYS), ("dp", _DP_KEYS), ("ep", _EP_KEYS)):
        for key in keys:
            value = parallel_size(lowered.get(key.lower()), f"{detail_prefix} {key}", warnings)
            if value is not None:
                found[name] = value
                used.append(f"{key}={value}")
                break
    for key in _GPU_KEYS:
        ids = int_list(lowered.get(key.lower()))
        if ids:
            found["gpus"] = ids
            used.append(f"{key}={','.join(str(i) for i in ids)}")
            break
    if not found:
        return None
    return RunLayout(tp=found.get("tp"), pp=found.get("pp"), dp=found.get("dp"), ep=found.get("ep"),
                     gpus=found.get("gpus"), source=source, detail=f"{detail_prefix} {' '.join(used)}".strip())


_NAME_PATTERNS = {
    "tp": re.compile(r"(?:^|[^a-z])tp[-_=]?(\d{1,3})(?![0-9])", re.I),
    "pp": re.compile(r"(?:^|[^a-z])pp[-_=]?(\d{1,3})(?![0-9])", re.I),
    "dp": re.compile(r"(?:^|[^a-z])dp[-_=]?(\d{1,3})(?![0-9])", re.I),
}
_NAME_REPLICAS_RE = re.compile(r"(?:^|[^a-z0-9])(\d)x[-_]?tp(\d{1,3})", re.I)
_NAME_GPUS_RE = re.compile(r"gpus?[-_=]?(\d+(?:[,_+]\d+)*)", re.I)


def layout_from_name(name: str) -> RunLayout | None:
    """A last resort: `tp4`, `2xtp2`, `pp2`, `gpus0,1` in a file name."""
    base = re.split(r"[\\/]", name)[-1]
    found: dict[str, Any] = {}
    replicas = _NAME_REPLICAS_RE.search(base)
    if replicas:
        found["dp"] = int(replicas.group(1))
        found["tp"] = int(replicas.group(2))
    for key, pattern in _NAME_PATTERNS.items():
        if key in found:
            continue
        match = pattern.search(base)
        if match:
            found[key] = int(match.group(1))
    gpus = _NAME_GPUS_RE.search(base)
    if gpus:
        found["gpus"] = [int(x) for x in re.findall(r"\d+", gpus.group(1))]
    if "tp" not in found and "gpus" not in found:
        return None
    return RunLayout(tp=found.get("tp"), pp=found.get("pp"), dp=found.get("dp"), gpus=found.get("gpus"),
                     source="filename", detail=f"file name {base}")


def check_layout(run: ServingRun) -> None:
    """A GPU list that does not match TP x PP x DP is said, not silently trusted; a run that completed no
    request has no latency (the tools write 0 ms for each percentile of an empty list)."""
    if run.requests == 0 and run.failed:
        for metric in ("ttft", "tpot", "itl", "e2el"):
            setattr(run, metric, Latency(note="no request completed"))
    layout = run.layout
    if layout.tp is None and layout.gpus:
        return
    if layout.gpus and layout.tp is not None and len(layout.gpus) != layout.gpu_count:
        run.warnings.append(
            f"{run.input}: the layout says TP{layout.tp} x PP{layout.pp or 1} x DP{layout.dp or 1} = "
            f"{layout.gpu_count} GPUs but lists {len(layout.gpus)} ({','.join(str(g) for g in layout.gpus)})"
        )


def source_ref(input_name: str, doc: Doc) -> SourceRef:
    text = doc.first_text
    if len(text) > 200:
        text = text[:197] + "..."
    return SourceRef(input=input_name, line=doc.line, text=text)


def iter_string_items(mapping: dict) -> Iterator[tuple[str, str]]:
    for key, value in mapping.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            yield str(key), str(value)
