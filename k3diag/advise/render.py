"""The advice as text: rich tables on a terminal, plain aligned text otherwise (pipes, files,
tests), no colour when NO_COLOR is set. Both come from one list of blocks so they never differ
in content."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from k3diag.advise.architecture import active_params, present_groups, total_params
from k3diag.advise.memory import GIB, Layout, ReserveSettings, stage_ledgers
from k3diag.advise.plan import AdvicePlan, LayoutResult
from k3diag.advise.roofline import weights_read_per_token_bytes
from k3diag.model.source import quoted_aside
from k3diag.model.words import counted

TOP_LAYOUTS = 10


@dataclass
class Heading:
    text: str


@dataclass
class Text:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    right: set[int] = field(default_factory=set)  # right-aligned (numeric) columns


Block = Heading | Text | Bullets | Table


def _ctx(tokens: int) -> str:
    if tokens >= 1 << 20 and tokens % (1 << 20) == 0:
        return f"{tokens >> 20}M"
    if tokens >= 1024 and tokens % 1024 == 0:
        return f"{tokens >> 10}K"
    return f"{tokens:,}"


def _dtype_summary(plan: AdvicePlan) -> str:
    groups: dict[str, list[str]] = {}
    present = present_groups(plan.model.arch)
    for group, dtype in sorted(plan.model.dtypes.items()):
        if group not in present:
            continue
        groups.setdefault(dtype, []).append(group.replace("_", " "))
    if len(groups) == 1:
        return f"all {next(iter(groups))}"
    return "; ".join(f"{dtype}: {', '.join(names)}" for dtype, names in sorted(groups.items(), key=lambda kv: -len(kv[1])))


def _header(plan: AdvicePlan) -> list[Block]:
    m, hw = plan.model, plan.hardware
    a = m.arch
    weights = sum(s.weights_gib for s in stage_ledgers(m, Layout(1, 1, 1, 1), 1e9, 1, ReserveSettings()))
    nodes = f", {hw.nodes} nodes" if hw.nodes > 1 else ""
    shown = f" ({hw.count} of {hw.attached_count} attached shown)" if hw.attached_count else ""
    floor = "at least " if hw.gpu_list_cut is not None else ""
    return [
        Heading(f"{m.name} on {floor}{hw.count} x {hw.gpu.name}{shown}"),
        Text(
            f"Hardware ({hw.source}): {hw.memory_gib:.1f} GiB and {hw.gpu.bandwidth_gbs:g} GB/s per GPU{nodes}; "
            f"GPU-GPU fabric: {hw.gpu.fabric.kind}."
        ),
    ] + _filtered_inventory(hw) + [
        Text(
            f"Model: {total_params(a) / 1e9:,.1f}B parameters ({active_params(a) / 1e9:,.1f}B active per token), "
            f"{weights:,.1f} GiB ({weights * GIB / 1e9:,.1f} GB) of weights; {_dtype_summary(plan)}; KV cache {m.kv_cache_dtype}. "
            f"One token reads {weights_read_per_token_bytes(m) / 1e9:,.1f} GB of weights."
        ),
    ] + ([] if plan.training is not None else [
        Text(f"Context asked: {plan.context:,} tokens (model maximum {a.max_context:,}); decode batch {plan.batch}."),
    ])


def _filtered_inventory(hw) -> list[Block]:
    """A filtered `nvidia-smi -q -i 0` of an 8-GPU machine is one GPU's output, not a one-GPU machine, and a GPU
    list cut short in the paste is a floor: say that the plan is for the GPUs shown and how to plan them all."""
    if hw.gpu_list_cut is not None:
        return [Text(
            f"The GPU list in these inputs was cut short in the paste ({hw.gpu_list_cut.quoted()}): the machine has at least "
            f"{counted(hw.count, 'GPU')}, and this plans for those. For the whole machine give the output uncut, or "
            f"plan it with `--gpu {hw.gpu.id} --count N`."
        )]
    if not hw.attached_count:
        return []
    return [Text(
        f"These inputs show {counted(hw.count, 'GPU')} of the {hw.attached_count} attached{quoted_aside(hw.attached_source)}: the output was "
        f"filtered (`-i`), so this plans for the {counted(hw.count, 'GPU')} shown. For the whole machine give "
        f"`nvidia-smi -q` without `-i`, or plan it with `--gpu {hw.gpu.id} --count {hw.attached_count}`."
    )]


def _verdict(plan: AdvicePlan) -> list[Block]:
    rows = [[level, plan.verdict[level]["answer"], plan.verdict[level]["why"]] for level in ("loads", "generates", "serves")]
    return [Heading("Verdict (loads / generates / serves)"), Table(["level", "answer", "why"], rows)]


def _ledger(plan: AdvicePlan, result: LayoutResult) -> list[Block]:
    w = result.worst
    lay = result.layout
    where = f"stage {w.stage + 1} of {lay.pp}, layers {w.first_layer}-{w.last_layer - 1}" if lay.pp > 1 else f"layers 0-{w.last_layer - 1}"
    rows: list[list[str]] = []
    for line in w.weight_lines:
        rows.append([line.label, f"{line.gib:.3f}", line.detail])
    rows.append(["= weights", f"{w.weights_gib:.3f}", ""])
    for line in w.state_lines:
        rows.append([line.label, f"{line.gib:.3f}", line.detail])
    for line in w.step_lines:
        rows.append([line.label, f"{line.gib:.3f}", line.detail])
    rows.append([f"= one {_ctx(plan.context)}-token sequence", f"{w.state_gib_one_sequence:.3f}", "each further sequence adds "
                 f"{w.state_gib_per_extra_sequence:.3f}"])
    for line in w.reserve_lines:
        rows.append([line.label, f"{line.gib:.3f}", line.detail])
    rows.append(["= reserve", f"{w.reserve_gib:.3f}", "not in the published figures; change with --reserve-*"])
    rows.append(["free for KV cache and state", f"{w.free_gib:.3f}", f"of {w.memory_gib:.1f} GiB: "
                 f"{counted(result.sequences_at_context // lay.dp, 'sequence')} of {_ctx(plan.context)} per replica"])
    return [Heading(f"Memory per GPU, {lay.label} ({where})"), Table(["item", "GiB", "how"], rows, right={1})]


def _layout_row(i: int, r: LayoutResult) -> list[str]:
    w = r.worst
    return [
        str(i),
        r.layout.label,
        "yes" if r.fits else ("loads" if r.loads else "no"),
        f"{w.weights_gib:.1f}",
        f"{w.state_gib_one_sequence:.2f}",
        f"{w.free_gib:.1f}",
        str(r.sequences_at_context),
        f"{r.roofline.floor_ms:.2f}",
        f"{r.roofline.comm_ms:.2f}",
        f"{r.roofline.estimate_ms:.2f}",
        r.roofline.dominant.split()[0],
        (r.links.tp.code or r.links.tp.klass) if r.layout.tp > 1 else "-",
    ]


def _layouts(plan: AdvicePlan) -> list[Block]:
    headers = ["#", "layout", "fits", "weights", "1 seq", "free", "seqs", "floor ms", "comm ms", "est ms", "bound by", "TP link"]
    right = {0, 3, 4, 5, 6, 7, 8, 9}
    blocks: list[Block] = []
    if plan.by_latency:
        shown = plan.by_latency[:TOP_LAYOUTS]
        blocks.append(Heading(f"Layouts that fit, fastest first (GiB per GPU; seqs = {_ctx(plan.context)}-token sequences at once)"))
        blocks.append(Table(headers, [_layout_row(i + 1, r) for i, r in enumerate(shown)], right))
        hidden = len(plan.results) - len(shown)
        if hidden > 0:
            misfits = len(plan.results) - len(plan.by_latency)
            blocks.append(Text(f"1 more layout in --json, {'not fitting' if misfits else 'fitting'}." if hidden == 1
                               else f"{hidden} more layouts in --json, {misfits} of them not fitting."))
    else:
        closest = sorted(plan.results, key=lambda r: -r.worst.free_gib)[:5]
        blocks.append(Heading("Closest layouts (none fits)"))
        blocks.append(Table(headers, [_layout_row(i + 1, r) for i, r in enumerate(closest)], right))
    return blocks


def _choice(plan: AdvicePlan) -> list[Block]:
    rec = plan.recommended
    cap = plan.best_capacity
    if rec is None:
        return []
    lines = [
        f"Lowest decode time: {rec.layout.label}, {rec.roofline.estimate_ms:.2f} ms/token "
        f"({rec.roofline.floor_ms:.2f} memory floor + {rec.roofline.comm_ms:.2f} communication; {rec.roofline.dominant} dominates)."
    ]
    if cap is not None and cap is not rec:
        lines.append(
            f"Most {_ctx(plan.context)}-token sequences at once: {cap.layout.label}, {cap.sequences_at_context} sequences "
            f"(vs {rec.sequences_at_context}), at {cap.roofline.estimate_ms:.2f} ms/token."
        )
    if len(plan.by_latency) > 1:
        second = plan.by_latency[1]
        if second.roofline.estimate_ms <= rec.roofline.estimate_ms * 1.05:
            lines.append(
                f"{rec.layout.label} and {second.layout.label} are within 5% of each other: the roofline cannot separate them; "
                "choose by capacity and by what your engine supports, then measure."
            )
    if rec.layout.tp > 1:
        groups = " ".join("[" + ",".join(str(g) for g in group) + "]" for group in rec.placement.tp_groups(rec.layout))
        origin = "from the topology planner" if rec.placement.source == "planner" else "consecutive GPU numbers"
        lines.append(f"TP groups: {groups} ({origin}); TP link: {rec.links.tp.source}.")
    return [Heading("Which layout"), Bullets(lines)]


def _capacity(plan: AdvicePlan) -> list[Block]:
    if not plan.by_latency:
        return []
    contexts = plan.capacity_contexts
    picks: list[LayoutResult] = []
    for r in plan.by_latency[:4] + plan.by_capacity[:2]:
        if r not in picks:
            picks.append(r)
    rows = [[r.layout.label, *(str(r.sequences.get(c, 0)) for c in contexts)] for r in picks]
    return [
        Heading("Concurrent sequences (whole deployment, KV/state only)"),
        Table(["layout", *(_ctx(c) for c in contexts)], rows, right=set(range(1, len(contexts) + 1))),
    ]


def _roofline(plan: AdvicePlan) -> list[Block]:
    rec = plan.recommended
    if rec is None:
        return []
    r = rec.roofline
    items = list(r.lines)
    items.append(
        f"memory floor {r.floor_ms:.2f} ms = weights {r.weights_ms:.2f} ms + KV/state at {_ctx(plan.context)} tokens {r.state_ms:.2f} ms"
    )
    items.append(
        f"the quoted figure (every active weight read once, spread over all {rec.layout.tp * rec.layout.pp} GPUs of a replica) "
        f"would be {r.aggregate_floor_ms:.2f} ms: replicated tensors and pipeline stages make the real floor higher"
    )
    return [Heading(f"Decode roofline, {rec.layout.label}"), Bullets(items)]


def _training(plan: AdvicePlan) -> list[Block]:
    t = plan.training
    if t is None:
        return []
    s = t.settings
    title = (
        f"Training memory per pipeline rank: {t.layout.label}, {s.seq_len:,} tokens x micro-batch {s.micro_batch_size}, "
        f"{s.micro_batches} micro-batches, {s.optimizer}, ZeRO-{s.zero}, recompute={s.recompute}"
        + (", FP8 activations" if s.fp8_activations else "")
        + (", offload" if s.offload else "")
    )
    headers = ["rank", "layers", "in flight", "weights", "grads", "optimizer", "activations", "comm", "reserve", "total", "free"]
    rows = []
    for r in t.ranks:
        rows.append(
            [
                str(r.rank),
                f"{r.first_layer}-{r.last_layer - 1}",
                str(r.in_flight),
                f"{r.total('weights'):.1f}",
                f"{r.total('gradients'):.1f}",
                f"{r.total('optimizer'):.1f}",
                f"{r.total('activations'):.1f}",
                f"{r.total('comm'):.1f}",
                f"{r.total('reserve'):.1f}",
                f"{r.total_gib:.1f}",
                f"{r.free_gib:.1f}",
            ]
        )
    first, last = t.ranks[0], t.ranks[-1]
    summary = (
        f"Rank 0 holds {first.in_flight} micro-batches of activations, the last rank {last.in_flight}: "
        f"{first.total_gib:.1f} vs {last.total_gib:.1f} GiB ({t.imbalance_gib:+.1f} GiB). "
        f"{'Every rank fits.' if t.fits else 'Some ranks do not fit.'} Pipeline bubble {t.bubble_fraction:.1%}."
    )
    remedies = [[x.name, f"{x.saves_gib_rank0:.1f}", x.cost] for x in t.remedies]
    return [
        Heading(title),
        Table(headers, rows, right=set(range(2, 11))),
        Text(summary),
        Heading("Remedies for rank 0 (GiB saved, and the price)"),
        Table(["remedy", "saves", "cost"], remedies, right={1}),
        Bullets(t.notes),
    ]


def document(plan: AdvicePlan) -> list[Block]:
    blocks: list[Block] = _header(plan)
    if plan.training is not None:
        blocks += _training(plan)
        blocks += [Heading("Assumptions"), Bullets(plan.model.assumptions + plan.notes)] if plan.model.assumptions or plan.notes else []
        return blocks
    blocks += _verdict(plan)
    blocks += _choice(plan)
    if plan.recommended is not None:
        blocks += _ledger(plan, plan.recommended)
    else:
        closest = max(plan.results, key=lambda r: r.worst.free_gib)
        blocks += _ledger(plan, closest)
    blocks += _capacity(plan)
    blocks += _layouts(plan)
    blocks += _roofline(plan)
    if plan.warnings:
        blocks += [Heading("Warnings"), Bullets(plan.warnings)]
    if plan.suggestions:
        blocks += [Heading("What would fit"), Bullets(plan.suggestions)]
    blocks += [Heading("What this cannot know"), Bullets(plan.cannot_know)]
    blocks += [Heading("How to measure"), Bullets(plan.measure)]
    notes = plan.model.assumptions + plan.notes
    if notes:
        blocks += [Heading("Assumptions"), Bullets(notes)]
    return blocks


def render_plain(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            if out:
                out.append("")
            out.append(block.text)
            out.append("-" * min(len(block.text), 100))
        elif isinstance(block, Text):
            out.append(block.text)
        elif isinstance(block, Bullets):
            out.extend(f"- {item}" for item in block.items)
        else:
            widths = [len(h) for h in block.headers]
            for row in block.rows:
                for i, cell in enumerate(row):
                    widths[i] = max(widths[i], len(cell))
            # The last column holds prose; it is not padded.
            def fmt(cells: list[str]) -> str:
                parts = []
                for i, cell in enumerate(cells):
                    if i == len(cells) - 1:
                        parts.append(cell)
                    elif i in block.right:
                        parts.append(cell.rjust(widths[i]))
                    else:
                        parts.append(cell.ljust(widths[i]))
                return "  ".join(parts).rstrip()

            out.append(fmt(block.headers))
            out.append("  ".join("-" * w for w in widths[:-1]) + ("  " + "-" * min(widths[-1], 40) if widths else ""))
            out.extend(fmt(row) for row in block.rows)
    return "\n".join(out) + "\n"


def render_rich(blocks: list[Block]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text as RichText

    console = Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
    for block in blocks:
        if isinstance(block, Heading):
            console.print()
            console.print(block.text, style="bold", markup=False)
        elif isinstance(block, Text):
            console.print(block.text, markup=False)
        elif isinstance(block, Bullets):
            for item in block.items:
                console.print(f"- {item}", markup=False)
        else:
            table = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for i, header in enumerate(block.headers):
                table.add_column(header, justify="right" if i in block.right else "left", overflow="fold")
            for row in block.rows:
                # Cells hold brackets ("[0,1,2,3]"): plain Text objects, never markup.
                table.add_row(*(RichText(cell) for cell in row))
            console.print(table)


def render(plan: AdvicePlan, terminal: bool) -> str | None:
    """Plain text (returned) when not on a terminal; rich output printed directly otherwise."""
    blocks = document(plan)
    if terminal:
        render_rich(blocks)
        return None
    return render_plain(blocks)
