"""Which DP x TP x PP x EP layouts a GPU count allows, where each group's GPUs sit, and what
links each group's collectives cross.

Rank order is TP fastest, then DP, then PP (as vLLM and Megatron place ranks): a TP group is
`tp` consecutive ranks, a pipeline stage is `tp x dp` consecutive ranks. When a topology is
known, the analyzer's planner picks which physical GPUs form each TP group; otherwise GPUs are
grouped by number, which the seed article warns is not the same as grouped by distance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3diag.advise.architecture import Architecture
from k3diag.advise.catalog import GpuCatalog, GpuSpec
from k3diag.advise.links import LOCAL, LinkInfo, group_link
from k3diag.advise.memory import Layout


class LayoutError(ValueError):
    """The user asked for a layout the hardware or the model cannot take; one sentence."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_problem(arch: Architecture, tp: int) -> str | None:
    """Why the model's attention cannot be split `tp` ways, or None when it can."""
    if arch.num_heads % tp:
        return f"TP{tp} does not divide the {arch.num_heads} attention heads"
    if arch.linear_layers and arch.linear_num_heads % tp:
        return f"TP{tp} does not divide the {arch.linear_num_heads} linear-attention heads"
    if arch.attention_kind == "gqa" and arch.num_kv_heads % tp and tp % arch.num_kv_heads:
        return f"TP{tp} and the {arch.num_kv_heads} KV heads do not divide one another"
    return None


def candidate_layouts(
    count: int,
    arch: Architecture,
    tp: int | None = None,
    pp: int | None = None,
    ep: int | None = None,
    dp: int | None = None,
) -> list[Layout]:
    """Every valid layout for `count` GPUs, narrowed by what the user fixed."""
    for name, value in (("TP", tp), ("PP", pp), ("EP", ep), ("DP", dp)):
        if value is not None and value < 1:
            raise LayoutError(f"{name} must be at least 1, not {value}.")
        if value is not None and value > count:
            raise LayoutError(f"{name}{value} needs {value} GPUs but only {count} are there.")
        if value is not None and count % value:
            raise LayoutError(f"{name}{value} does not divide the {count} GPUs evenly.")
    if tp is not None and (problem := tp_problem(arch, tp)):
        raise LayoutError(f"{problem}.")
    if pp is not None and pp > arch.num_layers:
        raise LayoutError(f"PP{pp} is more stages than the model's {arch.num_layers} layers.")
    if ep is not None and ep > 1 and not arch.is_moe_model:
        raise LayoutError("EP applies to mixture-of-experts models; this model is dense.")
    layouts: list[Layout] = []
    for t in divisors(count):
        if tp is not None and t != tp:
            continue
        if tp_problem(arch, t):
            continue
        for p in divisors(count // t):
            if pp is not None and p != pp:
                continue
            if p > arch.num_layers:
                continue
            d = count // (t * p)
            if dp is not None and d != dp:
                continue
            if ep is not None:
                if (d * t) % ep:
                    continue
                options = [ep]
            elif arch.is_moe_model:
                options = sorted({1, t, d * t})
            else:
                options = [1]
            layouts.extend(Layout(dp=d, tp=t, pp=p, ep=e) for e in options)
    if not layouts:
        fixed = ", ".join(f"{n}{v}" for n, v in (("TP", tp), ("PP", pp), ("EP", ep), ("DP", dp)) if v is not None)
        raise LayoutError(f"no layout of {count} GPUs matches {fixed or 'the model'}.")
    return layouts


@dataclass
class Placement:
    order: list[int]  # physical GPU index of each rank
    source: str  # "planner" | "contiguous"
    note: str | None = None

    def tp_groups(self, layout: Layout) -> list[list[int]]:
        return [self.order[i : i + layout.tp] for i in range(0, len(self.order), layout.tp)]

    def stage_groups(self, layout: Layout) -> list[list[int]]:
        size = layout.tp * layout.dp
        return [self.order[i : i + size] for i in range(0, len(self.order), size)]

    def ep_groups(self, layout: Layout) -> list[list[int]]:
        groups = []
        for stage in self.stage_groups(layout):
            groups.extend(stage[i : i + layout.ep] for i in range(0, len(stage), layout.ep))
        return groups

    def pp_pairs(self, layout: Layout) -> list[list[int]]:
        stages = self.stage_groups(layout)
        return [[a, b] for s in range(len(stages) - 1) for a, b in zip(stages[s], stages[s + 1])]


def planner_groups(machine: Any, sizes: list[int]) -> tuple[dict[int, list[list[int]]], dict[int, str], str | None]:
    """TP groups from the analyzer's planner, tolerating its absence or failure."""
    if machine is None:
        return {}, {}, None
    try:
        from k3diag.analyze.planner import recommend_tp_groups  # type: ignore[import-not-found]
    except ImportError:
        return {}, {}, (
            "the topology planner (k3diag.analyze.planner) is not available, so TP groups are consecutive GPU "
            "numbers, which is not always the best-connected choice."
        )
    try:
        rec = recommend_tp_groups(machine, sizes)
    except Exception as exc:  # the planner is another module's code: a failure there costs a note, not the plan
        return {}, {}, f"the topology planner failed ({exc}); TP groups are consecutive GPU numbers."
    groups = {int(k): [list(map(int, g)) for g in v] for k, v in (getattr(rec, "groups", {}) or {}).items()}
    worst = {int(k): str(v) for k, v in (getattr(rec, "worst_link", {}) or {}).items() if v}
    return groups, worst, None


def make_placement(layout: Layout, gpu_ids: list[int], planned: dict[int, list[list[int]]], planner_note: str | None) -> Placement:
    groups = planned.get(layout.tp)
    if groups and sorted(g for group in groups for g in group) == sorted(gpu_ids) and all(len(g) == layout.tp for g in groups):
        return Placement(order=[g for group in groups for g in group], source="planner")
    return Placement(order=list(gpu_ids), source="contiguous", note=planner_note)


@dataclass
class LayoutLinks:
    tp: LinkInfo
    ep: LinkInfo
    pp: LinkInfo
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"tp": self.tp.to_json(), "ep": self.ep.to_json(), "pp": self.pp.to_json()}


