"""The per-GPU memory ledger of one layout: weights, KV/state, per-step buffers, reserves.

Each line says what it is, how big, in which format, and how parallelism split it, so the totals
can be checked by hand. The worst pipeline stage decides whether a layout fits, so that is the
stage the ledger reports (every stage is computed).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from k3diag.advise.architecture import (
    EXPERTS,
    HEADS,
    REPLICATED,
    TP,
    VOCAB,
    ModelSpec,
    TensorItem,
    embedding_items,
    head_items,
    layer_items,
)
from k3diag.advise.dtypes import bytes_per_param
from k3diag.model.shared import reading, shared

GIB = float(1 << 30)


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def label(self) -> str:
        parts = []
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        parts.append(f"TP{self.tp}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        return " x ".join(parts)


@dataclass
class ReserveSettings:
    """Memory an engine takes besides weights and state; None means the default for the layout."""

    comm_gib: float | None = None
    workspace_gib: float | None = None
    graphs_gib: float | None = None
    frag_pct: float | None = None
    os_pct: float | None = None
    chunk_tokens: int = 8192

    DEFAULT_WORKSPACE_GIB = 2.0
    DEFAULT_GRAPHS_GIB = 1.0
    DEFAULT_FRAG_PCT = 5.0


@dataclass
class LedgerLine:
    kind: str  # weights | state | step | reserve
    label: str
    gib: float
    detail: str = ""
    params: int | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "label": self.label, "gib": round(self.gib, 4), "detail": self.detail, "params": self.params}


@dataclass
class StageLedger:
    stage: int
    first_layer: int
    last_layer: int  # exclusive
    memory_gib: float
    weight_lines: list[LedgerLine] = field(default_factory=list)
    state_lines: list[LedgerLine] = field(default_factory=list)  # per sequence at the context asked
    step_lines: list[LedgerLine] = field(default_factory=list)  # once per GPU, whatever the batch
    reserve_lines: list[LedgerLine] = field(default_factory=list)
    state_bytes_per_token: float = 0.0  # grows with context
    state_bytes_fixed: float = 0.0  # per sequence, independent of context (linear-attention state)

    @property
    def weights_gib(self) -> float:
        return sum(line.gib for line in self.weight_lines)

    @property
    def state_gib_per_extra_sequence(self) -> float:
        return sum(line.gib for line in self.state_lines)

    @property
    def step_gib(self) -> float:
        return sum(line.gib for line in self.step_lines)

    @property
    def state_gib_one_sequence(self) -> float:
        """What the first sequence adds: its own state plus the per-step buffers."""
        return self.state_gib_per_extra_sequence + self.step_gib

    @property
    def reserve_gib(self) -> float:
        return sum(line.gib for line in self.reserve_lines)

    @property
    def free_gib(self) -> float:
        """Memory left for KV cache and state after weights and reserves."""
        return self.memory_gib - self.weights_gib - self.reserve_gib

    def state_gib_at(self, context: int) -> float:
        return (self.state_bytes_per_token * context + self.state_bytes_fixed) / GIB

    def sequences_at(self, context: int) -> int:
        per = self.state_gib_at(context)
        room = self.free_gib - self.step_gib
        if room <= 0:
            return 0
        if per <= 0:
            return 10**9
        return int(room // per)

    @property
    def loads(self) -> bool:
        return self.free_gib >= 0

    @property
    def fits_one_sequence(self) -> bool:
        return self.free_gib - self.state_gib_one_sequence >= 0

    def lines(self) -> list[LedgerLine]:
        return [*self.weight_lines, *self.state_lines, *self.step_lines, *self.reserve_lines]


def pp_partition(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """Contiguous stages as vLLM's get_pp_indices cuts them: even split, the remainder going to the
    stages before the last (the last stage also carries the LM head)."""
    base = num_layers // pp
    sizes = [base] * pp
    remainder = num_layers % pp
    for i in range(2, remainder + 2):
        sizes[-i] += 1
    bounds = []
    start = 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def shard_fraction(item: TensorItem, spec: ModelSpec, layout: Layout) -> float:
    a = spec.arch
    if item.shard == REPLICATED:
        return 1.0
    if item.shard == TP:
        return 1.0 / layout.tp
    if item.shard == HEADS:
        heads = item.heads or layout.tp
        return math.ceil(heads / layout.tp) / heads
    if item.shard == VOCAB:
        return math.ceil(a.vocab_size / layout.tp) / a.vocab_size
    if item.shard == EXPERTS:
        if layout.ep == 1:
            return 1.0 / layout.tp
        return math.ceil(a.num_experts / layout.ep) / a.num_experts
    raise ValueError(item.shard)


def shard_text(item: TensorItem, spec: ModelSpec, layout: Layout) -> str:
    a = spec.arch
    if item.shard == REPLICATED:
        return "whole on every GPU" if layout.tp > 1 or layout.ep > 1 else "whole"
    if layout.tp == 1 and item.shard in (TP, HEADS, VOCAB):
        return "whole (TP1)"
    if item.shard == TP:
        return f"1/{layout.tp} per GPU"
    if item.shard == HEADS:
        per = math.ceil(item.heads / layout.tp)
        return f"{per} of {item.heads} heads per GPU"
    if item.shard == VOCAB:
        return f"1/{layout.tp} of the vocabulary per GPU"
    if layout.ep == 1:
        return f"each expert split 1/{layout.tp} (TP)" if layout.tp > 1 else "all experts"
    return f"{math.ceil(a.num_experts / layout.ep)} of {a.num_experts} whole experts per GPU (EP{layout.ep})"


def item_dtype(item: TensorItem, spec: ModelSpec) -> str:
    return item.fixed_dtype or spec.dtype_of(item.group)


def stage_items(spec: ModelSpec, layout: Layout, stage: int, bounds: tuple[int, int]) -> list[tuple[TensorItem, int]]:
    """(item, count) for everything stage `stage` holds; layers of one kind are counted, not listed."""
    a = spec.arch
    kinds, representative = shared(a, ("layer_kinds", bounds), lambda: _layer_kinds(a, bounds))
    items: list[tuple[TensorItem, int]] = []
    for kind, count in kinds.items():
        items.extend((item, count) for item in layer_items(a, representative[kind]))
    last = stage == layout.pp - 1
    if stage == 0:
        items.extend((item, 1) for item in embedding_items(a))
    if last:
        for item in head_items(a):
            if item.group == "lm_head" and a.tie_word_embeddings and layout.pp == 1:
                continue  # shares the embedding table already counted
            items.append((item, 1))
    return items


def memoized_ledgers():
    """A block within which each distinct stage's weight lines (and the tensors of each layer kind,
    the bytes a token reads) are computed once; see `k3diag.model.shared`."""
    return reading()


def _layer_kinds(a, bounds: tuple[int, int]) -> tuple[Counter, dict]:
    """How many layers of each kind the range holds, and the last layer of each kind."""
    return Counter(a.layer_kind(i) for i in range(*bounds)), {a.layer_kind(i): i for i in range(*bounds)}


def _weight_lines(spec: ModelSpec, layout: Layout, stage: int, bounds: tuple[int, int]) -> list[LedgerLine]:
    # They depend on the model, TP, EP, PP, the stage and its layers; not on DP, memory or context.
    return list(shared(spec, ("weight_lines", layout.tp, layout.ep, layout.pp, stage, bounds),
                       lambda: _compute_weight_lines(spec, layout, stage, bounds)))


def _compute_weight_lines(spec: ModelSpec, layout: Layout, stage: int, bounds: tuple[int, int]) -> list[LedgerLine]:
    grouped: dict[tuple[str, str], list[float]] = {}
    formats: dict[tuple[str, str], list[str]] = {}
    # What a tensor's format and split are depends on the model, TP and EP only: asked once per tensor.
    facts: dict[TensorItem, tuple[str, tuple[str, str], float, float]] = shared(
        spec, ("item_facts", layout.tp, layout.ep), dict)
    for item, count in stage_items(spec, layout, stage, bounds):
        known = facts.get(item)
        if known is None:
            dtype = item_dtype(item, spec)
            known = facts[item] = (dtype, (item.label, shard_text(item, spec, layout)), bytes_per_param(dtype),
                                   shard_fraction(item, spec, layout))
        dtype, key, per_param, fraction = known
        acc = grouped.setdefault(key, [0.0, 0.0])
        acc[0] += item.params * count
        acc[1] += item.params * count * per_param * fraction
        if dtype not in formats.setdefault(key, []):
            formats[key].append(dtype)
    lines = []
    for (label, shard), (params, nbytes) in grouped.items():
        dtype_text = "+".join(formats[(label, shard)])
        lines.append(LedgerLine("weights", label, nbytes / GIB, f"{dtype_text}, {shard}", int(params)))
    lines.sort(key=lambda line: -line.gib)
    return lines


def _state(spec: ModelSpec, layout: Layout, bounds: tuple[int, int], context: int) -> tuple[list[LedgerLine], float, float]:
    """Per-sequence state lines at `context`, bytes per token, fixed bytes per sequence."""
    lines, per_token, fixed = shared(spec, ("state", layout.tp, bounds, context),
                                     lambda: _compute_state(spec, layout, bounds, context))
    return list(lines), per_token, fixed


def _compute_state(spec: ModelSpec, layout: Layout, bounds: tuple[int, int], context: int) -> tuple[list[LedgerLine], float, float]:
    a = spec.arch
    tp = layout.tp
    kv_bytes = bytes_per_param(spec.kv_cache_dtype)
    layers = range(*bounds)
    full = [i for i in layers if not a.is_linear(i)]
    linear = [i for i in layers if a.is_linear(i)]
    lines: list[LedgerLine] = []
    per_token = 0.0
    fixed = 0.0
    if full:
        if a.attention_kind == "mla":
            width = a.kv_lora_rank + a.qk_rope_head_dim
            per_layer = width * kv_bytes
            detail = (
                f"{len(full)} MLA layers x ({a.kv_lora_rank}+{a.qk_rope_head_dim}) x {context:,} tokens x "
                f"{spec.kv_cache_dtype}; the latent is not split by TP, every rank keeps all of it"
            )
            label = "MLA latent cache"
        else:
            heads_here = max(1, math.ceil(a.num_kv_heads / tp))
            per_layer = 2 * heads_here * a.head_dim * kv_bytes
            detail = (
                f"{len(full)} layers x K,V x {heads_here} of {a.num_kv_heads} KV heads x {a.head_dim} x "
                f"{context:,} tokens x {spec.kv_cache_dtype}"
            )
            label = "KV cache"
        per_token += per_layer * len(full)
        lines.append(LedgerLine("state", label, per_layer * len(full) * context / GIB, detail))
    if linear:
        heads_here = math.ceil(a.linear_num_heads / tp)
        d = a.linear_head_dim
        state = heads_here * d * d * bytes_per_param(spec.linear_state_dtype)
        conv = 3 * heads_here * d * max(a.linear_conv_kernel - 1, 0) * bytes_per_param(spec.conv_state_dtype)
        fixed += (state + conv) * len(linear)
        lines.append(
            LedgerLine(
                "state",
                "KDA recurrent state",
                state * len(linear) / GIB,
                f"{len(linear)} layers x {heads_here} of {a.linear_num_heads} heads x {d}x{d} x {spec.linear_state_dtype}; "
                "fixed size, whatever the context",
            )
        )
        lines.append(
            LedgerLine(
                "state",
                "KDA conv state",
                conv * len(linear) / GIB,
                f"{len(linear)} layers x q,k,v x {heads_here * d} channels x {a.linear_conv_kernel - 1} steps x "
                f"{spec.conv_state_dtype}",
            )
        )
    return lines, per_token, fixed


def _step_lines(spec: ModelSpec, reserve: ReserveSettings) -> list[LedgerLine]:
    a = spec.arch
    if not a.attn_res_block_size:
        return []
    blocks = a.attn_res_blocks
    act = bytes_per_param(spec.activation_dtype)
    nbytes = blocks * a.hidden_size * act * reserve.chunk_tokens
    return [
        LedgerLine(
            "step",
            "AttnRes block buffer",
            nbytes / GIB,
            f"{blocks} blocks x {a.hidden_size} x {spec.activation_dtype} x {reserve.chunk_tokens:,}-token prefill chunk; "
            "once per step, not per sequence",
        )
    ]


def reserve_lines(memory_gib: float, layout: Layout, reserve: ReserveSettings, cuda_graphs: bool, os_pct_default: float) -> list[LedgerLine]:
    comm_default = (1.0 if layout.tp > 1 or layout.pp > 1 else 0.0) + (2.0 if layout.ep > 1 else 0.0)
    comm = reserve.comm_gib if reserve.comm_gib is not None else comm_default
    # Small cards run smaller batches and graphs: scale the defaults down with memory, never up.
    workspace_default = min(ReserveSettings.DEFAULT_WORKSPACE_GIB, 0.05 * memory_gib)
    workspace = reserve.workspace_gib if reserve.workspace_gib is not None else workspace_default
    graphs_default = min(ReserveSettings.DEFAULT_GRAPHS_GIB, 0.03 * memory_gib) if cuda_graphs else 0.0
    graphs = reserve.graphs_gib if reserve.graphs_gib is not None else graphs_default
    frag_pct = reserve.frag_pct if reserve.frag_pct is not None else ReserveSettings.DEFAULT_FRAG_PCT
    os_pct = reserve.os_pct if reserve.os_pct is not None else os_pct_default
    lines = [
        LedgerLine("reserve", "communication buffers", comm, "NCCL/RCCL channels, custom all-reduce and all-to-all buffers (--reserve-comm-gib)"),
        LedgerLine("reserve", "kernel workspace", workspace, "GEMM/MoE/attention workspace and prefill activations (--reserve-workspace-gib)"),
        LedgerLine("reserve", "CUDA/HIP graphs", graphs, "captured decode graphs (--reserve-graphs-gib)"),
        LedgerLine("reserve", "fragmentation", memory_gib * frag_pct / 100, f"{frag_pct:g}% of {memory_gib:.1f} GiB (--reserve-frag-pct)"),
    ]
    if os_pct:
        lines.append(LedgerLine("reserve", "OS/driver limit", memory_gib * os_pct / 100, f"{os_pct:g}% not wired for the GPU (--reserve-os-pct)"))
    return lines


def stage_ledgers(
    spec: ModelSpec,
    layout: Layout,
    memory_gib: float,
    context: int,
    reserve: ReserveSettings,
    cuda_graphs: bool = True,
    os_pct_default: float = 0.0,
) -> list[StageLedger]:
    ledgers = []
    step = _step_lines(spec, reserve)
    reserves = reserve_lines(memory_gib, layout, reserve, cuda_graphs, os_pct_default)
    for stage, bounds in enumerate(pp_partition(spec.arch.num_layers, layout.pp)):
        state, per_token, fixed = _state(spec, layout, bounds, context)
        ledgers.append(
            StageLedger(
                stage=stage,
                first_layer=bounds[0],
                last_layer=bounds[1],
                memory_gib=memory_gib,
                weight_lines=_weight_lines(spec, layout, stage, bounds),
                state_lines=state,
                step_lines=list(step),
                reserve_lines=list(reserves),
                state_bytes_per_token=per_token,
                state_bytes_fixed=fixed,
            )
        )
    return ledgers


def worst_stage(ledgers: list[StageLedger], context: int) -> StageLedger:
    """The stage with the least room left after one sequence: it decides fit and capacity."""
    return min(ledgers, key=lambda s: (s.free_gib - s.step_gib - s.state_gib_at(context), s.stage))
