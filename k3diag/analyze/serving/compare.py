"""Which layout serves best per GPU, and whether the runs can be compared at all.

Runs are comparable when they served the same model on the same request shape (mean input and
output tokens within LENGTH_TOLERANCE) and, without a latency target, at the same load per replica
(the client's concurrency limit divided by the replicas it was spread over; the request rate when
no limit was set). Output tokens/s are divided by the GPUs the layout occupies (TP x PP x DP), so a
single TP2 replica measured alone counts the same per GPU as two TP2 replicas measured together.

With a latency target (`--slo-tpot-ms`, `--slo-ttft-ms`, judged at P99 by default) each layout's
best run that meets it is taken, whatever its concurrency: that is the throughput the layout can
sell at that latency. Without one, the layouts are ranked at the highest load they share.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from k3diag.model.serving import ServingRun

LENGTH_TOLERANCE = 0.10
LOAD_TOLERANCE = 0.05


@dataclass(frozen=True)
class Slo:
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    stat: str = "p99"

    @property
    def given(self) -> bool:
        return self.tpot_ms is not None or self.ttft_ms is not None

    def text(self) -> str:
        parts = []
        if self.tpot_ms is not None:
            parts.append(f"{self.stat.upper()} TPOT <= {self.tpot_ms:g} ms")
        if self.ttft_ms is not None:
            parts.append(f"{self.stat.upper()} TTFT <= {self.ttft_ms:g} ms")
        return " and ".join(parts)

    def to_json(self) -> dict:
        return {"tpot_ms": self.tpot_ms, "ttft_ms": self.ttft_ms, "stat": self.stat}


@dataclass
class SloCheck:
    meets: bool | None  # None: the file did not record what the target needs
    detail: str

    def to_json(self) -> dict:
        return {"meets": self.meets, "detail": self.detail}


@dataclass
class Ranked:
    """One layout shape (TP x PP) at the load it is ranked at: its replicas' runs, per-GPU throughput averaged."""

    runs: list[ServingRun]
    per_gpu: float

    @property
    def run(self) -> ServingRun:
        return self.runs[0]

    @property
    def label(self) -> str:
        return shape_label(self.runs)

    def to_json(self) -> dict:
        return {"label": self.label, "inputs": [r.input for r in self.runs],
                "output_tok_per_s_per_gpu": round(self.per_gpu, 3),
                "concurrency_per_replica": self.run.concurrency_per_replica}


def shape_key(run: ServingRun) -> tuple:
    return (run.layout.tp, run.layout.pp or 1)


def shape_label(runs: list[ServingRun]) -> str:
    """`TP2 on GPUs 0,1 | 2,3` for replicas measured one by one; the run's own label for one run."""
    if len(runs) == 1:
        return runs[0].layout.label()
    first = runs[0].layout
    head = f"TP{first.tp}" + (f" PP{first.pp}" if (first.pp or 1) > 1 else "")
    sets = [",".join(str(g) for g in r.layout.gpus) for r in runs if r.layout.gpus]
    return f"{len(runs)}x {head}" + (f" on GPUs {' | '.join(sets)}" if sets else "")


def _shapes(runs: list[ServingRun]) -> list[Ranked]:
    """Group runs by shape: one per GPU set (the best of repeats), per-GPU throughput averaged over replicas."""
    by_shape: dict[tuple, dict[tuple, ServingRun]] = {}
    for run in runs:
        slot = by_shape.setdefault(shape_key(run), {})
        previous = slot.get(run.layout.key())
        if previous is None or (run.output_tok_per_s_per_gpu or 0) > (previous.output_tok_per_s_per_gpu or 0):
            slot[run.layout.key()] = run
    ranked = []
    for slot in by_shape.values():
        members = sorted(slot.values(), key=lambda r: r.layout.label())
        values = [r.output_tok_per_s_per_gpu or 0.0 for r in members]
        ranked.append(Ranked(members, sum(values) / len(values)))
    return sorted(ranked, key=lambda r: -r.per_gpu)


