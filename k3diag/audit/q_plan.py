"""How the target model would be laid out here (DP/TP/PP/EP) and TP2 against TP4.

Both answers come from other packages (`k3diag.advise` for the model's memory and layout,
`k3diag.analyze.planner` for the TP groups); they are imported lazily and any failure turns
into an UNKNOWN answer with a note, so the audit never depends on them being complete.
"""

from __future__ import annotations

from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import PASS, UNKNOWN, WARN, Answer
from k3diag.audit.context import AuditContext
from k3diag.model.topology import path_rank

SERVING_REQUEST = (
    "serve the model at TP1, TP2 and TP4 on the best groups (e.g. `vllm serve MODEL --tensor-parallel-size 2` "
    "with CUDA_VISIBLE_DEVICES set to a group) and run the same load against each (e.g. `vllm bench serve "
    "--model MODEL --num-prompts 500`); report TTFT, TPOT, tokens/s per request and in total, concurrency, "
    "P50/P95/P99 latency, GPU utilisation and memory"
)


# --------------------------------------------------------------------------- planner


def planner_recommendation(ctx: AuditContext) -> tuple[dict | None, str | None]:
    """The planner's recommendation as JSON, or (None, why not)."""
    if "planner" in ctx.cache:
        return ctx.cache["planner"]
    result: tuple[dict | None, str | None]
    try:
        from k3diag.analyze.planner import recommend_tp_groups
    except Exception as exc:  # the planner is another domain's module; absence is an UNKNOWN, not a crash
        result = (None, f"the TP planner is not available ({type(exc).__name__}: {exc})")
    else:
        try:
            rec = recommend_tp_groups(ctx.machine)
        except Exception as exc:
            result = (None, f"the TP planner failed on this bundle ({type(exc).__name__}: {exc})")
        else:
            if rec is None:
                result = (None, "fewer than two GPUs are known")
            else:
                shape = rec.to_json() if hasattr(rec, "to_json") else rec
                result = (shape, None) if isinstance(shape, dict) else (None, "the planner returned no groups")
    ctx.cache["planner"] = result
    return result


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _groups_text(groups: Any) -> str:
    if not isinstance(groups, list):
        return "?"
    return " ".join("{" + ",".join(str(i) for i in group) + "}" for group in groups if isinstance(group, list))


