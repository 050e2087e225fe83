"""Hugging Face `config.json` -> Architecture and storage formats.

Model families spell the same thing differently (`n_routed_experts`, `num_experts`,
`num_local_experts`); this module knows the spellings. Whatever it has to assume (a missing
`num_key_value_heads` means plain multi-head attention, a missing context length means 4096...)
it says in one sentence, so the user can see what the ledger rests on. Pure: dict in, result out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3diag.advise.architecture import LINEAR_GROUPS, Architecture
from k3diag.advise.dtypes import canonical_dtype
from k3diag.model.words import shown_number
from k3diag.parse.json_values import whole_number

# Fields without which no ledger can be drawn.
REQUIRED: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "d_model", "n_embd", "dim"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads"),
}
EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
EXPERT_TOPK_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k_experts", "moe_k")
CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "max_seq_len", "n_positions")
DEFAULT_CONTEXT = 4096


@dataclass
class ImportedConfig:
    arch: Architecture | None
    dtypes: dict[str, str] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # required fields that were absent
    problems: list[str] = field(default_factory=list)  # present but unusable
    model_type: str | None = None


def _first(cfg: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return key, cfg[key]
    return None, None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


# More than any model's dimension, count or context (the largest are vocabularies of ~10^6 and contexts of
# ~10^7): a whole number above it is a damaged file (`"intermediate_size": 1e308`), and the memory ledger's
# products of such numbers overflowed a float (OverflowError, the plan lost)
MAX_CONFIG_NUMBER = 1 << 40


def _numbers_no_model_has(cfg: dict[str, Any]) -> list[str]:
    """A sentence for each whole number of the config (and of the objects in it) above `MAX_CONFIG_NUMBER`."""
    found = []
    for scope, table in [("", cfg)] + [(f"{key}.", value) for key, value in cfg.items() if isinstance(value, dict)]:
        for key, value in table.items():
            number = whole_number(abs(value)) if isinstance(value, (int, float)) else None
            if number is not None and number > MAX_CONFIG_NUMBER:
                found.append(f"{scope}{key} is {shown_number(value)}, more than any model has (a damaged file?)")
    return found[:5]


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a multimodal config (Kimi K3, Qwen-VL, Llava...)."""
    for key in ("text_config", "language_config", "llm_config"):
        inner = cfg.get(key)
        if isinstance(inner, dict) and "hidden_size" in inner:
            # The inner config describes the language model; the outer one fills what it omits.
            merged = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config", "language_config", "llm_config")}
            merged.update({k: v for k, v in inner.items() if v is not None or k not in merged})
            return merged
    return cfg


def _base_dtype(cfg: dict[str, Any], notes: list[str]) -> str:
    raw = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(raw, str) and canonical_dtype(raw) in ("bf16", "fp16", "fp32"):
        return canonical_dtype(raw) or "bf16"
    notes.append("config.json names no torch_dtype: weights assumed BF16.")
    return "bf16"


def _quantized_dtype(qc: dict[str, Any], notes: list[str]) -> str | None:
    """The storage format a quantization_config describes, or None when it cannot be read."""
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        block = qc.get("weight_block_size")
        if isinstance(block, list) and block == [128, 128]:
            return "fp8-block128"
        return "fp8"
    if method in ("mxfp4",):
        return "mxfp4"
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "autoround"):
        bits = _int(qc.get("bits")) or 4
        group = _int(qc.get("group_size")) or 128
        if group <= 0:  # GPTQ uses -1 for per-channel scales
            group = 4096
        return f"int{bits}-g{group}" if bits in (4, 8) else None
    if method == "compressed-tensors":
        fmt = str(qc.get("format", "")).lower()
        groups = qc.get("config_groups") or {}
        weights: dict[str, Any] = {}
        if isinstance(groups, dict):
            for group_cfg in groups.values():
                if isinstance(group_cfg, dict) and isinstance(group_cfg.get("weights"), dict):
                    weights = group_cfg["weights"]
                    break
        bits = _int(weights.get("num_bits"))
        group = _int(weights.get("group_size"))
        if "mxfp4" in fmt:
            return "mxfp4"
        if "nvfp4" in fmt:
            return "nvfp4"
        if fmt == "float-quantized" or (weights.get("type") == "float" and bits == 8):
            return "fp8"
        if bits in (4, 8) and group and group > 0:
            return f"int{bits}-g{group}"
        if bits in (4, 8):
            notes.append("compressed-tensors config gives no group size: assumed 128.")
            return f"int{bits}-g128"
    if method == "bitsandbytes":
        notes.append("bitsandbytes 4-bit counted as 4 bits plus an FP32 scale per 64 values.")
        return "int4-g64"
    return None


