"""Catalog lookups, close-name suggestions, config.json import (real configs), and robustness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.advise.architecture import total_params
from k3diag.advise.catalog import (
    CatalogError,
    find_gpu,
    find_model,
    gpu_from_device_name,
    load_config_file,
    parse_dtype_overrides,
)
from k3diag.advise.dtypes import bytes_per_param, canonical_dtype
from k3diag.advise.hfconfig import import_config


def test_aliases_resolve():
    assert find_model("K3").id == "kimi-k3"
    assert find_model("moonshotai/Kimi-K2-Thinking").id == "kimi-k2-thinking"
    assert find_gpu("MI355X").id == "mi355x" and find_gpu("4090").id == "rtx4090"


def test_unknown_names_list_close_ones():
    with pytest.raises(CatalogError, match="Close names: .*kimi-k3") as exc:
        find_model("kimi-k33")
    assert "--config" in str(exc.value)
    with pytest.raises(CatalogError, match="Close names: .*mi355x"):
        find_gpu("mi35x")


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("AMD Instinct MI355X", "mi355x"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA B200", "b200"),
    ],
)
def test_tool_reported_gpu_names_map_to_the_catalog(reported, expected):
    assert gpu_from_device_name(reported).id == expected


def test_a100_40gb_is_not_mistaken_for_the_80gb_entry():
    assert gpu_from_device_name("NVIDIA A100-SXM4-40GB", 40960) is None
    assert gpu_from_device_name("NVIDIA A100-SXM4-80GB", 81920).id == "a100"


def test_dtype_names_and_bytes():
    assert canonical_dtype("MXFP4") == "mxfp4" and bytes_per_param("mxfp4") == 0.53125
    assert canonical_dtype("int4") == "int4-g128" and bytes_per_param("int4-g64") == 0.5 + 2 / 64
    assert bytes_per_param("fp8-block128") == pytest.approx(1 + 4 / 16384)
    assert canonical_dtype("int3") is None


def test_dtype_overrides():
    assert parse_dtype_overrides("fp8")["attention"] == "fp8"
    assert "embeddings" not in parse_dtype_overrides("fp8")
    assert parse_dtype_overrides("routed_experts=int4,attention=fp8") == {"routed_experts": "int4-g128", "attention": "fp8"}
    with pytest.raises(CatalogError, match="unknown tensor group 'expert'"):
        parse_dtype_overrides("expert=int4")
    with pytest.raises(CatalogError, match="unknown dtype 'int3'"):
        parse_dtype_overrides("int3")


def test_real_llama_config_imports_exactly(advise_fixtures):
    spec, assumptions = load_config_file(advise_fixtures / "llama-3.x-70b-instruct-config.json")
    assert total_params(spec.arch) == 70_553_706_496 and assumptions == []
    assert spec.arch.num_kv_heads == 8 and spec.arch.max_context == 131072


def test_real_deepseek_config_reads_block_fp8(advise_fixtures):
    spec, assumptions = load_config_file(advise_fixtures / "deepseek-r1-config.json")
    assert spec.dtype_of("routed_experts") == "fp8-block128" and spec.dtype_of("embeddings") == "bf16"
    assert spec.arch.dense_layers == (0, 1, 2) and spec.arch.attention_kind == "mla" and spec.arch.router_bias
    assert total_params(spec.arch) / 1e9 == pytest.approx(671, rel=0.005)
    assert any("fp8-block128" in a for a in assumptions)


def test_multimodal_config_uses_its_text_config(advise_fixtures):
    spec, assumptions = load_config_file(advise_fixtures / "qwen2.5-vl-3b-config.json")
    assert spec.arch.tie_word_embeddings is True and spec.arch.num_kv_heads == 2
    assert any("head_dim not given" in a for a in assumptions)


def test_config_with_missing_moe_fields_says_what_it_assumed(advise_fixtures):
    spec, assumptions = load_config_file(advise_fixtures / "minimax-m1-config.json")
    assert spec.arch.num_experts == 32 and spec.arch.expert_intermediate == 9216
    assert any("moe_intermediate_size not given" in a for a in assumptions)
    assert any("attn_type_list" in a and "overstated" in a for a in assumptions)


def test_config_missing_required_fields_names_them(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}))
    with pytest.raises(CatalogError, match="lacks num_hidden_layers, vocab_size"):
        load_config_file(path)
    path.write_text("{not json")
    with pytest.raises(CatalogError, match="not valid JSON"):
        load_config_file(path)
    with pytest.raises(CatalogError, match="does not exist"):
        load_config_file(tmp_path / "nope.json")


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 200_000) | st.floats(allow_nan=False, width=32) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(
    [
        "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
        "intermediate_size", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank",
        "q_lora_rank", "v_head_dim", "first_k_dense_replace", "linear_attn_config", "quantization_config",
        "text_config", "tie_word_embeddings", "max_position_embeddings", "routed_expert_hidden_size",
        "mlp_only_layers", "decoder_sparse_step", "attn_res_block_size", "torch_dtype",
    ]
)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(_keys, _json_values | st.integers(1, 4096), max_size=14))
def test_import_config_never_raises(raw):
    result = import_config(raw)
    if result.arch is not None:
        assert total_params(result.arch) >= 0
        assert not result.missing


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=30))
def test_lookups_fail_only_with_catalog_errors(name):
    for finder in (find_model, find_gpu):
        try:
            finder(name)
        except CatalogError as exc:
            assert str(exc)