@dataclass
class Comparison:
    runs: list[ServingRun]
    slo: Slo
    comparable: bool = False
    reasons: list[str] = field(default_factory=list)  # why the runs cannot be ranked
    excluded: list[tuple[ServingRun, str]] = field(default_factory=list)  # runs left out of the ranking, and why
    slo_checks: dict[int, SloCheck] = field(default_factory=dict)  # id(run) -> check
    ranking: list[Ranked] = field(default_factory=list)  # best first
    load: str | None = None  # the load the ranking is at, in words
    verdict: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> Ranked | None:
        return self.ranking[0] if self.comparable and self.ranking else None

    def check_of(self, run: ServingRun) -> SloCheck | None:
        return self.slo_checks.get(id(run))

    def best_json(self) -> dict | None:
        best = self.best
        if best is None:
            return None
        layout = best.run.layout
        gpus = sorted({g for run in best.runs for g in (run.layout.gpus or [])})
        data = {
            "label": best.label, "tp": layout.tp, "pp": layout.pp,
            "dp": len(best.runs) if len(best.runs) > 1 else layout.dp,
            "gpus": gpus or None, "replicas_measured": len(best.runs),
            "inputs": [run.input for run in best.runs], "line": best.run.source.line,
            "output_tok_per_s_per_gpu": round(best.per_gpu, 3),
            "concurrency_per_replica": best.run.concurrency_per_replica,
            "at": self.load,
        }
        if len(self.ranking) > 1 and self.ranking[1].per_gpu > 0:
            data["runner_up"] = self.ranking[1].label
            data["ratio_to_runner_up"] = round(best.per_gpu / self.ranking[1].per_gpu, 3)
        return data


def model_key(name: str | None) -> str | None:
    """Models compare by their last path component, case and quantization suffix aside."""
    if not name:
        return None
    base = re.split(r"[\\/]", name.strip().rstrip("/"))[-1].lower()
    return base or None


def load_key(run: ServingRun) -> tuple[str, float] | None:
    dp = run.layout.dp or 1
    if run.concurrency is not None:
        # an average in flight is a measurement, not the load the client set: it is matched only with averages
        return ("in_flight" if run.concurrency_is_average else "concurrency", run.concurrency / dp)
    if run.request_rate is not None and math.isfinite(run.request_rate):
        return ("rate", run.request_rate / dp)
    if run.request_rate is not None and run.requests:
        return ("burst", run.requests / dp)
    return None


def load_text(key: tuple[str, float] | None) -> str:
    if key is None:
        return "load not recorded"
    kind, value = key
    if kind == "concurrency":
        return f"concurrency {value:g} per replica"
    if kind == "in_flight":
        return f"average {value:g} in flight per replica"
    requests = "request" if value == 1 else "requests"
    if kind == "rate":
        return f"{value:g} {requests}/s per replica"
    return f"{value:g} {requests} sent at once per replica"


def _same(a: float, b: float, tolerance: float) -> bool:
    top = max(abs(a), abs(b))
    return top == 0 or abs(a - b) / top <= tolerance


def check_slo(run: ServingRun, slo: Slo) -> SloCheck:
    failures, missing, passes = [], [], []
    for metric, limit in (("tpot", slo.tpot_ms), ("ttft", slo.ttft_ms)):
        if limit is None:
            continue
        value = run.latency(metric).value(slo.stat)
        name = f"{slo.stat.upper()} {metric.upper()}"
        if value is None:
            recorded = run.latency(metric).recorded()
            missing.append(f"{name} was not recorded" + (f" (the file has {', '.join(recorded)})" if recorded else ""))
        elif value <= limit:
            passes.append(f"{name} {value:.1f} ms <= {limit:g}")
        else:
            failures.append(f"{name} {value:.1f} ms > {limit:g}")
    if failures:
        return SloCheck(False, "; ".join(failures + passes))
    if missing:
        return SloCheck(None, "; ".join(missing + passes))
    return SloCheck(True, "; ".join(passes))


