"""Training memory per pipeline rank, as the K3 training-memory article keeps its ledger.

Five rows per GPU: weights, gradients, optimizer state, activations, communication buffers.
The first three follow from parameters and parallelism (BF16 weights, FP32 main gradients,
Adam's FP32 master + two moments = 12 B/param, Muon's master + one momentum = 8 B/param on
matrices; ZeRO-1 shards optimizer state over data parallelism, ZeRO-2 also gradients, ZeRO-3
also weights). Activations follow from the micro-batch and the 1F1B schedule: rank r runs
P - r - 1 warm-up forwards before its first backward, so it holds P - r micro-batches (rank 0
holds P, the last rank 1). That is the imbalance the remedies trade against compute (recompute),
precision (FP8 activations) and bandwidth (offload).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from k3diag.advise.architecture import DTYPE_GROUPS, EXPERTS, Architecture, ModelSpec
from k3diag.advise.catalog import GpuSpec
from k3diag.advise.memory import GIB, Layout, LedgerLine, pp_partition, shard_fraction, stage_items

RECOMPUTE_MODES = ("none", "selective", "full")
OPTIMIZERS = ("adam", "muon")
ADAM_BYTES = 12.0  # FP32 master, first and second moment
MUON_BYTES = 8.0  # FP32 master and one momentum buffer (matrices only)
GRAD_BYTES = 4.0  # FP32 main gradients
WEIGHT_BYTES = 2.0  # BF16 working weights
# Groups Muon updates (2-D hidden matrices); the rest stays on AdamW, as in Kimi's recipe.
MUON_GROUPS = frozenset({"attention", "dense_mlp", "shared_experts", "routed_experts", "latent_proj"})


@dataclass
class TrainSettings:
    seq_len: int = 4096
    micro_batch_size: int = 1
    micro_batches: int | None = None  # per step; defaults to 4 x PP
    optimizer: str = "adam"
    zero: int = 1
    recompute: str = "selective"
    fp8_activations: bool = False
    offload: bool = False
    comm_gib: float = 2.0
    workspace_gib: float = 2.0
    frag_pct: float = 5.0


@dataclass
class RankLedger:
    rank: int
    first_layer: int
    last_layer: int
    in_flight: int
    lines: list[LedgerLine]
    memory_gib: float
    activation_gib_per_microbatch: float

    def total(self, kind: str | None = None) -> float:
        return sum(line.gib for line in self.lines if kind is None or line.kind == kind)

    @property
    def total_gib(self) -> float:
        return self.total()

    @property
    def free_gib(self) -> float:
        return self.memory_gib - self.total_gib

    def to_json(self) -> dict:
        return {
            "rank": self.rank,
            "layers": [self.first_layer, self.last_layer],
            "in_flight_microbatches": self.in_flight,
            "weights_gib": round(self.total("weights"), 3),
            "gradients_gib": round(self.total("gradients"), 3),
            "optimizer_gib": round(self.total("optimizer"), 3),
            "activations_gib": round(self.total("activations"), 3),
            "comm_buffers_gib": round(self.total("comm"), 3),
            "reserve_gib": round(self.total("reserve"), 3),
            "total_gib": round(self.total_gib, 3),
            "free_gib": round(self.free_gib, 3),
            "fits": self.free_gib >= 0,
            "lines": [line.to_json() for line in self.lines],
        }


@dataclass
class Remedy:
    name: str
    saves_gib_rank0: float
    cost: str

    def to_json(self) -> dict:
        return {"remedy": self.name, "saves_gib_rank0": round(self.saves_gib_rank0, 3), "cost": self.cost}


@dataclass
class TrainingPlan:
    layout: Layout
    settings: TrainSettings
    ranks: list[RankLedger]
    remedies: list[Remedy] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bubble_fraction: float = 0.0

    @property
    def fits(self) -> bool:
        return all(r.free_gib >= 0 for r in self.ranks)

    @property
    def imbalance_gib(self) -> float:
        return self.ranks[0].total_gib - self.ranks[-1].total_gib

    def to_json(self) -> dict:
        return {
            "layout": {"dp": self.layout.dp, "tp": self.layout.tp, "pp": self.layout.pp, "ep": self.layout.ep},
            "seq_len": self.settings.seq_len,
            "micro_batch_size": self.settings.micro_batch_size,
            "micro_batches": self.settings.micro_batches,
            "optimizer": self.settings.optimizer,
            "zero": self.settings.zero,
            "recompute": self.settings.recompute,
            "fp8_activations": self.settings.fp8_activations,
            "offload": self.settings.offload,
            "fits": self.fits,
            "bubble_fraction": round(self.bubble_fraction, 4),
            "imbalance_gib": round(self.imbalance_gib, 3),
            "ranks": [r.to_json() for r in self.ranks],
            "remedies": [r.to_json() for r in self.remedies],
            "notes": list(self.notes),
        }


def _layer_activation_elements(a: Architecture, layer: int, recompute: str) -> float:
    """Values stored per token for one layer's backward (BF16 units), by what the layer computes.

    none: every intermediate the backward reads (flash attention keeps no score matrix).
    selective: norms and activation functions are recomputed (as Kimi K2 trained), so their
    outputs are not stored. full: only the layer input is stored; the layer is re-run.
    """
    h = a.hidden_size
    if recompute == "full":
        return float(h)
    norms = 2 * h  # input of each RMSNorm; its output is dropped under selective recompute
    norm_outputs = 0 if recompute == "selective" else 2 * h
    kind, ffn = a.layer_kind(layer)
    if kind == "linear":
        p = a.linear_num_heads * a.linear_head_dim
        attn = 3 * p + 3 * p + (a.linear_gate_rank or a.linear_head_dim) + p + a.linear_num_heads + p + 2 * p
    elif kind == "mla":
        n = a.num_heads
        q_lora = a.q_lora_rank or 0
        attn = 2 * q_lora + n * (a.qk_nope_head_dim + a.qk_rope_head_dim) + 2 * (a.kv_lora_rank + a.qk_rope_head_dim)
        attn += n * (a.qk_nope_head_dim + a.v_head_dim) + n * a.v_head_dim * (2 if a.attention_output_gate else 1)
    else:
        attn = 2 * a.num_heads * a.head_dim + 2 * a.num_kv_heads * a.head_dim
    act_keep = 0 if recompute == "selective" else 1
    if ffn == "dense":
        mlp = 2 * a.intermediate_size + act_keep * a.intermediate_size
    else:
        width = a.expert_width
        per_expert = width + 2 * a.expert_intermediate + act_keep * a.expert_intermediate
        mlp = 2 * a.num_experts + a.experts_per_token * per_expert  # router logits in FP32 = 2 BF16 units
        if a.latent_dim:
            mlp += 2 * a.latent_dim
        if a.num_shared_experts:
            shared = a.num_shared_experts * a.shared_intermediate
            mlp += 2 * shared + act_keep * shared
    return float(norms + norm_outputs + attn + mlp)


def _activation_bytes_per_microbatch(spec: ModelSpec, layout: Layout, bounds: tuple[int, int], settings: TrainSettings, recompute: str, fp8: bool) -> float:
    a = spec.arch
    tokens = settings.seq_len * settings.micro_batch_size
    per_token = sum(_layer_activation_elements(a, i, recompute) for i in range(*bounds))
    if recompute == "full" and bounds[1] > bounds[0]:
        # The layer being recomputed needs its full working set once.
        per_token += _layer_activation_elements(a, bounds[0], "none")
    element = 1.0 if fp8 else 2.0
    # Sequence parallelism splits stored activations across the TP group.
    return tokens * per_token * element / layout.tp


def _params_per_gpu(spec: ModelSpec, layout: Layout, stage: int, bounds: tuple[int, int]) -> dict[str, float]:
    """Parameters this GPU holds, by dtype group, experts separate (they shard over expert-DP)."""
    out: dict[str, float] = {}
    for item, count in stage_items(spec, layout, stage, bounds):
        if item.group == "lm_head" and spec.arch.tie_word_embeddings and layout.pp == 1:
            continue
        out[item.group] = out.get(item.group, 0.0) + item.params * count * shard_fraction(item, spec, layout)
    return out


def training_plan(
    spec: ModelSpec, gpu: GpuSpec, layout: Layout, memory_gib: float, settings: TrainSettings, with_remedies: bool = True
) -> TrainingPlan:
    a = spec.arch
    if settings.optimizer not in OPTIMIZERS:
        raise ValueError(settings.optimizer)
    if settings.recompute not in RECOMPUTE_MODES:
        raise ValueError(settings.recompute)
    micro_batches = settings.micro_batches or 4 * layout.pp
    settings = replace(settings, micro_batches=micro_batches)
    # Training keeps BF16 working weights whatever format the released checkpoint uses.
    train_spec = replace(spec, dtypes={g: "bf16" for g in DTYPE_GROUPS})
    dp = layout.dp
    expert_dp = max(1, layout.dp * layout.tp // max(layout.ep, 1)) if layout.ep > 1 else dp
    ranks: list[RankLedger] = []
    notes = [
        "Weights BF16, gradients FP32, optimizer state FP32; the released checkpoint's MXFP4/INT4 formats do not apply to training.",
        f"1F1B: rank r holds P - r micro-batches in flight (P = {layout.pp}); bubble (P-1)/(m+P-1) with m = {micro_batches}.",
        "Activations assume sequence parallelism inside each TP group and uniform expert routing.",
    ]
    for stage, bounds in enumerate(pp_partition(a.num_layers, layout.pp)):
        params = _params_per_gpu(train_spec, layout, stage, bounds)
        dense_params = sum(v for g, v in params.items() if g != "routed_experts")
        expert_params = params.get("routed_experts", 0.0)
        lines: list[LedgerLine] = []
        w_div = (dp, expert_dp) if settings.zero >= 3 else (1, 1)
        weights = (dense_params / w_div[0] + expert_params / w_div[1]) * WEIGHT_BYTES
        lines.append(LedgerLine("weights", "weights (BF16)", weights / GIB, f"{(dense_params + expert_params) / 1e9:.2f}B params on this GPU" + (" / DP (ZeRO-3)" if settings.zero >= 3 else ""), int(dense_params + expert_params)))
        g_div = (dp, expert_dp) if settings.zero >= 2 else (1, 1)
        grads = (dense_params / g_div[0] + expert_params / g_div[1]) * GRAD_BYTES
        lines.append(LedgerLine("gradients", "gradients (FP32)", grads / GIB, "sharded over DP (ZeRO-2)" if settings.zero >= 2 else "full copy per GPU"))
        o_div = (dp, expert_dp) if settings.zero >= 1 else (1, 1)
        opt = 0.0
        for group, count in params.items():
            per = MUON_BYTES if settings.optimizer == "muon" and group in MUON_GROUPS else ADAM_BYTES
            opt += count * per / (o_div[1] if group == "routed_experts" else o_div[0])
        detail = "Muon on matrices (8 B/param), AdamW elsewhere (12 B/param)" if settings.optimizer == "muon" else "AdamW: FP32 master + 2 moments (12 B/param)"
        lines.append(LedgerLine("optimizer", f"optimizer state ({settings.optimizer})", opt / GIB, detail + (" / DP (ZeRO-1)" if settings.zero >= 1 else "")))
        per_mb = _activation_bytes_per_microbatch(spec, layout, bounds, settings, settings.recompute, settings.fp8_activations)
        in_flight = layout.pp - stage
        held = 1 if settings.offload else min(in_flight, micro_batches)
        lines.append(
            LedgerLine(
                "activations",
                "activations",
                per_mb * held / GIB,
                f"{held} x {per_mb / GIB:.2f} GiB per micro-batch ({settings.seq_len:,} tokens x {settings.micro_batch_size}, "
                f"recompute={settings.recompute}{', FP8' if settings.fp8_activations else ''}"
                f"{', offloaded but one' if settings.offload else ''})",
            )
        )
        if stage == layout.pp - 1:
            logits = settings.seq_len * settings.micro_batch_size * math.ceil(a.vocab_size / layout.tp) * 4
            lines.append(LedgerLine("activations", "logits for the loss (FP32)", logits / GIB, "tokens x vocabulary / TP x 4 B"))
        if settings.optimizer == "muon":
            largest = max((item.params * shard_fraction(item, train_spec, layout) for item, _ in stage_items(train_spec, layout, stage, bounds) if item.shard != EXPERTS), default=0)
            lines.append(LedgerLine("comm", "Muon gather buffer", largest * 4 / GIB, "one matrix gathered whole for Newton-Schulz; P2P Muon receives 1/N instead"))
        lines.append(LedgerLine("comm", "communication buffers", settings.comm_gib, "NCCL buckets, all-to-all and P2P buffers"))
        lines.append(LedgerLine("reserve", "kernel workspace", settings.workspace_gib, "GEMM and attention workspace"))
        lines.append(LedgerLine("reserve", "fragmentation", memory_gib * settings.frag_pct / 100, f"{settings.frag_pct:g}% of {memory_gib:.1f} GiB"))
        ranks.append(RankLedger(stage, bounds[0], bounds[1], held, lines, memory_gib, per_mb / GIB))
    plan = TrainingPlan(
        layout=layout,
        settings=settings,
        ranks=ranks,
        notes=notes,
        bubble_fraction=(layout.pp - 1) / (micro_batches + layout.pp - 1),
    )
    if with_remedies:
        plan.remedies = _remedies(spec, gpu, layout, memory_gib, settings, ranks[0])
    return plan


def _remedies(spec: ModelSpec, gpu: GpuSpec, layout: Layout, memory_gib: float, settings: TrainSettings, rank0: RankLedger) -> list[Remedy]:
    """What each remedy would save on rank 0 and what it costs, against the settings as given.

    Savings are the difference of two full ledgers, so they include every knock-on effect.
    """

    def rank0_total(**changes: object) -> float:
        other = training_plan(spec, gpu, layout, memory_gib, replace(settings, **changes), with_remedies=False)
        return other.ranks[0].total_gib

    base = rank0.total_gib
    held = rank0.in_flight
    per_mb = rank0.activation_gib_per_microbatch
    remedies: list[Remedy] = []
    costs = {
        "none": "no recompute: fastest, most memory",
        "selective": "re-runs norms and activation functions in backward: a few % more FLOPs",
        "full": "re-runs each layer's forward in backward: about +33% compute (4 passes instead of 3)",
    }
    for mode in RECOMPUTE_MODES:
        if mode != settings.recompute:
            remedies.append(Remedy(f"recompute={mode}", base - rank0_total(recompute=mode), costs[mode]))
    if not settings.fp8_activations:
        remedies.append(
            Remedy("FP8 activations", base - rank0_total(fp8_activations=True), "halves stored activations; costs precision (quantization error in the backward pass)")
        )
    if not settings.offload and held > 1:
        host_gbs = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}.get(gpu.pcie_gen or 4, 31.5) * 0.8
        transfer_s = 2 * per_mb * GIB / (host_gbs * 1e9)
        remedies.append(
            Remedy(
                "offload in-flight activations to CPU",
                base - rank0_total(offload=True),
                f"moves {per_mb:.2f} GiB out and back per micro-batch over PCIe (~{host_gbs:.0f} GB/s): "
                f"{transfer_s * 1e3:.0f} ms per micro-batch to hide behind compute; host memory holds {per_mb * (held - 1):.1f} GiB per GPU",
            )
        )
    if layout.pp > 1 and held > 1:
        average = (layout.pp + 1) / 2
        remedies.append(
            Remedy(
                "balance activations across PP ranks (K3 remote offload)",
                per_mb * max(held - average, 0),
                f"rank 0 keeps the average {average:g} micro-batches instead of {held}; the rest travels to later PP ranks over the network",
            )
        )
    for stage in (1, 2, 3):
        if settings.zero < stage and layout.dp > 1:
            what = {1: "optimizer state", 2: "optimizer state and gradients", 3: "optimizer state, gradients and weights"}[stage]
            cost = {
                1: "an all-gather of updated weights per step",
                2: "reduce-scatter instead of all-reduce: about the same traffic",
                3: "an all-gather of every layer's weights in forward and backward: ~1.5x the data-parallel traffic",
            }[stage]
            remedies.append(Remedy(f"ZeRO-{stage} (shard {what} over DP)", base - rank0_total(zero=stage), cost))
    if settings.optimizer == "adam":
        remedies.append(
            Remedy("Muon instead of AdamW", base - rank0_total(optimizer="muon"), "one momentum instead of two moments on matrices; Newton-Schulz adds compute and a gather per matrix")
        )
    return remedies