def _worst(infos: list[tuple[LinkInfo, list[str]]]) -> tuple[LinkInfo, list[str]]:
    """The group whose collective would take longest (lowest bandwidth, then highest latency)."""
    return min(infos, key=lambda x: (x[0].bandwidth_gbs, -x[0].latency_us))


def assess_links(
    layout: Layout,
    placement: Placement,
    gpu: GpuSpec,
    catalog: GpuCatalog,
    node_of: dict[int, int],
    machine: Any = None,
    planner_worst: dict[int, str] | None = None,
) -> LayoutLinks:
    planner_worst = planner_worst or {}
    tp_infos = [
        group_link(gpu, catalog, g, node_of, machine, planner_worst.get(layout.tp), "all_reduce")
        for g in placement.tp_groups(layout)
    ]
    tp, tp_notes = _worst(tp_infos)
    ep_infos = [group_link(gpu, catalog, g, node_of, machine, None, "alltoall") for g in placement.ep_groups(layout)]
    ep, ep_notes = _worst(ep_infos)
    pp_pairs = placement.pp_pairs(layout)
    if pp_pairs:
        pp, pp_notes = _worst([group_link(gpu, catalog, pair, node_of, machine, None, "sendrecv") for pair in pp_pairs])
    else:
        pp, pp_notes = LOCAL, []
    links = LayoutLinks(tp=tp, ep=ep, pp=pp, notes=sorted(set(tp_notes + ep_notes + pp_notes)))
    if layout.tp > 1 and tp.slow:
        links.warnings.append(
            f"TP{layout.tp} puts two all-reduces per layer on {tp.label}"
            f"{f' ({tp.code})' if tp.code and tp.code != 'NET' else ''}: every token waits on them; "
            "prefer fewer TP ranks, replicas, or pipeline stages across slow links."
        )
    if layout.ep > 1 and ep.slow:
        links.warnings.append(
            f"EP{layout.ep} sends every token's expert inputs across {ep.label}"
            f"{f' ({ep.code})' if ep.code and ep.code != 'NET' else ''}: all-to-all is the most link-hungry "
            "parallelism; keep EP inside the NVLink/xGMI domain."
        )
    return links