def _dtypes(cfg: dict[str, Any], is_moe: bool, notes: list[str]) -> dict[str, str]:
    base = _base_dtype(cfg, notes)
    dtypes = {group: base for group in ("embeddings", "lm_head", "router", "norms", *LINEAR_GROUPS)}
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        return dtypes
    quantized = _quantized_dtype(qc, notes)
    if quantized is None:
        notes.append(
            f"quantization method {qc.get('quant_method')!r} is not one k3diag reads: weights counted as {base}."
        )
        return dtypes
    method = str(qc.get("quant_method", "")).lower()
    if is_moe and method in ("compressed-tensors", "mxfp4"):
        # Released MoE checkpoints in these formats (Kimi K2 Thinking, Kimi K3, gpt-oss) quantize
        # the routed experts and keep attention and shared experts in 16 bits.
        dtypes["routed_experts"] = quantized
        notes.append(
            f"{method} on an MoE model: routed experts counted as {quantized}, the other linear layers as {base}; "
            "change with --dtype GROUP=FORMAT if this checkpoint differs."
        )
    else:
        for group in LINEAR_GROUPS:
            dtypes[group] = quantized
        notes.append(f"{method}: linear layers counted as {quantized}; embeddings, LM head, routers and norms as {base}.")
    return dtypes


def _dense_layers(cfg: dict[str, Any], layers: int, notes: list[str]) -> tuple[int, ...]:
    dense: set[int] = set()
    first_k = _int(cfg.get("first_k_dense_replace"))
    if first_k:
        dense.update(range(min(first_k, layers)))
    only = cfg.get("mlp_only_layers")
    if isinstance(only, list):
        dense.update(i for i in only if isinstance(i, int) and 0 <= i < layers)
    step = _int(cfg.get("decoder_sparse_step")) or _int(cfg.get("moe_layer_freq"))
    if step and step > 1:
        dense.update(i for i in range(layers) if (i + 1) % step != 0)
    return tuple(sorted(dense))


def _linear_layers(cfg: dict[str, Any], layers: int) -> tuple[tuple[int, ...], dict[str, Any]]:
    """Kimi's `linear_attn_config` lists 1-based KDA and full-attention layer numbers."""
    lac = cfg.get("linear_attn_config")
    if not isinstance(lac, dict):
        return (), {}
    kda = lac.get("kda_layers")
    full = lac.get("full_attn_layers")
    if isinstance(kda, list) and kda:
        chosen = {i - 1 for i in kda if isinstance(i, int) and 1 <= i <= layers}
    elif isinstance(full, list):
        full_set = {i - 1 for i in full if isinstance(i, int)}
        chosen = {i for i in range(layers) if i not in full_set}
    else:
        chosen = set()
    return tuple(sorted(chosen)), lac


def _unread_hybrid(cfg: dict[str, Any]) -> str | None:
    """The key naming linear-attention layers in a layout other than Kimi's, if any."""
    if isinstance(cfg.get("attn_type_list"), list) and 0 in cfg["attn_type_list"]:
        return "attn_type_list"
    types = cfg.get("layer_types")
    if isinstance(types, list) and any(isinstance(t, str) and "linear" in t for t in types):
        return "layer_types"
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        return "hybrid_override_pattern"
    return None