def compare(runs: list[ServingRun], slo: Slo | None = None) -> Comparison:
    slo = slo or Slo()
    result = Comparison(runs=list(runs), slo=slo)
    if slo.given:
        for run in runs:
            result.slo_checks[id(run)] = check_slo(run, slo)
    candidates: list[ServingRun] = []
    for run in runs:
        if run.layout.gpu_count is None:
            result.excluded.append((run, "its layout is not known (say it with --metadata tp=N gpus=..., server_info, "
                                         "or a k3diag-run.toml beside the file)"))
        elif run.output_tok_per_s is None:
            result.excluded.append((run, "it recorded no output throughput"))
        elif run.failed and run.requests == 0:  # none completed (an unknown count is not zero)
            # a layout that served nothing must not win, or count in an average of replicas, with its zeros
            result.excluded.append((run, "every request failed (none completed); fix the server (its log says why) "
                                         "and measure it again"))
            continue
        elif run.output_tok_per_s <= 0:
            result.excluded.append((run, "it recorded no output tokens (0 tok/s): nothing was served"))
        else:
            candidates.append(run)
        if run.failed and run.requests is not None and run.failed > 0.05 * (run.requests + run.failed):
            result.notes.append(f"{run.layout.label()} ({run.input}): {run.failed} of {run.requests + run.failed} "
                                "requests failed; its throughput is not what the layout can serve")
    layouts = {shape_key(run) for run in candidates}
    if len(layouts) < 2:
        result.reasons.append(
            "fewer than two layouts (TP x PP sizes) with a known layout and output throughput were given"
            + (f" (only {shape_label([candidates[0]]).split(' GPUs')[0]})" if candidates else "")
        )
        result.verdict = "Not ranked: " + result.reasons[0] + "."
        return result
    candidates = _one_request_shape(candidates, result)
    if not _matched(candidates, result):
        result.verdict = "Not ranked: " + "; ".join(result.reasons) + "."
        return result
    if slo.given:
        _rank_at_slo(candidates, result)
    else:
        _rank_at_shared_load(candidates, result)
    _note_speculative_decoding(result)
    return result


# What the tools record of a speculative-decoding run: vLLM (JSON and its printed group), SGLang.
_SPEC_KEYS = (("spec_decode_acceptance_length", "acceptance length"), ("accept_length", "accept length"))


def speculative_text(run: ServingRun) -> str | None:
    """`acceptance length 2.54` when the result says the server decoded speculatively, else None."""
    for key, name in _SPEC_KEYS:
        value = run.metadata.get(key)
        try:
            number = float(value) if value is not None else None
        except ValueError:
            number = None
        if number is not None and math.isfinite(number):
            return f"{name} {number:g}"
    return None


def _note_speculative_decoding(result: Comparison) -> None:
    """A layout that decoded speculatively wins on tokens per step, not on its links: say so when the
    ranked runs mix runs with and without it (the result records the acceptance only when it ran)."""
    ranked = [run for entry in result.ranking for run in entry.runs]
    with_spec = [(run, text) for run in ranked if (text := speculative_text(run)) is not None]
    if not with_spec:
        return
    without = [run for run in ranked if speculative_text(run) is None]
    listing = ", ".join(f"{run.layout.label()} ({text})" for run, text in with_spec)
    if without:
        result.notes.append(
            f"speculative decoding ran in {listing} but not in {', '.join(sorted({r.layout.label() for r in without}))}"
            " (their results record no acceptance); the throughput difference is partly the drafts accepted, not"
            " the layout: compare runs with the same --speculative-config")
    else:
        result.notes.append(f"every ranked run decoded speculatively ({listing}); the acceptance affects throughput "
                            "as much as the layout")


def _same_shape(a: ServingRun, b: ServingRun) -> bool:
    """Mean input and output lengths within LENGTH_TOLERANCE; a length a result did not record matches any."""
    for attr in ("input_len", "output_len"):
        x, y = getattr(a, attr), getattr(b, attr)
        if x is not None and y is not None and not _same(x, y, LENGTH_TOLERANCE):
            return False
    return True


