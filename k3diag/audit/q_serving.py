"""'TP2 against TP4, measured': the checklist's serving question answered from benchmark results in the bundle.

The predicted comparison (`tp2-vs-tp4`, from the topology) says which groups should serve better; this one
says whether the vendor measured it. Results the bundle holds (vllm bench serve, SGLang, trtllm-bench,
AIPerf, LLMPerf) are compared by `k3diag.analyze.serving`: PASS when TP2 and TP4 runs were measured under
the same load and could be ranked, WARN when they were measured but cannot be compared (or only one of
them), UNKNOWN with the exact commands when there are none.
"""

from __future__ import annotations

from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import PASS, UNKNOWN, WARN, Answer
from k3diag.audit.context import AuditContext
from k3diag.model.words import counted

SERVING_RUNS = "serving_runs"


def _groups(ctx: AuditContext) -> dict[str, list[list[int]]]:
    try:
        from k3diag.audit.q_plan import planner_recommendation

        shape, _ = planner_recommendation(ctx)
    except Exception:  # the commands below fall back to the first GPUs
        shape = None
    groups = shape.get("tp_groups") if isinstance(shape, dict) else None
    return groups if isinstance(groups, dict) else {}


def _ids(group: list[int]) -> str:
    return ",".join(str(g) for g in group)


def _served_name(model: str | None) -> str:
    """What `vllm serve` takes: the catalog entry's Hugging Face id (`moonshotai/Kimi-K3`), not k3diag's
    short name (`k3`), which no server resolves; the name as given when the catalog has no id for it."""
    if not model:
        return "MODEL"
    try:
        from k3diag.advise.catalog import find_model

        return find_model(model).hf_id or model
    except Exception:  # not in the catalog (a name of the user's own): used as given
        return model


def benchmark_commands(ctx: AuditContext) -> str:
    """The runs that would answer the question, on the planner's best groups."""
    gpus = sorted(g.index for g in facts.gpus(ctx.machine)) if facts.gpus(ctx.machine) else [0, 1, 2, 3]
    groups = _groups(ctx)
    tp2 = groups.get("2") or [gpus[:2]]
    tp4 = groups.get("4") or [gpus[:4]]
    model = _served_name(ctx.model)
    bench = ("vllm bench serve --model {model} --port {port} --dataset-name random --random-input-len 1024 "
             "--random-output-len 512 --ignore-eos --max-concurrency 16 --num-prompts 320 "
             "--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,95,99 "
             "--metadata tp={tp} gpus={gpus} --save-result --result-filename tp{tp}-gpus{name}.json")
    steps = []
    for tp, group_list in (("2", tp2), ("4", tp4)):
        for n, group in enumerate(group_list[:2]):
            port = 8000 + n
            ids = _ids(group)
            steps.append(f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ids} vllm serve {model} "
                         f"--tensor-parallel-size {tp} --port {port} 2>&1 | tee vllm-tp{tp}-gpus{ids.replace(',', '')}.log")
            steps.append(bench.format(model=model, port=port, tp=tp, gpus=ids, name=ids.replace(",", "")))
    steps.append("add the tp*.json results and vllm-*.log files to the bundle, then: k3diag serving RESULTS --from BUNDLE "
                 "--slo-tpot-ms TARGET")
    return " ; ".join(steps)


def answer_tp2_tp4_measured(ctx: AuditContext) -> Answer:
    answer = Answer(
        id="tp2-tp4-measured",
        question="TP2 against TP4, measured: TTFT, TPOT, P99 and throughput per GPU from serving benchmarks",
        seed="TP2 和 TP4 的真實性能分別是多少",
        verdict=UNKNOWN,
        summary="",
    )
    runs = list(getattr(ctx.machine, "extras", {}).get(SERVING_RUNS, []) or [])
    if facts.settled_by_gpu_count(answer, ctx.machine, "there is no TP2 or TP4 to measure"):
        return answer
    if not runs:
        answer.summary = "No serving benchmark results are in the bundle: TP2 and TP4 were not measured."
        answer.request = benchmark_commands(ctx)
        return answer
    from k3diag.analyze.serving.compare import compare

    by_tp: dict[int, list[Any]] = {}
    for run in runs:
        if run.layout.tp is not None:
            by_tp.setdefault(run.layout.tp, []).append(run)
    unknown_layout = [run for run in runs if run.layout.tp is None]
    answer.evidence = facts.dedupe_refs([run.source for run in runs], limit=4)
    for tp in sorted(by_tp):
        for run in by_tp[tp][:4]:
            tpot = run.tpot.p99 if run.tpot.p99 is not None else run.tpot.p50
            per_gpu = run.output_tok_per_s_per_gpu
            answer.details.append(
                f"{run.layout.label()} at {_load(run)}: "
                + (f"{per_gpu:.1f} output tok/s per GPU" if per_gpu is not None else "no output throughput")
                + (f", TPOT {tpot:.1f} ms" if tpot is not None else "") + f" ({run.input})"
            )
    if unknown_layout:
        one = len(unknown_layout) == 1
        answer.details.append(f"{counted(len(unknown_layout), 'result')} {'does not say its' if one else 'do not say their'} "
                              "layout (add --metadata tp=N gpus=...)")
    comparison = compare([run for tp in (2, 4) for run in by_tp.get(tp, [])])
    answer.data = {"measured_tp": sorted(by_tp), "comparable": comparison.comparable, "best": comparison.best_json(),
                   "reasons": list(comparison.reasons)}
    if 2 not in by_tp or 4 not in by_tp:
        missing = "TP4" if 2 in by_tp else ("TP2" if 4 in by_tp else "TP2 and TP4")
        answer.verdict = WARN
        answer.summary = (f"Serving results are in the bundle, but not for {missing}: the comparison the checklist asks "
                          "for was not measured.")
        answer.request = benchmark_commands(ctx)
        return answer
    if not comparison.comparable:
        answer.verdict = WARN
        answer.summary = "TP2 and TP4 were measured but cannot be compared: " + "; ".join(comparison.reasons) + "."
        answer.request = benchmark_commands(ctx)
        return answer
    answer.verdict = PASS
    answer.summary = "Measured: " + comparison.verdict
    return answer


def _load(run: Any) -> str:
    from k3diag.analyze.serving.compare import load_key, load_text

    return load_text(load_key(run))
