"""Published figures, reproduced from the architecture (nothing stored in the catalog)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from k3diag.advise.architecture import active_params, total_params
from k3diag.advise.catalog import find_model, load_config_file, with_overrides
from k3diag.advise.dtypes import bytes_per_param
from k3diag.advise.memory import GIB, Layout, ReserveSettings, stage_ledgers
from k3diag.advise.roofline import weights_read_per_token_bytes

ONE_M = 1 << 20


def test_k3_weights_per_gpu_tp8_within_1_percent_of_amd(k3_tp8):
    # AMD Day-0, 8x MI355X, TP8, experts sharded by TP: ~190.974 GiB of weights per GPU.
    assert k3_tp8.weights_gib == pytest.approx(190.974, rel=0.01)
    # The derivation lands much closer than the tolerance: the sharding rules are the right ones.
    assert k3_tp8.weights_gib == pytest.approx(190.974, abs=0.01)


def test_k3_one_million_token_sequence_within_2_percent(k3_tp8):
    # One 1M-token sequence adds ~14.427 GiB per GPU (MLA latent FP8 + KDA state + conv + AttnRes).
    assert k3_tp8.state_gib_one_sequence == pytest.approx(14.427, rel=0.02)
    assert k3_tp8.state_gib_one_sequence == pytest.approx(14.427, abs=0.005)


def test_k3_breakdown_lines_add_up(k3_tp8):
    lines = {line.label: line.gib for line in k3_tp8.weight_lines}
    assert sum(lines.values()) == pytest.approx(k3_tp8.weights_gib)
    # Routed experts: 92 MoE layers x 896 experts x 3 x 3584 x 3072, MXFP4 (0.5 + 1/32 B), split 8 ways.
    routed = 92 * 896 * 3 * 3584 * 3072 * (0.5 + 1 / 32) / 8 / GIB
    assert lines["routed experts"] == pytest.approx(routed)
    # Latent projections 7168<->3584 in BF16 stay whole on every rank.
    assert lines["latent MoE projections"] == pytest.approx(92 * 2 * 7168 * 3584 * 2 / GIB)
    # Routers: 7168 x 896 BF16 plus an FP32 bias, whole on every rank.
    assert lines["routers"] == pytest.approx(92 * (7168 * 896 * 2 + 896 * 4) / GIB)
    # Vocabulary-parallel embedding and LM head: 163840 x 7168 BF16 / 8 each.
    assert lines["embeddings"] == pytest.approx(163840 * 7168 * 2 / 8 / GIB)
    state = {line.label: line.gib for line in k3_tp8.state_lines + k3_tp8.step_lines}
    assert state["MLA latent cache"] == pytest.approx(24 * 576 * ONE_M / GIB)  # 13.5 GiB exactly
    assert state["KDA recurrent state"] == pytest.approx(69 * 12 * 128 * 128 * 4 / GIB)
    assert state["KDA conv state"] == pytest.approx(69 * 3 * 1536 * 3 * 2 / GIB)
    assert state["AttnRes block buffer"] == pytest.approx(8 * 7168 * 2 * 8192 / GIB)
    assert sum(state.values()) == pytest.approx(k3_tp8.state_gib_one_sequence)


def test_k3_figures_are_not_stored_in_the_catalog():
    text = resources.files("k3diag").joinpath("data", "models.json").read_text()
    assert "190.97" not in text and "14.42" not in text


def test_k3_from_its_published_config_gives_the_same_ledger(advise_fixtures, k3_tp8):
    spec, assumptions = load_config_file(advise_fixtures / "kimi-k3-config-trimmed.json")
    spec = with_overrides(spec, {}, "fp8")
    ledger = stage_ledgers(spec, Layout(1, 8, 1, 1), 288.0, ONE_M, ReserveSettings())[0]
    assert ledger.weights_gib == pytest.approx(k3_tp8.weights_gib, abs=0.001)
    assert ledger.state_gib_one_sequence == pytest.approx(14.427, abs=0.005)
    assert any("routed experts counted as mxfp4" in a for a in assumptions)


def test_k3_parameter_counts_match_the_model_card(k3):
    assert total_params(k3.arch) / 1e12 == pytest.approx(2.8, rel=0.01)
    assert active_params(k3.arch) / 1e9 == pytest.approx(104, rel=0.01)
    assert k3.arch.num_linear_layers == 69 and k3.arch.num_full_attention_layers == 24


def test_k3_checkpoint_size_and_bytes_read_per_token(k3):
    weights = sum(s.weights_gib for s in stage_ledgers(k3, Layout(1, 1, 1, 1), 1e9, 1, ReserveSettings())) * GIB
    assert weights / 1e12 == pytest.approx(1.56, rel=0.01)  # ~1.56 TB checkpoint
    # ~137 GB read per decode step at batch 1: BF16 trunk, LM head, 16 experts x 92 MoE layers.
    read = weights_read_per_token_bytes(k3)
    assert read / 1e9 == pytest.approx(137, rel=0.01)
    # On 8 GPUs at 8 TB/s that is ~2.1 ms.
    assert read / (8 * 8e12) * 1e3 == pytest.approx(2.1, rel=0.03)


def test_k2_thinking_int4_is_about_594_gb():
    spec = find_model("k2-thinking")
    weights = sum(s.weights_gib for s in stage_ledgers(spec, Layout(1, 1, 1, 1), 1e9, 1, ReserveSettings())) * GIB
    assert weights / 1e9 == pytest.approx(594, rel=0.01)
    assert spec.dtype_of("routed_experts") == "int4-g32"
    assert bytes_per_param("int4-g32") == 0.5 + 2 / 32


def test_k2_fp8_is_about_1_03_tb():
    spec = find_model("k2")
    weights = sum(s.weights_gib for s in stage_ledgers(spec, Layout(1, 1, 1, 1), 1e9, 1, ReserveSettings())) * GIB
    assert weights / 1e12 == pytest.approx(1.03, rel=0.02)


def test_llama_70b_kv_is_327680_bytes_per_token_in_bf16():
    spec = find_model("llama-3.1-70b")
    ledger = stage_ledgers(spec, Layout(1, 1, 1, 1), 1e9, 1, ReserveSettings())[0]
    assert ledger.state_bytes_per_token == 327_680  # 2 x 80 layers x 8 KV heads x 128 x 2 B
    assert total_params(spec.arch) == 70_553_706_496  # the published parameter count, exactly


@pytest.mark.parametrize("name", ["deepseek-v3", "kimi-k2"])
def test_mla_is_70272_bytes_per_token_in_bf16(name):
    spec = find_model(name)
    ledger = stage_ledgers(spec, Layout(1, 1, 1, 1), 1e9, 1, ReserveSettings())[0]
    assert ledger.state_bytes_per_token == 70_272  # 61 layers x (512 + 64) x 2 B


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("deepseek-v3", 671, 37),
        ("qwen3-235b-a22b", 235, 22),
        ("llama-3.1-405b", 405.8, None),
        ("kimi-k2", 1026, 32),
    ],
)
def test_parameter_counts_match_model_cards(name, total_b, active_b):
    spec = find_model(name)
    assert total_params(spec.arch) / 1e9 == pytest.approx(total_b, rel=0.01)
    if active_b:
        assert active_params(spec.arch) / 1e9 == pytest.approx(active_b, rel=0.02)


def test_catalog_has_every_model_and_gpu_the_issue_names():
    models = json.loads(resources.files("k3diag").joinpath("data", "models.json").read_text())["models"]
    ids = {m["id"] for m in models}
    assert {"kimi-k3", "kimi-k2", "kimi-k2-thinking", "deepseek-v3", "qwen3-235b-a22b", "llama-3.1-405b", "llama-3.1-70b"} <= ids
    gpus = json.loads(resources.files("k3diag").joinpath("data", "gpus.json").read_text())["gpus"]
    gpu_ids = {g["id"] for g in gpus}
    assert {"a100", "h100", "h200", "b200", "mi300x", "mi325x", "mi355x", "rtx4090", "rtx5090", "l40s", "rtx-pro-6000", "m3-ultra"} <= gpu_ids
    for g in gpus:
        assert g["memory_mib"] > 0 and g["bandwidth_gbs"] > 0 and g["fabric"]["kind"] in ("nvlink", "xgmi", "pcie", "unified")
