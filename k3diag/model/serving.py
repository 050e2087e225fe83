"""Serving benchmark records: one run of a load generator against one deployment layout.

Pure data. The readers in `k3diag.parse.serving` fill these from the result files of `vllm bench
serve`, SGLang `bench_serving`, `trtllm-bench`, AIPerf/GenAI-Perf and LLMPerf; the engine's own log
(vLLM) gives the layout and the communication state the analysis explains the numbers with.
Unknown values are None; nothing here is guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef

PERCENTILES = ("p50", "p95", "p99")
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
# Where a layout was read from, best first; the report says which.
LAYOUT_SOURCES = ("file", "engine-log", "sidecar", "filename", "unknown")


@dataclass
class Latency:
    """One latency metric of one run, in milliseconds, as the tool recorded it."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    # How the values were obtained when not read as such ("computed from per-request values").
    note: str | None = None

    def value(self, stat: str) -> float | None:
        return getattr(self, stat, None)

    def recorded(self) -> list[str]:
        return [name for name in ("mean", "p50", "p90", "p95", "p99") if getattr(self, name) is not None]

    def missing_percentiles(self) -> list[str]:
        return [name for name in PERCENTILES if getattr(self, name) is None]

    def empty(self) -> bool:
        return not self.recorded()

    def to_json(self) -> dict:
        return {"mean": _num(self.mean), "p50": _num(self.p50), "p95": _num(self.p95), "p99": _num(self.p99),
                "p90": _num(self.p90), "note": self.note}


