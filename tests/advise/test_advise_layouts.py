"""Layout enumeration, placement from the topology planner, and the plan built on them."""

from __future__ import annotations

import sys

import pytest

from k3diag.advise.catalog import find_model, parse_dtype_overrides, with_overrides
from k3diag.advise.layouts import LayoutError, candidate_layouts, make_placement, planner_groups
from k3diag.advise.memory import Layout
from k3diag.advise.hardware import AdviceError, hardware_from_flags, hardware_from_machine
from k3diag.advise.plan import advise
from k3diag.model.machine import Machine
from k3diag.model.topology import Link


def test_every_dp_tp_pp_ep_combination_for_8_gpus(k3):
    layouts = candidate_layouts(8, k3.arch)
    assert all(l.dp * l.tp * l.pp == 8 for l in layouts)
    assert Layout(1, 8, 1, 1) in layouts and Layout(1, 8, 1, 8) in layouts
    assert Layout(1, 1, 8, 1) in layouts and Layout(8, 1, 1, 8) in layouts
    assert len(set(layouts)) == len(layouts)


def test_dense_models_get_no_ep_and_tp_must_divide_heads():
    llama = find_model("llama-3.1-70b")
    assert all(l.ep == 1 for l in candidate_layouts(8, llama.arch))
    with pytest.raises(LayoutError, match="dense"):
        candidate_layouts(8, llama.arch, ep=2)
    qwen = find_model("qwen3-235b-a22b")
    assert {l.tp for l in candidate_layouts(16, qwen.arch)} <= {1, 2, 4, 8, 16}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 16}, "needs 16 GPUs but only 8"),
        ({"tp": 3}, "does not divide the 8 GPUs"),
        ({"pp": 0}, "at least 1"),
    ],
)
def test_impossible_layouts_are_one_sentence(k3, kwargs, message):
    with pytest.raises(LayoutError, match=message):
        candidate_layouts(8, k3.arch, **kwargs)


def test_tp_that_does_not_divide_the_heads_is_refused():
    with pytest.raises(LayoutError, match="does not divide the 64 attention heads"):
        candidate_layouts(12, find_model("llama-3.1-70b").arch, tp=12)


def _pcie_pairs_machine() -> Machine:
    """GPU0-GPU2 and GPU1-GPU3 share a switch; numbering suggests the wrong pairs."""
    machine = Machine()
    for i in range(4):
        machine.gpu(i).name = "NVIDIA L40S"
        machine.gpu(i).memory_total_mib = 46068
    for a in range(4):
        for b in range(a + 1, 4):
            machine.add_link(Link(f"GPU{a}", f"GPU{b}", "PIX" if (a, b) in ((0, 2), (1, 3)) else "SYS"))
    return machine


def test_tp_groups_come_from_the_planner_when_topology_is_known():
    machine = _pcie_pairs_machine()
    groups, worst, note = planner_groups(machine, [2, 4])
    assert note is None and groups[2] == [[0, 2], [1, 3]] and worst[2] == "PIX"
    placement = make_placement(Layout(2, 2, 1), [0, 1, 2, 3], groups, note)
    assert placement.source == "planner" and placement.tp_groups(Layout(2, 2, 1)) == [[0, 2], [1, 3]]


def test_planner_absent_falls_back_to_consecutive_groups_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "k3diag.analyze.planner", None)  # import now fails
    groups, worst, note = planner_groups(_pcie_pairs_machine(), [2])
    assert groups == {} and "not available" in note
    placement = make_placement(Layout(2, 2, 1), [0, 1, 2, 3], groups, note)
    assert placement.source == "contiguous" and placement.tp_groups(Layout(2, 2, 1)) == [[0, 1], [2, 3]]


def test_plan_from_a_machine_uses_planner_pairs_and_warns_on_sys():
    machine = _pcie_pairs_machine()
    hw = hardware_from_machine(machine, "test machine")
    assert hw.gpu.id == "l40s" and hw.count == 4 and hw.memory_gib == pytest.approx(46068 / 1024)
    int4 = with_overrides(find_model("llama-3.1-70b"), parse_dtype_overrides("int4"), None)
    plan = advise(int4, hw, context=8192, dp=2, tp=2)
    result = plan.recommended
    assert result.placement.tp_groups(result.layout) == [[0, 2], [1, 3]]
    assert result.links.tp.code == "PIX"
    four = advise(int4, hw, context=8192, tp=4)
    assert any("SYS" in w for w in four.recommended.warnings)


def test_machine_without_recognizable_gpus_is_a_clear_error():
    machine = Machine()
    machine.gpu(0).name = "Mystery Accelerator 9000"
    with pytest.raises(AdviceError, match="not in the catalog; pass --gpu"):
        hardware_from_machine(machine, "bundle.tar.gz")
    with pytest.raises(AdviceError, match="no GPUs were found"):
        hardware_from_machine(Machine(), "empty.txt")


def test_memory_override_cannot_exceed_the_gpu():
    with pytest.raises(AdviceError, match="more than the 288.0 GiB"):
        hardware_from_flags("mi355x", 8, memory_gib=300)
    assert hardware_from_flags("mi355x", 8, memory_gib=250).memory_gib == 250


def test_multi_node_tp_is_warned_about():
    plan = advise(find_model("k3"), hardware_from_flags("h200", 16), context=131072, tp=16)
    assert plan.recommended.links.tp.klass == "ib-400g"
    assert any("TP16" in w for w in plan.recommended.warnings)