def answer_tp2_vs_tp4(ctx: AuditContext) -> Answer:
    answer = Answer(
        id="tp2-vs-tp4",
        question="TP2 or TP4: which GPU groups, and how do they compare?",
        seed="TP2 和 TP4 的真實性能分別是多少",
        verdict=UNKNOWN,
        summary="",
    )
    if facts.settled_by_gpu_count(answer, ctx.machine, "tensor parallelism does not apply"):
        return answer
    shape, why_not = planner_recommendation(ctx)
    measured = _measured_tp_busbw(ctx)
    for n, busbw in sorted(measured.items()):
        answer.details.append(f"measured all-reduce busbw at {n} GPUs: {busbw:g} GB/s")
    if shape is None:
        answer.summary = f"No TP grouping could be computed: {why_not}."
        answer.request = "nvidia-smi topo -m ; nvidia-smi topo -p2p r ; " + SERVING_REQUEST
        answer.data = {"note": why_not, "measured_busbw": measured}
        return answer
    groups = _dict(shape.get("tp_groups"))
    worst = _dict(shape.get("worst_link"))
    rationale = _dict(shape.get("rationale"))
    speeds = _dict(shape.get("worst_link_gbs"))
    devices = _dict(shape.get("cuda_visible_devices"))
    answer.data = {"tp_groups": {k: groups[k] for k in ("2", "4") if k in groups},
                   "worst_link": {k: worst.get(k) for k in ("2", "4") if k in worst},
                   "comparison": shape.get("comparison"), "measured_busbw": measured}
    for size in ("2", "4"):
        if size not in groups:
            continue
        speed = facts.as_float(speeds.get(size))
        line = f"TP{size}: groups {_groups_text(groups[size])}, slowest link {worst.get(size) or 'unknown'}"
        if speed:
            line += f" (~{speed:g} GB/s)"
        answer.details.append(line)
        if rationale.get(size):
            answer.details.append(f"  {rationale[size]}")
        if isinstance(devices.get(size), list) and devices[size]:
            answer.details.append("  " + " | ".join(str(d) for d in devices[size]))
    if shape.get("comparison"):
        answer.details.append(str(shape["comparison"]))
    answer.details.append("Real TTFT/TPOT and P99 latency need a serving benchmark at each TP size.")
    answer.evidence = facts.dedupe_refs(_worst_link_refs(ctx, shape), limit=4)
    # The slowest path class inside the chosen groups, read from the topology itself; the
    # planner's own worst link may be picked by measured bandwidth, where equal numbers hide a
    # worse class.
    tp2 = _worst_class(ctx, groups.get("2")) or worst.get("2")
    tp4 = _worst_class(ctx, groups.get("4")) or worst.get("4")
    if "2" not in groups:
        answer.summary = "The planner formed no TP2 groups."
        answer.request = SERVING_REQUEST
        return answer
    if "4" not in groups:
        answer.verdict = WARN if tp2 in ("SYS",) else PASS
        answer.summary = (f"Only TP2 fits this GPU count: groups {_groups_text(groups['2'])} on {tp2 or 'unknown'} "
                          "links.")
        if tp2 is None:
            answer.verdict = UNKNOWN
            answer.request = "nvidia-smi topo -m"
        return answer
    if tp2 is None or tp4 is None:
        answer.verdict = UNKNOWN
        answer.summary = "The TP groups are known but not the links inside them."
        answer.request = "nvidia-smi topo -m ; nvidia-smi topo -p2p r"
        return answer
    if path_rank(tp4) > path_rank(tp2):
        answer.verdict = WARN
        answer.summary = (f"TP2 groups {_groups_text(groups['2'])} stay on {tp2} links, but any TP4 group has to "
                          f"cross {tp4}: run TP2 replicas, and TP4 only if the model does not fit in two GPUs.")
        answer.request = SERVING_REQUEST
    else:
        answer.verdict = WARN if tp4 == "SYS" else PASS
        answer.summary = (f"TP4 groups {_groups_text(groups['4'])} are as well connected as TP2 groups ({tp4}); TP4 "
                          "costs no slower link than TP2 here.")
        if tp4 == "SYS":
            answer.summary = "Both TP2 and TP4 groups cross sockets (SYS): prefer data parallelism on this box."
            answer.request = SERVING_REQUEST
    return answer


def _worst_class(ctx: AuditContext, groups: Any) -> str | None:
    if not isinstance(groups, list):
        return None
    links = facts.gpu_links(ctx.machine)
    worst: str | None = None
    seen = False
    for group in groups:
        if not isinstance(group, list):
            continue
        labels = {f"GPU{i}" for i in group}
        for (a, b), link in links.items():
            if a in labels and b in labels:
                seen = True
                if worst is None or path_rank(link.path) > path_rank(worst):
                    worst = link.path
    return worst if seen else None


def _measured_tp_busbw(ctx: AuditContext) -> dict[int, float]:
    out: dict[int, float] = {}
    for record, shape in facts.nccl_tests_runs(ctx.machine):
        n = facts.nranks_of(record, shape)
        busbw = facts.best_busbw(shape)
        if n in (2, 4) and busbw is not None:
            out[n] = max(busbw, out.get(n, 0.0))
    return out


def _worst_link_refs(ctx: AuditContext, shape: dict) -> list:
    links = facts.gpu_links(ctx.machine)
    refs = []
    for size in ("2", "4"):
        for group in facts.as_list(_dict(shape.get("tp_groups")).get(size)):
            if not isinstance(group, list):
                continue
            labels = [f"GPU{i}" for i in group]
            inside = [link for (a, b), link in links.items() if a in labels and b in labels]
            if inside:
                refs.append(max(inside, key=lambda link: path_rank(link.path)).source)
    return refs


