"""The ledger's rules, each checked against a hand computation, and its response to the architecture."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k3diag.advise.catalog import find_model
from k3diag.advise.memory import GIB, Layout, ReserveSettings, pp_partition, stage_ledgers, worst_stage

ONE_M = 1 << 20


def _ledger(spec, layout, context=1, memory=1e6, reserve=None):
    return stage_ledgers(spec, layout, memory, context, reserve or ReserveSettings())


def _line(ledger, label):
    return next(line.gib for line in ledger.lines() if line.label == label)


def test_gqa_kv_heads_divide_by_tp_down_to_one():
    llama = find_model("llama-3.1-70b")
    per_token = {tp: _ledger(llama, Layout(1, tp, 1))[0].state_bytes_per_token for tp in (1, 2, 4, 8, 16)}
    assert per_token[1] == 327_680
    assert per_token[2] == 327_680 / 2
    assert per_token[8] == 327_680 / 8  # one KV head per GPU
    assert per_token[16] == per_token[8]  # 8 KV heads cannot split 16 ways: each GPU keeps one


def test_mla_latent_is_replicated_under_tp_and_split_under_pp(k3):
    tp1 = _ledger(k3, Layout(1, 1, 1))[0].state_bytes_per_token
    tp8 = _ledger(k3, Layout(1, 8, 1))[0].state_bytes_per_token
    assert tp1 == tp8 == 24 * 576 * 1  # FP8 latent: every TP rank keeps all 24 layers
    stages = _ledger(k3, Layout(1, 1, 8))
    per_stage = [s.state_bytes_per_token for s in stages]
    assert sum(per_stage) == tp1  # PP splits the MLA layers among stages
    assert max(per_stage) == 4 * 576  # the last stage holds layers 91 and 92, both MLA


def test_kda_state_is_per_sequence_and_divides_by_tp(k3):
    tp1 = _ledger(k3, Layout(1, 1, 1))[0]
    tp8 = _ledger(k3, Layout(1, 8, 1))[0]
    assert tp1.state_bytes_fixed == pytest.approx(69 * (96 * 128 * 128 * 4 + 3 * 96 * 128 * 3 * 2))
    assert tp8.state_bytes_fixed == pytest.approx(tp1.state_bytes_fixed / 8)
    # Fixed size: the same at 8K and at 1M tokens.
    assert tp8.state_gib_at(8192) - tp8.state_gib_at(1) == pytest.approx(24 * 576 * 8191 / GIB)


def test_routed_experts_under_tp_and_under_ep_cost_the_same_when_they_divide(k3):
    tp = _line(_ledger(k3, Layout(1, 8, 1, 1))[0], "routed experts")
    ep = _line(_ledger(k3, Layout(1, 8, 1, 8))[0], "routed experts")
    assert tp == pytest.approx(ep)
    # 128 experts over 3 EP ranks is not even: the fullest rank holds ceil(128/3) = 43 of them.
    qwen = find_model("qwen3-235b-a22b")
    uneven = _line(_ledger(qwen, Layout(1, 1, 1, 3))[0], "routed experts")
    whole = _line(_ledger(qwen, Layout(1, 1, 1, 1))[0], "routed experts")
    assert uneven == pytest.approx(whole * 43 / 128)


def test_replicated_parts_do_not_shrink_with_tp(k3):
    for label in ("latent MoE projections", "routers", "MLA down-projections q_a/kv_a", "KDA decay-gate f_a"):
        assert _line(_ledger(k3, Layout(1, 8, 1))[0], label) == pytest.approx(_line(_ledger(k3, Layout(1, 1, 1))[0], label))
    shared1 = _line(_ledger(k3, Layout(1, 1, 1))[0], "shared experts")
    assert _line(_ledger(k3, Layout(1, 8, 1))[0], "shared experts") == pytest.approx(shared1 / 8)


def test_embeddings_on_first_stage_head_on_last(k3):
    stages = _ledger(k3, Layout(1, 1, 4))
    labels = [{line.label for line in s.weight_lines} for s in stages]
    assert "embeddings" in labels[0] and "LM head" not in labels[0]
    assert "LM head" in labels[-1] and "embeddings" not in labels[-1]
    assert "dense FFN" in labels[0]  # layer 0 is the dense one


def test_pp_partition_matches_vllm():
    assert pp_partition(93, 8) == [(0, 11), (11, 22), (22, 34), (34, 46), (46, 58), (58, 70), (70, 82), (82, 93)]
    assert pp_partition(61, 2) == [(0, 31), (31, 61)]
    assert pp_partition(80, 4) == [(0, 20), (20, 40), (40, 60), (60, 80)]


# -- changing the architecture changes the ledger the right way (nothing is a stored answer) --

def test_more_experts_mean_proportionally_more_expert_memory(k3):
    base = _line(_ledger(k3, Layout(1, 8, 1))[0], "routed experts")
    doubled = replace(k3, arch=replace(k3.arch, num_experts=1792))
    assert _line(_ledger(doubled, Layout(1, 8, 1))[0], "routed experts") == pytest.approx(2 * base)


def test_wider_latent_grows_both_latent_projections_and_experts(k3):
    base = _ledger(k3, Layout(1, 8, 1))[0]
    wider = _ledger(replace(k3, arch=replace(k3.arch, latent_dim=7168)), Layout(1, 8, 1))[0]
    assert _line(wider, "latent MoE projections") == pytest.approx(2 * _line(base, "latent MoE projections"))
    assert _line(wider, "routed experts") == pytest.approx(2 * _line(base, "routed experts"))


def test_bigger_kv_lora_rank_grows_the_latent_cache_linearly(k3):
    base = _ledger(k3, Layout(1, 8, 1), ONE_M)[0]
    bigger = _ledger(replace(k3, arch=replace(k3.arch, kv_lora_rank=1024)), Layout(1, 8, 1), ONE_M)[0]
    assert _line(bigger, "MLA latent cache") == pytest.approx(_line(base, "MLA latent cache") * (1024 + 64) / (512 + 64))


def test_more_kv_heads_grow_gqa_cache_and_kv_weights():
    llama = find_model("llama-3.1-70b")
    base = _ledger(llama, Layout(1, 1, 1))[0]
    more = _ledger(replace(llama, arch=replace(llama.arch, num_kv_heads=16)), Layout(1, 1, 1))[0]
    assert more.state_bytes_per_token == 2 * base.state_bytes_per_token
    assert _line(more, "attention k/v (per KV head)") == pytest.approx(2 * _line(base, "attention k/v (per KV head)"))


def test_turning_a_kda_layer_into_mla_moves_state_from_fixed_to_per_token(k3):
    fewer = replace(k3, arch=replace(k3.arch, linear_layers=k3.arch.linear_layers[1:]))
    a = _ledger(k3, Layout(1, 8, 1))[0]
    b = _ledger(fewer, Layout(1, 8, 1))[0]
    assert b.state_bytes_per_token == a.state_bytes_per_token + 576
    assert b.state_bytes_fixed < a.state_bytes_fixed


def test_dtype_change_changes_only_its_group(k3):
    fp8 = replace(k3, dtypes={**k3.dtypes, "shared_experts": "fp8"})
    a = _ledger(k3, Layout(1, 8, 1))[0]
    b = _ledger(fp8, Layout(1, 8, 1))[0]
    assert _line(b, "shared experts") == pytest.approx(_line(a, "shared experts") / 2)
    assert _line(b, "routed experts") == pytest.approx(_line(a, "routed experts"))


def test_reserve_lines_follow_the_user(k3):
    reserve = ReserveSettings(comm_gib=3.0, workspace_gib=0.5, graphs_gib=0.0, frag_pct=10.0)
    ledger = _ledger(k3, Layout(1, 8, 1), memory=288.0, reserve=reserve)[0]
    assert {line.label: line.gib for line in ledger.reserve_lines} == {
        "communication buffers": 3.0,
        "kernel workspace": 0.5,
        "CUDA/HIP graphs": 0.0,
        "fragmentation": pytest.approx(28.8),
    }
    assert ledger.free_gib == pytest.approx(288.0 - ledger.weights_gib - 32.3)


def test_default_reserves_scale_down_on_small_gpus_and_add_ep_buffers(k3):
    small = _ledger(find_model("llama-3.1-70b"), Layout(1, 4, 1), memory=24.0)[0]
    reserves = {line.label: line.gib for line in small.reserve_lines}
    assert reserves["kernel workspace"] == pytest.approx(1.2) and reserves["CUDA/HIP graphs"] == pytest.approx(0.72)
    ep = _ledger(k3, Layout(1, 8, 1, 8), memory=288.0)[0]
    assert {line.label: line.gib for line in ep.reserve_lines}["communication buffers"] == 3.0


def test_capacity_counts_sequences_after_step_buffers(k3_tp8):
    room = k3_tp8.free_gib - k3_tp8.step_gib
    per = k3_tp8.state_gib_at(ONE_M)
    assert k3_tp8.sequences_at(ONE_M) == int(room // per)
    assert k3_tp8.sequences_at(8192) > k3_tp8.sequences_at(131072) > k3_tp8.sequences_at(ONE_M) >= 1


def test_worst_stage_is_the_one_with_least_room(k3):
    stages = _ledger(k3, Layout(1, 1, 8), ONE_M, memory=288.0)
    worst = worst_stage(stages, ONE_M)
    assert all(
        worst.free_gib - worst.state_gib_at(ONE_M) <= s.free_gib - s.state_gib_at(ONE_M) + 1e-9 for s in stages
    )
