"""A model's architecture, normalized, and the inventory of its weight tensors.

Every memory and traffic figure the advisor prints is derived from this inventory: each tensor
knows its parameter count, its dtype group (so a checkpoint's mixed precision is honoured) and
how tensor parallelism splits it (by heads, by FFN columns, by vocabulary, by expert) or leaves
it whole on every rank. Nothing about a model's size is stored; it is counted here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from k3diag.model.shared import shared

# Dtype groups a model assigns storage formats to.
DTYPE_GROUPS: tuple[str, ...] = (
    "embeddings",
    "lm_head",
    "attention",
    "dense_mlp",
    "shared_experts",
    "routed_experts",
    "latent_proj",
    "router",
    "norms",
)
# Groups a plain `--dtype X` re-quantizes; embeddings, LM head, routers and norms keep their format
# because that is what AWQ/GPTQ/FP8 recipes do.
LINEAR_GROUPS: tuple[str, ...] = ("attention", "dense_mlp", "shared_experts", "routed_experts", "latent_proj")

# How tensor/expert parallelism treats a tensor.
REPLICATED = "replicated"
TP = "tp"  # split by FFN columns/rows
HEADS = "heads"  # split by attention heads (GQA KV heads divide down to 1 per rank)
VOCAB = "vocab"  # vocabulary-parallel embedding / LM head
EXPERTS = "experts"  # routed experts: TP-split when EP is 1, whole experts per rank under EP


@dataclass
class Architecture:
    """The fields memory and traffic depend on, in one vocabulary for all model families."""

    hidden_size: int
    num_layers: int
    vocab_size: int
    max_context: int
    num_heads: int
    tie_word_embeddings: bool = False
    # Full attention: "gqa" (MHA is GQA with kv == heads) or "mla".
    attention_kind: str = "gqa"
    num_kv_heads: int = 0
    head_dim: int = 0
    qk_norm: bool = False
    attention_output_gate: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Linear attention (Kimi Delta Attention): which layers, and its shapes.
    linear_layers: tuple[int, ...] = ()
    linear_num_heads: int = 0
    linear_head_dim: int = 0
    linear_conv_kernel: int = 0
    linear_gate_rank: int = 0  # low-rank decay gate f_a/f_b
    linear_output_gate_rank: int = 0  # 0: full-rank output gate g_proj; else g_a/g_b of this rank
    # Feed-forward.
    intermediate_size: int = 0
    dense_layers: tuple[int, ...] = ()  # layers with a dense FFN when the model has experts
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    num_shared_experts: int = 0
    shared_intermediate: int = 0  # per shared expert
    latent_dim: int | None = None  # latent MoE: experts run at this width
    latent_norm: bool = False
    router_bias: bool = False
    attn_res_block_size: int | None = None

    # -- layer schedule ---------------------------------------------------------
    def is_linear(self, layer: int) -> bool:
        return layer in self._linear_set

    def is_moe(self, layer: int) -> bool:
        return self.num_experts > 0 and layer not in self._dense_set

    @property
    def _linear_set(self) -> frozenset[int]:
        return self._layer_set("linear_layers")

    @property
    def _dense_set(self) -> frozenset[int]:
        return self._layer_set("dense_layers")

    def _layer_set(self, name: str) -> frozenset[int]:
        """The layers of a schedule as a set, built once per tuple: the planner asks `is_linear` and
        `is_moe` hundreds of thousands of times. Kept outside the dataclass fields (equality, repr
        and `replace` ignore it) and rebuilt when the field is given another tuple."""
        layers = getattr(self, name)
        cached = self.__dict__.get("_sets_" + name)
        if cached is None or cached[0] is not layers:
            cached = (layers, frozenset(layers))
            self.__dict__["_sets_" + name] = cached
        return cached[1]

    @property
    def is_moe_model(self) -> bool:
        return self.num_experts > 0

    @property
    def num_linear_layers(self) -> int:
        return len(self.linear_layers)

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_layers - self.num_linear_layers

    @property
    def num_moe_layers(self) -> int:
        return sum(1 for i in range(self.num_layers) if self.is_moe(i))

    @property
    def expert_width(self) -> int:
        """Width of the activations that travel to experts (latent MoE dispatches latents)."""
        return self.latent_dim or self.hidden_size

    @property
    def attn_res_blocks(self) -> int:
        if not self.attn_res_block_size:
            return 0
        return math.ceil(self.num_layers / self.attn_res_block_size)

    def layer_kind(self, layer: int) -> tuple[str, str]:
        attention = "linear" if self.is_linear(layer) else self.attention_kind
        ffn = "moe" if self.is_moe(layer) else "dense"
        return attention, ffn

    def validate(self) -> list[str]:
        """Sentences naming fields that make no sense; empty when the architecture is usable."""
        problems = []
        for name in ("hidden_size", "num_layers", "vocab_size", "num_heads", "max_context"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be a positive number")
        if self.attention_kind == "gqa" and (self.num_kv_heads <= 0 or self.head_dim <= 0):
            problems.append("GQA attention needs num_key_value_heads and head_dim")
        if self.attention_kind == "mla" and self.kv_lora_rank <= 0:
            problems.append("MLA attention needs kv_lora_rank")
        if self.num_experts and (self.experts_per_token <= 0 or self.expert_intermediate <= 0):
            problems.append("an MoE model needs experts per token and the expert intermediate size")
        elif self.num_experts and self.experts_per_token > self.num_experts:
            # a token cannot be routed to more experts than there are (the EP estimate divided by C(E, k) = 0)
            problems.append(f"experts per token ({self.experts_per_token:,}) cannot exceed the experts "
                            f"({self.num_experts:,})")
        if not self.num_experts and self.intermediate_size <= 0:
            problems.append("a dense model needs intermediate_size")
        if any(layer < 0 or layer >= self.num_layers for layer in self.linear_layers):
            problems.append("a linear-attention layer index lies outside the model")
        return problems


@dataclass(frozen=True)
class TensorItem:
    """One tensor (or a set of same-shaped tensors) of one layer, or of the whole model."""

    label: str
    group: str  # dtype group
    params: int
    shard: str
    heads: int = 0  # for HEADS sharding: how many heads the tensor holds
    fixed_dtype: str | None = None  # parameters kept in this format whatever the group says
    read_per_token: bool = True  # the embedding table is looked up, not streamed


@dataclass
class ModelSpec:
    """A model as the advisor uses it: architecture plus storage formats and provenance."""

    id: str
    name: str
    arch: Architecture
    dtypes: dict[str, str]
    kv_cache_dtype: str = "bf16"
    linear_state_dtype: str = "fp32"
    conv_state_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    total_params_claimed: str | None = None
    source: str | None = None
    assumptions: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    hf_id: str | None = None  # repository id for engine commands

    def dtype_of(self, group: str) -> str:
        return self.dtypes.get(group, "bf16")


def _mla_items(a: Architecture) -> list[TensorItem]:
    h, n = a.hidden_size, a.num_heads
    qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
    items: list[TensorItem] = []
    if a.q_lora_rank:
        # Down-projections feed every head, so tensor parallelism keeps them whole on each rank.
        items.append(TensorItem("MLA down-projections q_a/kv_a", "attention", h * a.q_lora_rank, REPLICATED))
        items.append(TensorItem("MLA q_b/kv_b/o (per head)", "attention", a.q_lora_rank * n * qk_head, HEADS, n))
        items.append(TensorItem("norms and gates", "norms", a.q_lora_rank, REPLICATED))
    else:
        items.append(TensorItem("MLA q_b/kv_b/o (per head)", "attention", h * n * qk_head, HEADS, n))
    items.append(TensorItem("MLA down-projections q_a/kv_a", "attention", h * (a.kv_lora_rank + a.qk_rope_head_dim), REPLICATED))
    items.append(TensorItem("norms and gates", "norms", a.kv_lora_rank, REPLICATED))
    items.append(TensorItem("MLA q_b/kv_b/o (per head)", "attention", a.kv_lora_rank * n * (a.qk_nope_head_dim + a.v_head_dim), HEADS, n))
    items.append(TensorItem("MLA q_b/kv_b/o (per head)", "attention", n * a.v_head_dim * h, HEADS, n))
    if a.attention_output_gate:
        items.append(TensorItem("MLA q_b/kv_b/o (per head)", "attention", h * n * a.v_head_dim, HEADS, n))
    return items


def _gqa_items(a: Architecture) -> list[TensorItem]:
    h, n, kv, d = a.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim
    items = [
        TensorItem("attention q/o (per head)", "attention", 2 * h * n * d, HEADS, n),
        TensorItem("attention k/v (per KV head)", "attention", 2 * h * kv * d, HEADS, kv),
    ]
    if a.attention_output_gate:
        items.append(TensorItem("attention q/o (per head)", "attention", h * n * d, HEADS, n))
    if a.qk_norm:
        items.append(TensorItem("norms and gates", "norms", 2 * d, REPLICATED))
    return items


def _kda_items(a: Architecture) -> list[TensorItem]:
    h, n, d = a.hidden_size, a.linear_num_heads, a.linear_head_dim
    p = n * d
    rank = a.linear_gate_rank or d
    g_rank = a.linear_output_gate_rank
    gate: list[TensorItem] = []
    if g_rank:
        gate = [
            TensorItem("KDA decay-gate f_a", "attention", h * g_rank, REPLICATED),
            TensorItem("KDA q/k/v/g/o, f_b, beta (per head)", "attention", g_rank * p, HEADS, n),
        ]
    return gate + [
        # q, k, v, the full-rank output gate g and the output projection o: all split by head.
        TensorItem("KDA q/k/v/g/o, f_b, beta (per head)", "attention", (4 if g_rank else 5) * h * p, HEADS, n),
        TensorItem("KDA q/k/v/g/o, f_b, beta (per head)", "attention", rank * p, HEADS, n),  # f_b
        TensorItem("KDA q/k/v/g/o, f_b, beta (per head)", "attention", h * n, HEADS, n),  # beta
        # The decay gate's first factor f_a feeds every head, so it stays whole on each rank.
        TensorItem("KDA decay-gate f_a", "attention", h * rank, REPLICATED),
        # Short convolutions, A_log and dt_bias are FP32 in the checkpoint and split by head.
        TensorItem("KDA conv/A_log/dt_bias (FP32, per head)", "attention", 3 * p * a.linear_conv_kernel + n + p, HEADS, n, "fp32"),
        TensorItem("norms and gates", "norms", d, REPLICATED),
    ]


def _ffn_items(a: Architecture, moe: bool) -> list[TensorItem]:
    h = a.hidden_size
    if not moe:
        return [TensorItem("dense FFN", "dense_mlp", 3 * h * a.intermediate_size, TP)]
    items = [TensorItem("routers", "router", h * a.num_experts, REPLICATED)]
    if a.router_bias:
        items.append(TensorItem("routers", "router", a.num_experts, REPLICATED, fixed_dtype="fp32"))
    if a.latent_dim:
        # Latent MoE projects the hidden state down before routing to experts and back up after;
        # both projections feed every expert, so every rank holds them whole.
        items.append(TensorItem("latent MoE projections", "latent_proj", 2 * h * a.latent_dim, REPLICATED))
        if a.latent_norm:
            items.append(TensorItem("norms and gates", "norms", a.latent_dim, REPLICATED))
    width = a.expert_width
    items.append(TensorItem("routed experts", "routed_experts", a.num_experts * 3 * width * a.expert_intermediate, EXPERTS))
    if a.num_shared_experts:
        items.append(
            TensorItem("shared experts", "shared_experts", a.num_shared_experts * 3 * h * a.shared_intermediate, TP)
        )
    return items


def layer_items(a: Architecture, layer: int) -> list[TensorItem]:
    """The tensors of one layer: the same for every layer of a kind (remembered per kind)."""
    kind = a.layer_kind(layer)
    return list(shared(a, ("layer_items", kind), lambda: _kind_items(a, kind)))


def _kind_items(a: Architecture, kind: tuple[str, str]) -> list[TensorItem]:
    attention, ffn = kind
    if attention == "linear":
        items = _kda_items(a)
    elif attention == "mla":
        items = _mla_items(a)
    else:
        items = _gqa_items(a)
    items.extend(_ffn_items(a, ffn == "moe"))
    norms = 2 * a.hidden_size
    if a.attn_res_block_size:
        norms += 4 * a.hidden_size  # AttnRes norm and score vectors before attention and FFN
    items.append(TensorItem("norms and gates", "norms", norms, REPLICATED))
    return items


def embedding_items(a: Architecture) -> list[TensorItem]:
    return [TensorItem("embeddings", "embeddings", a.vocab_size * a.hidden_size, VOCAB, read_per_token=False)]


def head_items(a: Architecture) -> list[TensorItem]:
    norms = a.hidden_size * (3 if a.attn_res_block_size else 1)
    items = [TensorItem("norms and gates", "norms", norms, REPLICATED)]
    # A tied head shares the embedding table; it still has to live on the last pipeline stage.
    items.append(TensorItem("LM head", "lm_head", a.vocab_size * a.hidden_size, VOCAB))
    return items


def total_params(a: Architecture) -> int:
    total = sum(item.params for i in range(a.num_layers) for item in layer_items(a, i))
    total += sum(item.params for item in embedding_items(a))
    if not a.tie_word_embeddings:
        total += sum(item.params for item in head_items(a) if item.group == "lm_head")
    total += sum(item.params for item in head_items(a) if item.group != "lm_head")
    return total


def active_params(a: Architecture) -> int:
    """Parameters one token touches: everything but the embedding table and the unrouted experts."""
    total = 0
    for i in range(a.num_layers):
        for item in layer_items(a, i):
            if item.shard == EXPERTS:
                total += item.params * a.experts_per_token // a.num_experts
            else:
                total += item.params
    total += sum(item.params for item in head_items(a))
    return total


def present_groups(a: Architecture) -> set[str]:
    """The dtype groups this architecture has tensors in (a dense model has no experts)."""
    groups = {item.group for i in range(a.num_layers) for item in layer_items(a, i)}
    groups.update(item.group for item in embedding_items(a))
    groups.update(item.group for item in head_items(a))
    return groups