# --------------------------------------------------------------------------- advise


def advise_summary(ctx: AuditContext) -> tuple[dict | None, str | None]:
    """The advise package's plan for the target model on this machine, as a dict, or (None, why not)."""
    if "advise" in ctx.cache:
        return ctx.cache["advise"]
    result: tuple[dict | None, str | None]
    if not ctx.model:
        result = (None, "no target model was given (use --model, e.g. --model k3)")
    else:
        result = _call_advise(ctx)
    ctx.cache["advise"] = result
    return result


def _call_advise(ctx: AuditContext) -> tuple[dict | None, str | None]:
    """k3diag.advise.plan: find_model -> hardware_from_machine -> advise -> to_json()."""
    try:
        from k3diag.advise import plan as plan_module
        from k3diag.advise.catalog import find_model
        from k3diag.advise.hardware import AdviceError, hardware_from_machine
        from k3diag.advise.memory import memoized_ledgers
    except Exception as exc:
        return None, f"the advise package is not available ({type(exc).__name__}: {exc})"
    try:
        spec = find_model(ctx.model or "")
    except Exception as exc:  # CatalogError names the close matches
        return None, str(exc).rstrip(".")
    try:
        hardware = hardware_from_machine(ctx.machine, ctx.source)
        with memoized_ledgers():  # the plan and its JSON ask for the same ledgers
            plan = plan_module.advise(spec, hardware)
            shape = plan.to_json()
    except Exception as exc:
        # AdviceError is a sentence for the user (no GPUs, GPU not in the catalog); anything else is a fault
        # of k3diag, named so it can be reported
        if isinstance(exc, AdviceError):
            return None, f"advise could not plan: {str(exc).rstrip('.')}"
        return None, f"advise could not plan ({type(exc).__name__}: {exc})"
    if not isinstance(shape, dict):
        return None, "advise returned nothing usable"
    return shape, None


def _layouts(shape: dict) -> list[dict]:
    layouts = facts.as_list(shape.get("layouts"))
    return [layout for layout in layouts if isinstance(layout, dict)]


def _layout_text(layout: dict) -> str:
    parts = [f"{key.upper()}{layout.get(key)}" for key in ("dp", "tp", "pp", "ep") if layout.get(key) is not None]
    return " x ".join(parts) if parts else "?"