def _one_request_shape(candidates: list[ServingRun], result: Comparison) -> list[ServingRun]:
    """A sweep over request shapes (1024 in/1024 out, then 1024/128) is ranked on the shape the most layouts
    were measured at, not refused because some other shape differs; the runs at other shapes are left out
    with their lengths. When no shape holds two layouts, all runs go on and `_matched` says why."""
    groups: list[list[ServingRun]] = []
    for run in candidates:
        group = next((g for g in groups if all(_same_shape(run, other) for other in g)), None)
        if group is None:
            groups.append([run])
        else:
            group.append(run)
    if len(groups) < 2:
        return candidates
    best = max(groups, key=lambda g: (len({shape_key(r) for r in g}), len(g)))
    if len({shape_key(r) for r in best}) < 2:
        return candidates
    ranked_shape = _shape_text(best)
    for run in candidates:
        if not any(run is kept for kept in best):
            result.excluded.append((run, f"it was measured at another request shape ({_shape_text([run])}) than the "
                                         f"ranked runs ({ranked_shape})"))
    result.notes.append(f"the runs hold several request shapes; compared on {ranked_shape}, the shape most layouts "
                        "were measured at")
    return best


def _shape_text(runs: list[ServingRun]) -> str:
    parts = []
    for what, attr in (("input", "input_len"), ("output", "output_len")):
        values = [getattr(run, attr) for run in runs if getattr(run, attr) is not None]
        if values:
            parts.append(f"mean {what} {sum(values) / len(values):.0f} tokens")
    return ", ".join(parts) or "lengths not recorded"


def _matched(candidates: list[ServingRun], result: Comparison) -> bool:
    models = {model_key(run.model) for run in candidates}
    known_models = {m for m in models if m}
    if len(known_models) > 1:
        listing = ", ".join(sorted({f"{run.model} ({run.layout.label()})" for run in candidates if run.model}))
        result.reasons.append(f"the runs served different models: {listing}")
    elif None in models and known_models:
        result.notes.append("some results do not name the model; they are assumed to serve "
                            f"{next(iter(known_models))}")
    for what, attr in (("input", "input_len"), ("output", "output_len")):
        values = [(getattr(run, attr), run) for run in candidates if getattr(run, attr) is not None]
        if not values:
            result.notes.append(f"no result records the {what} length; the request shapes could not be compared")
            continue
        low = min(values, key=lambda item: item[0])
        high = max(values, key=lambda item: item[0])
        if not _same(low[0], high[0], LENGTH_TOLERANCE):
            result.reasons.append(
                f"the mean {what} lengths differ: {low[0]:.0f} tokens ({low[1].layout.label()}, {low[1].input}) against "
                f"{high[0]:.0f} ({high[1].layout.label()}, {high[1].input}); run the same dataset and lengths "
                f"(--random-{what}-len, and --ignore-eos for output)"
            )
    return not result.reasons


def _rank_at_slo(candidates: list[ServingRun], result: Comparison) -> None:
    best_by_layout: dict[tuple, ServingRun] = {}  # per GPU set
    unknown: list[ServingRun] = []
    for run in candidates:
        check = result.slo_checks[id(run)]
        if check.meets is None:
            unknown.append(run)
            continue
        if not check.meets:
            continue
        key = run.layout.key()
        current = best_by_layout.get(key)
        if current is None or (run.output_tok_per_s_per_gpu or 0) > (current.output_tok_per_s_per_gpu or 0):
            best_by_layout[key] = run
    for run in unknown:
        result.notes.append(f"{run.layout.label()} ({run.input}): {result.slo_checks[id(run)].detail}; run it with "
                            "--metric-percentiles 50,95,99 to judge it against the target")
    missing_layouts = {run.layout.key() for run in candidates} - set(best_by_layout)
    for key in sorted(missing_layouts, key=str):
        label = next(run.layout.label() for run in candidates if run.layout.key() == key)
        if not any(run.layout.key() == key for run in unknown):
            result.notes.append(f"{label}: no run meets {result.slo.text()}")
    if not best_by_layout:
        result.reasons.append(f"no run of any layout meets {result.slo.text()}")
        result.verdict = f"Not ranked: no run meets {result.slo.text()}."
        return
    result.comparable = True
    result.load = f"the best run of each layout that meets {result.slo.text()}"
    result.ranking = _shapes(list(best_by_layout.values()))
    if len(result.ranking) < 2:
        result.notes.append(f"only {result.ranking[0].label} has a run within {result.slo.text()}")
    result.verdict = _verdict_text(result, f"at {result.slo.text()}")