def import_config(raw: dict[str, Any]) -> ImportedConfig:
    """Read a config.json dict; never raises on odd content."""
    result = ImportedConfig(arch=None)
    if not isinstance(raw, dict):
        result.problems.append("config.json does not hold a JSON object")
        return result
    cfg = text_config(raw)
    damaged = _numbers_no_model_has(cfg)
    if damaged:
        result.problems.extend(damaged)
        return result
    result.model_type = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None
    notes = result.assumptions
    values: dict[str, int] = {}
    for name, keys in REQUIRED.items():
        _key, value = _first(cfg, keys)
        number = _int(value)
        if number is None or number <= 0:
            result.missing.append(name)
        else:
            values[name] = number
    if result.missing:
        return result

    hidden, layers, heads = values["hidden_size"], values["num_hidden_layers"], values["num_attention_heads"]
    _key, kv = _first(cfg, ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"))
    kv_heads = _int(kv)
    _key, hd = _first(cfg, ("head_dim", "kv_channels"))
    head_dim = _int(hd)
    _key, ctx = _first(cfg, CONTEXT_KEYS)
    context = _int(ctx)
    if context is None or context <= 0:
        context = DEFAULT_CONTEXT
        notes.append(f"config.json names no max_position_embeddings: context assumed {DEFAULT_CONTEXT}.")
    tie = cfg.get("tie_word_embeddings")
    if not isinstance(tie, bool):
        tie = False
        notes.append("tie_word_embeddings not given: embeddings and LM head counted as separate tables.")

    _key, n_experts = _first(cfg, EXPERT_COUNT_KEYS)
    num_experts = _int(n_experts) or 0
    topk = _int(_first(cfg, EXPERT_TOPK_KEYS)[1]) or 0
    intermediate = _int(_first(cfg, ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim"))[1]) or 0
    expert_inter = _int(cfg.get("moe_intermediate_size")) or 0
    if num_experts:
        if not topk:
            result.missing.append("num_experts_per_tok")
        if not expert_inter:
            if intermediate:
                expert_inter = intermediate
                notes.append("moe_intermediate_size not given: experts assumed to use intermediate_size.")
            else:
                result.missing.append("moe_intermediate_size")
    elif not intermediate:
        result.missing.append("intermediate_size")
    if result.missing:
        return result

    shared = _int(_first(cfg, ("n_shared_experts", "num_shared_experts"))[1]) or 0
    shared_inter = expert_inter
    qwen_shared = _int(cfg.get("shared_expert_intermediate_size"))
    if qwen_shared:
        shared, shared_inter = max(shared, 1), qwen_shared

    attention_kind = "gqa"
    kv_lora = _int(cfg.get("kv_lora_rank")) or 0
    if kv_lora:
        attention_kind = "mla"
    if attention_kind == "gqa":
        if kv_heads is None:
            kv_heads = heads
            notes.append("num_key_value_heads not given: plain multi-head attention assumed (KV heads = heads).")
        if head_dim is None:
            head_dim = hidden // heads
            notes.append(f"head_dim not given: assumed hidden_size / heads = {head_dim}.")

    linear_layers, lac = _linear_layers(cfg, layers)
    linear_heads = _int(lac.get("num_heads")) or (heads if linear_layers else 0)
    linear_dim = _int(lac.get("head_dim")) or (head_dim or 0)
    conv = _int(lac.get("short_conv_kernel_size")) or (4 if linear_layers else 0)
    output_gate_rank = 0
    if linear_layers and lac.get("use_full_rank_gate") is False:
        output_gate_rank = linear_dim
    if linear_layers:
        notes.append(
            "KDA decay gate counted as the low-rank pair f_a/f_b of rank head_dim, as modeling_kimi_linear.py builds it."
        )

    if not linear_layers and _unread_hybrid(cfg):
        notes.append(
            f"config.json marks some layers as linear attention ({_unread_hybrid(cfg)}) in a form k3diag does not read: "
            "every layer is counted as full attention, so the KV cache is overstated."
        )
    model_type = result.model_type or ""
    arch = Architecture(
        hidden_size=hidden,
        num_layers=layers,
        vocab_size=values["vocab_size"],
        max_context=context,
        num_heads=heads,
        tie_word_embeddings=tie,
        attention_kind=attention_kind,
        num_kv_heads=kv_heads or 0,
        head_dim=head_dim or 0,
        qk_norm=bool(cfg.get("qk_norm") or model_type.startswith("qwen3")),
        attention_output_gate=bool(cfg.get("mla_use_output_gate")),
        q_lora_rank=_int(cfg.get("q_lora_rank")) or None,
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=_int(cfg.get("qk_nope_head_dim")) or 0,
        qk_rope_head_dim=_int(cfg.get("qk_rope_head_dim")) or 0,
        v_head_dim=_int(cfg.get("v_head_dim")) or 0,
        linear_layers=linear_layers,
        linear_num_heads=linear_heads,
        linear_head_dim=linear_dim,
        linear_conv_kernel=conv,
        linear_gate_rank=linear_dim,
        linear_output_gate_rank=output_gate_rank,
        intermediate_size=intermediate,
        dense_layers=_dense_layers(cfg, layers, notes) if num_experts else (),
        num_experts=num_experts,
        experts_per_token=topk,
        expert_intermediate=expert_inter,
        num_shared_experts=shared,
        shared_intermediate=shared_inter,
        latent_dim=_int(cfg.get("routed_expert_hidden_size")) or None,
        latent_norm=bool(cfg.get("latent_moe_use_norm")),
        # Sigmoid routers (DeepSeek-V3, Kimi) carry an FP32 expert-score correction bias.
        router_bias=cfg.get("topk_method") == "noaux_tc"
        or cfg.get("scoring_func") == "sigmoid"
        or cfg.get("moe_router_activation_func") == "sigmoid"
        or bool(cfg.get("moe_router_enable_expert_bias")),
        attn_res_block_size=_int(cfg.get("attn_res_block_size")) or None,
    )
    if attention_kind == "mla" and not arch.v_head_dim:
        result.missing.append("v_head_dim")
        return result
    if num_experts and 0 in arch.dense_layers and "intermediate_size" not in cfg:
        result.missing.append("intermediate_size")
        return result
    result.problems.extend(arch.validate())
    if result.problems:
        return result
    result.arch = arch
    result.dtypes = _dtypes(cfg, arch.is_moe_model, notes)
    return result