def answer_parallelism(ctx: AuditContext) -> Answer:
    answer = Answer(
        id="parallelism",
        question="Which of DP, TP, PP and EP does the target model need on this machine?",
        seed="目標模型準備使用 DP、TP、PP 還是 EP",
        verdict=UNKNOWN,
        summary="",
    )
    shape, why_not = advise_summary(ctx)
    if shape is None:
        answer.summary = f"Not answered: {why_not}."
        answer.request = (f"k3diag advise --model {ctx.model or 'MODEL'} --from {ctx.source}"
                          + ("" if ctx.model else "   (name the target model)"))
        answer.data = {"note": why_not}
        return answer
    levels = shape.get("verdict") if isinstance(shape.get("verdict"), dict) else {}
    loads = _level(levels, "loads")
    generates = _level(levels, "generates")
    recommended = shape.get("recommended") if isinstance(shape.get("recommended"), dict) else None
    model_name = (shape.get("model") or {}).get("name") if isinstance(shape.get("model"), dict) else None
    name = model_name or ctx.model
    for level in ("loads", "generates", "serves"):
        item = levels.get(level)
        if isinstance(item, dict):
            answer.details.append(f"{level}: {item.get('answer')}: {item.get('why')}")
    layouts = _layouts(shape)
    for layout in layouts[:5]:
        answer.details.append(_layout_line(layout))
    warnings = [str(w) for w in facts.as_list(shape.get("warnings"))]
    answer.details.extend(warnings[:4])
    answer.data = {"model": name, "levels": {k: _level(levels, k) for k in ("loads", "generates", "serves")},
                   "recommended": _layout_text(recommended) if recommended else None,
                   "best_capacity": shape.get("best_capacity")}
    context = shape.get("context")
    context_text = f" at {context:,} tokens of context" if isinstance(context, int) else ""
    if recommended is not None:
        needs = [dim.upper() for dim in ("dp", "tp", "pp", "ep") if (recommended.get(dim) or 1) > 1]
        answer.verdict = WARN if warnings else PASS
        answer.summary = (f"{name}: {_layout_text(recommended)}"
                          + (f" (uses {', '.join(needs)})" if needs else " (one GPU per replica)")
                          + f" is the best layout that fits{context_text}; serving speed needs measurement.")
        if warnings:
            answer.request = SERVING_REQUEST
    elif loads == "yes":
        answer.verdict = WARN
        answer.summary = (f"{name} loads on this machine but no layout holds one sequence{context_text}; "
                          "a shorter context may fit.")
        answer.request = f"k3diag advise --model {ctx.model} --from {ctx.source} --context 131072"
    else:
        # A model too big for the machine is a planning answer, not a defect of the machine: WARN, with the
        # shortfall and what would fit, never FAIL (a FAIL means "do not accept the machine").
        answer.verdict = WARN
        suggestions = [str(item) for item in facts.as_list(shape.get("suggestions"))[:3]]
        shortfall = _shortfall(layouts)
        if shortfall is not None:
            missing, layout = shortfall
            answer.summary = (f"{name} does not fit on this machine: even its best layout, {_layout_text(layout)}, "
                              f"needs {missing:.1f} more GiB per GPU. This is a sizing answer, not a machine defect")
        else:
            answer.summary = f"{name} does not fit on this machine in any DP/TP/PP/EP layout; a sizing answer, not a defect"
        answer.summary += (f"; what would fit: {suggestions[0].rstrip('.')}" if suggestions else "") + "."
        answer.details.extend(suggestions)
        answer.data["needs_gib_per_gpu"] = round(shortfall[0], 1) if shortfall is not None else None
        answer.data["would_fit"] = suggestions
        answer.request = f"k3diag advise --model {ctx.model} --from {ctx.source}   (every layout, dtype and GPU count)"
    del generates
    return answer


def _shortfall(layouts: list[dict]) -> tuple[float, dict] | None:
    """The smallest per-GPU memory shortfall among the layouts (free GiB below zero), and its layout."""
    best: tuple[float, dict] | None = None
    for layout in layouts:
        free = facts.as_float(_dict(layout.get("per_gpu")).get("free_gib"))
        if free is None or free >= 0:
            continue
        if best is None or -free < best[0]:
            best = (-free, layout)
    return best


def _level(levels: dict, name: str) -> str | None:
    item = levels.get(name)
    if isinstance(item, dict):
        value = item.get("answer")
        return str(value) if value is not None else None
    return None


def _layout_line(layout: dict) -> str:
    per_gpu = _dict(layout.get("per_gpu"))
    line = f"{_layout_text(layout)}: {'fits' if layout.get('fits') else ('loads' if layout.get('loads') else 'does not load')}"
    weights, free = facts.as_float(per_gpu.get("weights_gib")), facts.as_float(per_gpu.get("free_gib"))
    if weights is not None:
        line += f", weights {weights:.1f} GiB/GPU"
    if free is not None:  # a layout that does not load is short of memory, not "-1413.1 GiB free"
        line += f", {free:.1f} GiB free" if free >= 0 else f", {-free:.1f} GiB short per GPU"
    floor, comm = facts.as_float(layout.get("decode_ms_floor")), facts.as_float(layout.get("decode_ms_comm"))
    if floor is not None:
        line += f", decode >= {floor:.1f} ms/token" + (f" + {comm:.1f} ms communication" if comm is not None else "")
    return line