def _rank_at_shared_load(candidates: list[ServingRun], result: Comparison) -> None:
    levels: dict[tuple[str, float], dict[tuple, ServingRun]] = {}
    no_load: list[ServingRun] = []
    for run in candidates:
        key = load_key(run)
        if key is None:
            no_load.append(run)
            continue
        bucket = next((lvl for lvl in levels if lvl[0] == key[0] and _same(lvl[1], key[1], LOAD_TOLERANCE)), key)
        slot = levels.setdefault(bucket, {})
        previous = slot.get(run.layout.key())
        if previous is None or (run.output_tok_per_s_per_gpu or 0) > (previous.output_tok_per_s_per_gpu or 0):
            slot[run.layout.key()] = run
    # one note per layout and input, not one per run of a sweep pasted in one file
    unrecorded: dict[tuple[str, str], int] = {}
    for run in no_load:
        unrecorded[(run.layout.label(), run.input)] = unrecorded.get((run.layout.label(), run.input), 0) + 1
    for (label, name), count in unrecorded.items():
        runs_text = f"{count} runs" if count > 1 else "the run"
        result.notes.append(f"{label} ({name}): neither concurrency nor request rate recorded for {runs_text}")
    shared = {lvl: slot for lvl, slot in levels.items() if len({shape_key(r) for r in slot.values()}) >= 2}
    if not shared and not levels:
        result.reasons.append(
            "no result recorded its load (neither --max-concurrency nor the request rate); rerun with "
            "--max-concurrency, paste the benchmark's command line with the result, or give a latency target "
            "(--slo-tpot-ms) to compare each layout's best run within it")
        result.verdict = "Not ranked: " + result.reasons[-1] + "."
        return
    if not shared:
        by_layout: dict[str, list[str]] = {}
        for lvl, slot in levels.items():
            for run in slot.values():
                by_layout.setdefault(run.layout.label(), []).append(load_text(lvl))
        listing = "; ".join(f"{label} at {', '.join(sorted(set(loads)))}" for label, loads in sorted(by_layout.items()))
        result.reasons.append(
            "no two layouts were measured at the same load per replica (" + listing + "); rerun at the same "
            "--max-concurrency per replica, or give a latency target (--slo-tpot-ms) to compare each layout's "
            "best run within it"
        )
        result.verdict = "Not ranked: " + result.reasons[-1] + "."
        return
    most = max(len({shape_key(r) for r in slot.values()}) for slot in shared.values())
    level = max((lvl for lvl, slot in shared.items() if len({shape_key(r) for r in slot.values()}) == most),
                key=lambda lvl: lvl[1])
    slot = shared[level]
    result.comparable = True
    result.load = load_text(level)
    result.ranking = _shapes(list(slot.values()))
    ranked_labels = {run.layout.label() for r in result.ranking for run in r.runs}
    left_out = {run.layout.label() for run in candidates} - ranked_labels
    if left_out:
        result.notes.append(f"not measured at {result.load}: {', '.join(sorted(left_out))}")
    if len(shared) > 1:
        result.notes.append("the layouts share several loads; ranked at the highest one most of them share "
                            f"({result.load}); give --slo-tpot-ms to rank at a latency target instead")
    result.verdict = _verdict_text(result, f"at {result.load} (no latency target given)")


def _verdict_text(result: Comparison, where: str) -> str:
    best = result.ranking[0]
    text = f"{best.label} serves the most output tokens/s per GPU {where}: {best.per_gpu:.1f} tok/s/GPU"
    if len(result.ranking) > 1:
        second = result.ranking[1]
        if second.per_gpu > 0:
            text += f", {best.per_gpu / second.per_gpu:.2f}x {second.label} ({second.per_gpu:.1f})"
    for stat in (result.slo.stat, "p50", "mean"):
        tpot = best.run.tpot.value(stat)
        if tpot is not None:
            text += f", {stat.upper() if stat != 'mean' else 'mean'} TPOT {tpot:.1f} ms"
            break
    return text + "."
