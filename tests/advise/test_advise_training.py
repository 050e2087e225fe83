"""Training ledgers per pipeline rank: 1F1B in-flight counts, ZeRO, optimizers, recompute, remedies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k3diag.advise.catalog import find_gpu, find_model
from k3diag.advise.memory import GIB, Layout
from k3diag.advise.training import TrainSettings, training_plan

H100 = find_gpu("h100")


def _plan(spec=None, layout=Layout(4, 8, 2), **settings):
    return training_plan(spec or find_model("llama-3.1-70b"), H100, layout, 80.0, TrainSettings(**settings))


def test_rank_r_holds_p_minus_r_microbatches():
    plan = _plan(layout=Layout(1, 8, 8), micro_batches=32)
    assert [r.in_flight for r in plan.ranks] == [8, 7, 6, 5, 4, 3, 2, 1]
    first, last = plan.ranks[0], plan.ranks[-1]
    assert first.total("activations") == pytest.approx(8 * first.activation_gib_per_microbatch)
    assert plan.bubble_fraction == pytest.approx(7 / (32 + 7))


def test_imbalance_is_rank0_minus_last():
    plan = _plan(layout=Layout(1, 8, 4))
    assert plan.imbalance_gib == pytest.approx(plan.ranks[0].total_gib - plan.ranks[-1].total_gib)
    assert plan.ranks[0].total("activations") > plan.ranks[-1].total("activations")


def test_weights_gradients_adam_by_hand():
    # Llama-70B, TP8 PP1 DP1, ZeRO-0: per GPU ~70.55B/8 params (vocab and heads split by 8, norms whole).
    plan = _plan(layout=Layout(1, 8, 1), zero=0)
    rank = plan.ranks[0]
    params = rank.lines[0].params
    assert params == pytest.approx(70_553_706_496 / 8, rel=0.001)
    assert rank.total("weights") == pytest.approx(params * 2 / GIB)
    assert rank.total("gradients") == pytest.approx(params * 4 / GIB)
    assert rank.total("optimizer") == pytest.approx(params * 12 / GIB, rel=0.001)


def test_zero_stages_shard_over_dp():
    z0, z1, z2, z3 = (_plan(layout=Layout(4, 8, 1), zero=z).ranks[0] for z in range(4))
    assert z1.total("optimizer") == pytest.approx(z0.total("optimizer") / 4)
    assert z2.total("gradients") == pytest.approx(z0.total("gradients") / 4)
    assert z3.total("weights") == pytest.approx(z0.total("weights") / 4)


def test_muon_keeps_less_state_than_adam():
    adam = _plan(optimizer="adam").ranks[0].total("optimizer")
    muon = _plan(optimizer="muon").ranks[0].total("optimizer")
    assert muon < adam and muon > adam * 8 / 12 * 0.99


def test_recompute_and_fp8_order_activations():
    none, selective, full = (_plan(recompute=m).ranks[0].total("activations") for m in ("none", "selective", "full"))
    assert none > selective > full
    fp8 = _plan(recompute="selective", fp8_activations=True).ranks[0]
    base = _plan(recompute="selective").ranks[0]
    assert fp8.activation_gib_per_microbatch == pytest.approx(base.activation_gib_per_microbatch / 2)


def test_offload_keeps_one_microbatch():
    plan = _plan(layout=Layout(1, 8, 4), offload=True)
    assert all(r.in_flight == 1 for r in plan.ranks)


def test_remedies_report_savings_from_full_ledgers():
    plan = _plan(layout=Layout(4, 8, 2), zero=0, recompute="selective")
    remedies = {r.name: r for r in plan.remedies}
    full = remedies["recompute=full"]
    alt = _plan(layout=Layout(4, 8, 2), zero=0, recompute="full").ranks[0].total_gib
    assert full.saves_gib_rank0 == pytest.approx(plan.ranks[0].total_gib - alt)
    assert "33%" in full.cost
    assert remedies["FP8 activations"].saves_gib_rank0 > 0 and "precision" in remedies["FP8 activations"].cost
    assert remedies["offload in-flight activations to CPU"].saves_gib_rank0 > 0
    assert "PCIe" in remedies["offload in-flight activations to CPU"].cost
    assert remedies["ZeRO-1 (shard optimizer state over DP)"].saves_gib_rank0 > 0
    assert remedies["Muon instead of AdamW"].saves_gib_rank0 > 0


def test_last_rank_holds_logits_and_moe_experts_shard_over_ep():
    plan = _plan(layout=Layout(1, 8, 2))
    assert any(line.label == "logits for the loss (FP32)" for line in plan.ranks[-1].lines)
    assert not any(line.label == "logits for the loss (FP32)" for line in plan.ranks[0].lines)
    k3 = find_model("k3")
    ep1 = training_plan(k3, H100, Layout(8, 8, 16, 1), 80.0, TrainSettings(), with_remedies=False)
    ep64 = training_plan(k3, H100, Layout(8, 8, 16, 64), 80.0, TrainSettings(), with_remedies=False)
    assert ep64.ranks[1].total("weights") < ep1.ranks[1].total("weights")


def test_json_has_ranks_with_the_five_rows():
    data = _plan(layout=Layout(2, 8, 2)).to_json()
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    for key in ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "comm_buffers_gib", "in_flight_microbatches"):
        assert key in data["ranks"][0]
    assert data["ranks"][0]["in_flight_microbatches"] == 2 and data["ranks"][1]["in_flight_microbatches"] == 1
