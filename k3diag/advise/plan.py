"""`advise(...)`: will this model load, generate and serve on this hardware, and how to lay it out.

The seed article's three levels frame the verdict: *loads* (weights and reserves fit), *generates*
(one sequence at the requested context fits too), *serves* (latency, throughput and tail latency
under load: only a measurement can say, so the plan gives the bounds and the commands).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from k3diag.advise.architecture import LINEAR_GROUPS, ModelSpec, active_params, present_groups, total_params
from k3diag.advise.catalog import GpuSpec, gpu_catalog
from k3diag.advise.dtypes import bytes_per_param
from k3diag.advise.hardware import AdviceError, Hardware
from k3diag.advise.layouts import (
    LayoutError,
    LayoutLinks,
    Placement,
    assess_links,
    candidate_layouts,
    make_placement,
    planner_groups,
)
from k3diag.advise.memory import GIB, Layout, ReserveSettings, StageLedger, memoized_ledgers, stage_ledgers, worst_stage
from k3diag.advise.roofline import Roofline, decode_roofline, weights_read_per_token_bytes
from k3diag.advise.training import TrainingPlan, TrainSettings, training_plan
from k3diag.model.words import counted

CAPACITY_CONTEXTS = (8192, 131072, 1048576)


@dataclass
class LayoutResult:
    layout: Layout
    stages: list[StageLedger]
    worst: StageLedger
    roofline: Roofline
    links: LayoutLinks
    placement: Placement
    context: int
    sequences: dict[int, int]  # context -> concurrent sequences, whole deployment
    warnings: list[str] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        return all(s.loads for s in self.stages)

    @property
    def fits(self) -> bool:
        return all(s.fits_one_sequence for s in self.stages)

    @property
    def sequences_at_context(self) -> int:
        return self.sequences.get(self.context, 0)

    def to_json(self) -> dict:
        w = self.worst
        return {
            "layout": self.layout.label,
            "dp": self.layout.dp,
            "tp": self.layout.tp,
            "pp": self.layout.pp,
            "ep": self.layout.ep,
            "loads": self.loads,
            "fits": self.fits,
            "per_gpu": {
                "stage": w.stage,
                "layers": [w.first_layer, w.last_layer],
                "memory_gib": round(w.memory_gib, 3),
                "weights_gib": round(w.weights_gib, 3),
                "state_gib_per_sequence": round(w.state_gib_one_sequence, 3),
                "state_gib_per_extra_sequence": round(w.state_gib_per_extra_sequence, 3),
                "step_buffers_gib": round(w.step_gib, 3),
                "reserve_gib": round(w.reserve_gib, 3),
                "free_gib": round(w.free_gib, 3),
                "lines": [line.to_json() for line in w.lines()],
            },
            "stages": [
                {"stage": s.stage, "layers": [s.first_layer, s.last_layer], "weights_gib": round(s.weights_gib, 3),
                 "state_gib_per_sequence": round(s.state_gib_one_sequence, 3), "free_gib": round(s.free_gib, 3)}
                for s in self.stages
            ],
            "sequences": {str(k): v for k, v in sorted(self.sequences.items())},
            "decode_ms_floor": round(self.roofline.floor_ms, 3),
            "decode_ms_comm": round(self.roofline.comm_ms, 3),
            "decode_ms_estimate": round(self.roofline.estimate_ms, 3),
            "dominant": self.roofline.dominant,
            "roofline": self.roofline.to_json(),
            "links": self.links.to_json(),
            "tp_groups": self.placement.tp_groups(self.layout),
            "tp_groups_from": self.placement.source,
            "warnings": list(self.warnings),
        }


@dataclass
class AdvicePlan:
    model: ModelSpec
    hardware: Hardware
    context: int
    batch: int
    results: list[LayoutResult]
    by_latency: list[LayoutResult]
    by_capacity: list[LayoutResult]
    verdict: dict[str, dict[str, str]]
    suggestions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cannot_know: list[str] = field(default_factory=list)
    measure: list[str] = field(default_factory=list)
    training: TrainingPlan | None = None

    @property
    def recommended(self) -> LayoutResult | None:
        return self.by_latency[0] if self.by_latency else None

    @property
    def best_capacity(self) -> LayoutResult | None:
        return self.by_capacity[0] if self.by_capacity else None

    @property
    def capacity_contexts(self) -> list[int]:
        cs = sorted({c for c in CAPACITY_CONTEXTS if c <= self.model.arch.max_context} | {self.context})
        return cs

    def to_json(self) -> dict:
        with memoized_ledgers():  # the totals below walk every layer of the model several times
            return self._to_json()

    def _to_json(self) -> dict:
        a = self.model.arch
        ordered = self.by_latency + [r for r in self.results if r not in self.by_latency]
        weights_total = sum(s.weights_gib for s in stage_ledgers(self.model, Layout(1, 1, 1, 1), 1e9, 1, ReserveSettings()))
        return {
            "schema": "k3diag.advise/1",
            "model": {
                "id": self.model.id,
                "name": self.model.name,
                "source": self.model.source,
                "params_total": total_params(a),
                "params_active": active_params(a),
                "weights_total_gib": round(weights_total, 3),
                "weights_total_gb": round(weights_total * GIB / 1e9, 3),
                "weights_read_per_token_gb": round(weights_read_per_token_bytes(self.model) / 1e9, 3),
                "dtypes": {g: d for g, d in sorted(self.model.dtypes.items()) if g in present_groups(a)},
                "kv_cache_dtype": self.model.kv_cache_dtype,
                "max_context": a.max_context,
                "assumptions": list(self.model.assumptions),
            },
            "hardware": self.hardware.to_json(),
            "context": self.context,
            "batch": self.batch,
            "verdict": self.verdict,
            "recommended": self.recommended.to_json() if self.recommended else None,
            "best_latency": self.recommended.layout.label if self.recommended else None,
            "best_capacity": self.best_capacity.layout.label if self.best_capacity else None,
            "layouts": [r.to_json() for r in ordered],
            "suggestions": list(self.suggestions),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "cannot_know": list(self.cannot_know),
            "measure": list(self.measure),
            "training": self.training.to_json() if self.training else None,
        }


def _evaluate(
    spec: ModelSpec,
    hw: Hardware,
    layout: Layout,
    context: int,
    reserve: ReserveSettings,
    batch: int,
    planned: dict[int, list[list[int]]],
    planner_worst: dict[int, str],
    planner_note: str | None,
    contexts: list[int],
) -> LayoutResult:
    gpu = hw.gpu
    stages = stage_ledgers(spec, layout, hw.memory_gib, context, reserve, gpu.cuda_graphs, gpu.os_reserved_pct)
    worst = worst_stage(stages, context)
    placement = make_placement(layout, hw.gpu_ids, planned, planner_note if hw.machine is not None else None)
    links = assess_links(layout, placement, gpu, gpu_catalog(), hw.node_of(), hw.machine, planner_worst)
    roof = decode_roofline(spec, layout, stages, context, gpu.bandwidth_gbs, links.tp, links.ep, links.pp, batch)
    sequences = {c: min(s.sequences_at(c) for s in stages) * layout.dp for c in contexts}
    return LayoutResult(layout, stages, worst, roof, links, placement, context, sequences, list(links.warnings))


def _max_context_of(stages: list[StageLedger]) -> int:
    """Longest single sequence (tokens) every stage can hold; 0 when the weights do not load."""
    best: int | None = None
    for s in stages:
        room = (s.free_gib - s.step_gib) * GIB - s.state_bytes_fixed
        if room < 0:
            return 0
        limit = int(room // s.state_bytes_per_token) if s.state_bytes_per_token else 10**12
        best = limit if best is None else min(best, limit)
    return best or 0


def _best_loading(spec: ModelSpec, gpu: GpuSpec, count: int, memory_gib: float, context: int, reserve: ReserveSettings) -> tuple[Layout, int] | None:
    """The layout holding the longest single sequence (memory only), with that length in tokens;
    None when nothing loads. Layouts that would put TP across nodes are not offered."""
    try:
        layouts = candidate_layouts(count, spec.arch)
    except LayoutError:
        return None
    per_node = max(gpu.gpus_per_node, 1)
    best: tuple[Layout, int] | None = None
    for layout in sorted(layouts, key=lambda l: (l.pp, -l.dp, l.tp, l.ep)):
        if count > per_node and layout.tp > per_node:
            continue
        stages = stage_ledgers(spec, layout, memory_gib, context, reserve, gpu.cuda_graphs, gpu.os_reserved_pct)
        if not all(s.loads for s in stages):
            continue
        longest = min(_max_context_of(stages), spec.arch.max_context)
        if longest >= context:
            return layout, longest  # fewest stages that fit: what a person would try first
        if best is None or longest > best[1]:
            best = (layout, longest)
    return best


def _suggestions(spec: ModelSpec, hw: Hardware, context: int, reserve: ReserveSettings, results: list[LayoutResult]) -> list[str]:
    out: list[str] = []
    gpu = hw.gpu
    here = _best_loading(spec, gpu, hw.count, hw.memory_gib, context, reserve)
    if here is not None and here[1] > 0:
        out.append(
            f"Shorter context: it loads, and {here[0].label} holds one sequence of up to {here[1]:,} tokens (--context {here[1]})."
        )
    per_node = max(gpu.gpus_per_node, 1)
    counts = [n for n in range(hw.count + 1, per_node + 1)] + [per_node * k for k in range(2, 65) if per_node * k > hw.count]
    for n in counts:
        found = _best_loading(spec, gpu, n, hw.memory_gib, context, reserve)
        if found is not None and found[1] >= context:
            nodes = math.ceil(n / per_node)
            where = f" ({nodes} nodes x {per_node})" if nodes > 1 else ""
            out.append(f"More of the same: {n} x {gpu.name}{where} hold one {context:,}-token sequence as {found[0].label}.")
            break
    else:
        out.append(f"Even 64 nodes of {gpu.name} would not hold one {context:,}-token sequence.")
    linear_formats = {spec.dtype_of(g) for g in LINEAR_GROUPS}
    widest = max(bytes_per_param(d) for d in linear_formats)
    for candidate in ("fp8", "int4-g128"):
        if bytes_per_param(candidate) >= widest:
            continue
        narrow = replace(
            spec,
            dtypes={**spec.dtypes, **{g: candidate for g in LINEAR_GROUPS if bytes_per_param(spec.dtype_of(g)) > bytes_per_param(candidate)}},
        )
        found = _best_loading(narrow, gpu, hw.count, hw.memory_gib, context, reserve)
        if found is None or found[1] <= 0:
            continue
        quality = "usually close to BF16 quality" if candidate == "fp8" else "a real quality trade-off: check your evals"
        short = candidate.split("-")[0]
        if found[1] >= context:
            out.append(
                f"Smaller weights: --dtype {short} ({quality}) fits {hw.count} x {gpu.name} as {found[0].label} "
                f"with one {context:,}-token sequence."
            )
            break
        out.append(
            f"Smaller weights: --dtype {short} ({quality}) loads on {hw.count} x {gpu.name} as {found[0].label}; "
            f"one sequence of up to {found[1]:,} tokens fits (--dtype {short} --context {found[1]})."
        )
    others = []
    for other in sorted(gpu_catalog().gpus, key=lambda g: g.memory_mib):
        if other.id == gpu.id or other.memory_gib <= hw.memory_gib:
            continue
        found = _best_loading(spec, other, hw.count, other.memory_gib, context, reserve)
        if found is not None and found[1] >= context:
            others.append(f"{other.name} ({other.memory_gib:.0f} GiB) as {found[0].label}")
    if others:
        out.append(f"Bigger GPUs, same count ({hw.count}): " + "; ".join(others[:4]) + ".")
    return out


def _verdict(spec: ModelSpec, hw: Hardware, context: int, plan_results: list[LayoutResult], by_latency: list[LayoutResult]) -> dict[str, dict[str, str]]:
    loads = [r for r in plan_results if r.loads]
    best_load = min(plan_results, key=lambda r: -r.worst.free_gib)
    if loads:
        r = by_latency[0] if by_latency else max(loads, key=lambda x: x.worst.free_gib)
        load = {
            "answer": "yes",
            "why": f"{r.layout.label}: {r.worst.weights_gib:.1f} GiB of weights + {r.worst.reserve_gib:.1f} GiB reserved per GPU "
            f"leave {r.worst.free_gib:.1f} of {hw.memory_gib:.1f} GiB for KV cache and state.",
        }
    else:
        load = {
            "answer": "no",
            "why": f"even {best_load.layout.label} needs {best_load.worst.weights_gib:.1f} GiB of weights + "
            f"{best_load.worst.reserve_gib:.1f} GiB reserved on its fullest GPU, more than its {hw.memory_gib:.1f} GiB.",
        }
    if by_latency:
        r = by_latency[0]
        gen = {
            "answer": "yes",
            "why": f"{r.layout.label} also holds one {context:,}-token sequence ({r.worst.state_gib_one_sequence:.3f} GiB per GPU) "
            f"and {counted(r.sequences_at_context, 'such sequence')} at once.",
        }
        tokens_s = 1000.0 / r.roofline.estimate_ms if r.roofline.estimate_ms > 0 else float("inf")
        serve = {
            "answer": "needs measurement",
            "why": f"at best ~{tokens_s:.0f} tokens/s for one sequence ({r.roofline.estimate_ms:.1f} ms/token: "
            f"{r.roofline.floor_ms:.1f} ms memory floor + {r.roofline.comm_ms:.1f} ms communication, {r.roofline.dominant} dominates); "
            "TTFT, TPOT and P99 under load, throughput and stability are not knowable from specs.",
        }
    else:
        gen = {
            "answer": "no",
            "why": f"no layout holds one {context:,}-token sequence on top of the weights"
            + (" (it loads, so a shorter --context may)." if loads else "."),
        }
        serve = {"answer": "no", "why": "it cannot generate at this context, so it cannot serve."}
    return {"loads": load, "generates": gen, "serves": serve}


def _measure_commands(spec: ModelSpec, hw: Hardware, result: LayoutResult | None, context: int) -> tuple[list[str], list[str]]:
    cannot = [
        "TTFT: prefill time depends on kernels, chunking and the queue; the roofline covers decode only.",
        "TPOT and P50/P95/P99 latency under load: batching, scheduling and expert imbalance across many tokens decide them.",
        "Throughput and concurrency at a latency target, stability over hours, cost per million tokens.",
        "Achieved bandwidth: kernels reach 60-85% of peak memory bandwidth, so real decode is slower than the floor.",
    ]
    measure: list[str] = []
    lay = result.layout if result else Layout(1, hw.count, 1, 1)
    model_id = spec.hf_id or spec.name
    prompt = min(context, 8192)
    if hw.gpu.vendor != "Apple":
        flags = f"--tensor-parallel-size {lay.tp}"
        if lay.pp > 1:
            flags += f" --pipeline-parallel-size {lay.pp}"
        if lay.dp > 1:
            flags += f" --data-parallel-size {lay.dp}"
        if lay.ep > 1:
            flags += " --enable-expert-parallel"
        measure.append(f"vllm serve {model_id} {flags} --max-model-len {context}")
        measure.append(
            f"vllm bench serve --model {model_id} --dataset-name random --random-input-len {prompt} "
            "--random-output-len 512 --num-prompts 200 --max-concurrency 1   (then 8, 32, 128: TTFT, TPOT, P99, throughput)"
        )
        sg = f"--tp {lay.tp * lay.dp if lay.ep > 1 else lay.tp}"
        if lay.pp > 1:
            sg += f" --pp-size {lay.pp}"
        if lay.ep > 1:
            sg += f" --ep-size {lay.ep} --enable-dp-attention --dp-size {lay.dp}" if lay.dp > 1 else f" --ep-size {lay.ep}"
        measure.append(f"python -m sglang.launch_server --model-path {model_id} {sg}")
        measure.append(
            f"python -m sglang.bench_serving --backend sglang --dataset-name random --random-input-len {prompt} "
            "--random-output-len 512 --num-prompts 200 --max-concurrency 32"
        )
        if lay.tp > 1:
            measure.append(
                f"all_reduce_perf -b 8M -e 8G -f 2 -g {lay.tp}   (nccl-tests/rccl-tests; save the output and pass it with "
                "--from so the link figures above become measured busbw)"
            )
    else:
        measure.append(
            "Measure prompt and generation tokens/s with your MLX engine at the context you need, one request and several at once; "
            "check the Thunderbolt link with the engine's distributed self-test before trusting TP across machines."
        )
    return cannot, measure


def advise(
    model: ModelSpec,
    hardware: Hardware,
    *,
    context: int | None = None,
    reserve: ReserveSettings | None = None,
    tp: int | None = None,
    pp: int | None = None,
    ep: int | None = None,
    dp: int | None = None,
    batch: int = 1,
    train: TrainSettings | None = None,
) -> AdvicePlan:
    """Every layout of `model` on `hardware`, ranked, with the ledger of each (see docs/advise.md)."""
    with memoized_ledgers():  # the suggestions re-ask the same stages for many layouts and counts
        return _advise(model, hardware, context=context, reserve=reserve, tp=tp, pp=pp, ep=ep, dp=dp, batch=batch,
                       train=train)


def _advise(
    model: ModelSpec,
    hardware: Hardware,
    *,
    context: int | None,
    reserve: ReserveSettings | None,
    tp: int | None,
    pp: int | None,
    ep: int | None,
    dp: int | None,
    batch: int,
    train: TrainSettings | None,
) -> AdvicePlan:
    arch = model.arch
    reserve = reserve or ReserveSettings()
    if context is None:
        context = arch.max_context
    if context < 1:
        raise AdviceError(f"--context must be at least 1 token, not {context}.")
    if context > arch.max_context:
        raise AdviceError(f"{model.name} supports at most {arch.max_context:,} tokens of context, not {context:,}.")
    if batch < 1:
        raise AdviceError(f"--batch must be at least 1, not {batch}.")
    try:
        layouts = candidate_layouts(hardware.count, arch, tp=tp, pp=pp, ep=ep, dp=dp)
    except LayoutError as exc:
        raise AdviceError(str(exc)) from None
    contexts = sorted({c for c in CAPACITY_CONTEXTS if c <= arch.max_context} | {context})
    planned: dict[int, list[list[int]]] = {}
    worst: dict[int, str] = {}
    planner_note = None
    if hardware.machine is not None:
        planned, worst, planner_note = planner_groups(hardware.machine, sorted({l.tp for l in layouts if l.tp > 1}))
    results = [
        _evaluate(model, hardware, layout, context, reserve, batch, planned, worst, planner_note, contexts) for layout in layouts
    ]
    fitting = [r for r in results if r.fits]
    by_latency = sorted(fitting, key=lambda r: (round(r.roofline.estimate_ms, 6), -r.sequences_at_context, r.layout.gpus))
    by_capacity = sorted(fitting, key=lambda r: (-r.sequences_at_context, r.roofline.estimate_ms))
    plan = AdvicePlan(
        model=model,
        hardware=hardware,
        context=context,
        batch=batch,
        results=results,
        by_latency=by_latency,
        by_capacity=by_capacity,
        verdict=_verdict(model, hardware, context, results, by_latency),
    )
    plan.notes.extend(hardware.notes)
    if hardware.machine is not None and planner_note and any(r.layout.tp > 1 for r in results):
        plan.notes.append(planner_note)
    if plan.recommended:
        rec = plan.recommended
        plan.warnings.extend(rec.warnings)
        plan.notes.extend(rec.links.notes)
    else:
        plan.suggestions = _suggestions(model, hardware, context, reserve, results)
    plan.cannot_know, plan.measure = _measure_commands(model, hardware, plan.recommended, context)
    if train is not None:
        plan.training = _training(model, hardware, train, tp=tp, pp=pp, ep=ep)
    return plan


def _training(spec: ModelSpec, hw: Hardware, settings: TrainSettings, tp: int | None, pp: int | None, ep: int | None) -> TrainingPlan:
    """A training ledger for the layout the user fixed, or a sensible default: TP inside a node,
    the fewest pipeline stages whose every rank fits, EP over the stage's data-parallel ranks."""
    count = hw.count
    per_node = max(hw.gpu.gpus_per_node, 1)
    try:
        layouts = candidate_layouts(count, spec.arch, tp=tp, pp=pp, ep=ep)
    except LayoutError as exc:
        raise AdviceError(str(exc)) from None
    if tp is None:
        limit = min(per_node, 8)
        tps = [l.tp for l in layouts if l.tp <= limit]
        chosen_tp = max(tps) if tps else min(l.tp for l in layouts)
        layouts = [l for l in layouts if l.tp == chosen_tp]
    if ep is None and spec.arch.is_moe_model:
        layouts = [l for l in layouts if l.ep == l.dp * l.tp]
    layouts.sort(key=lambda l: (l.pp, l.ep))
    last: TrainingPlan | None = None
    for layout in layouts:
        last = training_plan(spec, hw.gpu, layout, hw.memory_gib, settings)
        if last.fits:
            return last
    assert last is not None
    if pp is None:
        last.notes.append("No pipeline depth makes every rank fit with these settings; the deepest one is shown.")
    return last