@dataclass
class RunLayout:
    """How the measured deployment was laid out: parallel sizes and which GPUs."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    gpus: list[int] | None = None
    source: str = "unknown"  # one of LAYOUT_SOURCES
    detail: str | None = None  # e.g. "--metadata tp=4 gpus=0,1,2,3", "server_info.tp_size"

    @property
    def gpu_count(self) -> int | None:
        if self.tp is None:
            return len(self.gpus) if self.gpus else None
        return self.tp * (self.pp or 1) * (self.dp or 1)

    def label(self) -> str:
        if self.tp is None and not self.gpus:
            return "layout unknown"
        parts = []
        if (self.dp or 1) > 1:
            parts.append(f"{self.dp}x ")
        parts.append(f"TP{self.tp if self.tp is not None else '?'}")
        if (self.pp or 1) > 1:
            parts.append(f" PP{self.pp}")
        text = "".join(parts)
        if self.gpus:
            text += " GPUs " + ",".join(str(g) for g in self.gpus)
        return text.replace("TP?", "TP unknown")

    def key(self) -> tuple:
        return (self.tp, self.pp or 1, self.dp or 1, tuple(self.gpus or ()))

    def to_json(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep,
                "gpus": list(self.gpus) if self.gpus is not None else None,
                "source": self.source, "detail": self.detail}


@dataclass
class ServingRun:
    """One benchmark result (one file, or one line of a JSONL file)."""

    tool: str  # format name: vllm-bench-serve, sglang-bench-serving, trtllm-bench, aiperf, llmperf
    input: str
    source: SourceRef
    model: str | None = None
    requests: int | None = None  # completed requests
    failed: int | None = None
    concurrency: float | None = None  # max concurrent requests the client allowed (None: not limited)
    # `concurrency` is the average number of requests in flight the tool measured (trtllm-bench's "Number of
    # concurrent requests"), not the limit the client set: a faster layout drains its queue and shows fewer
    concurrency_is_average: bool = False
    request_rate: float | None = None  # requests/s the client offered; math.inf for "as fast as possible"
    input_len: float | None = None  # mean prompt tokens per request
    output_len: float | None = None  # mean generated tokens per request
    duration_s: float | None = None
    request_per_s: float | None = None
    output_tok_per_s: float | None = None
    total_tok_per_s: float | None = None
    ttft: Latency = field(default_factory=Latency)
    tpot: Latency = field(default_factory=Latency)
    itl: Latency = field(default_factory=Latency)
    e2el: Latency = field(default_factory=Latency)
    layout: RunLayout = field(default_factory=RunLayout)
    metadata: dict[str, str] = field(default_factory=dict)
    date: str | None = None
    warnings: list[str] = field(default_factory=list)

    def latency(self, metric: str) -> Latency:
        return getattr(self, metric)

    @property
    def concurrency_per_replica(self) -> float | None:
        if self.concurrency is None:
            return None
        return self.concurrency / (self.layout.dp or 1)

    @property
    def output_tok_per_s_per_gpu(self) -> float | None:
        gpus = self.layout.gpu_count
        if self.output_tok_per_s is None or not gpus:
            return None
        return self.output_tok_per_s / gpus

    @property
    def output_tok_per_s_per_request(self) -> float | None:
        """What one user sees once tokens flow: 1000 / median TPOT (the mean when no median was recorded)."""
        tpot = self.tpot.p50 if self.tpot.p50 is not None else self.tpot.mean
        return 1000.0 / tpot if tpot else None

    @property
    def request_per_s_per_gpu(self) -> float | None:
        gpus = self.layout.gpu_count
        if self.request_per_s is None or not gpus:
            return None
        return self.request_per_s / gpus

    def to_json(self) -> dict:
        return {
            "tool": self.tool,
            "input": self.input,
            "line": self.source.line,
            "model": self.model,
            "tp": self.layout.tp,
            "pp": self.layout.pp,
            "dp": self.layout.dp,
            "gpus": list(self.layout.gpus) if self.layout.gpus is not None else None,
            "gpu_count": self.layout.gpu_count,
            "source": self.layout.source,
            "layout_detail": self.layout.detail,
            "label": self.layout.label(),
            "requests": self.requests,
            "failed": self.failed,
            "concurrency": _num(self.concurrency),
            "concurrency_per_replica": _num(self.concurrency_per_replica),
            "concurrency_is_average": self.concurrency_is_average,
            "request_rate": _rate(self.request_rate),
            "input_len": _num(self.input_len),
            "output_len": _num(self.output_len),
            "duration_s": _num(self.duration_s),
            "throughput": {
                "request_per_s": _num(self.request_per_s),
                "request_per_s_per_gpu": _num(self.request_per_s_per_gpu),
                "output_tok_per_s": _num(self.output_tok_per_s),
                "output_tok_per_s_per_gpu": _num(self.output_tok_per_s_per_gpu),
                "total_tok_per_s": _num(self.total_tok_per_s),
                "output_tok_per_s_per_request": _num(self.output_tok_per_s_per_request),
            },
            "ttft_ms": self.ttft.to_json(),
            "tpot_ms": self.tpot.to_json(),
            "itl_ms": self.itl.to_json(),
            "e2el_ms": self.e2el.to_json(),
            "metadata": dict(self.metadata),
            "date": self.date,
            "warnings": list(self.warnings),
        }


@dataclass
class EngineLog:
    """What a serving engine's own log says about the deployment's communication."""

    engine: str  # "vllm"
    input: str
    version: str | None = None
    model: str | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cuda_visible_devices: list[int] | None = None
    # "enabled" (the engine did not say it turned it off), "disabled", or None (the log does not say).
    custom_allreduce: str | None = None
    custom_allreduce_reason: str | None = None
    custom_allreduce_explicit_off: bool = False  # disable_custom_all_reduce=True in the config
    nccl_version: str | None = None
    evidence: list[SourceRef] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "engine": self.engine,
            "input": self.input,
            "version": self.version,
            "model": self.model,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "cuda_visible_devices": self.cuda_visible_devices,
            "custom_allreduce": self.custom_allreduce,
            "custom_allreduce_reason": self.custom_allreduce_reason,
            "nccl_version": self.nccl_version,
            "evidence": [ref.to_json() for ref in self.evidence],
        }


@dataclass
class P2PCache:
    """vLLM's cached result of its own GPU peer-to-peer test (`gpu_p2p_access_cache_for_*.json`)."""

    input: str
    # Physical device ids when the file name (CUDA_VISIBLE_DEVICES) says them, else logical indices.
    devices: list[int] | None
    pairs: dict[tuple[int, int], bool] = field(default_factory=dict)  # logical (i, j) -> P2P works
    source: SourceRef | None = None

    def physical(self, logical: int) -> int:
        if self.devices and 0 <= logical < len(self.devices):
            return self.devices[logical]
        return logical

    def failed_pairs(self) -> list[tuple[int, int]]:
        return sorted((self.physical(i), self.physical(j)) for (i, j), ok in self.pairs.items() if i != j and not ok)

    def to_json(self) -> dict:
        return {
            "input": self.input,
            "devices": self.devices,
            "pairs": {f"{self.physical(i)}->{self.physical(j)}": ok for (i, j), ok in sorted(self.pairs.items())},
            "failed_pairs": [list(p) for p in self.failed_pairs()],
        }


def _num(value: float | None) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if math.isnan(value) or math.isinf(value):
        return None
    return round(float(value), 4)


def _rate(value: float | None) -> float | str | None:
    if value is None:
        return None
    if math.isinf(value):
        return "inf"
    return _num(value)
