"""Counts as a reader sees them in every report: a plural that agrees, thousands grouped."""

from __future__ import annotations

from k3diag.model.words import counted, per_kind


def test_counts_agree_and_large_ones_are_grouped() -> None:
    assert counted(1, "GPU") == "1 GPU"
    assert counted(0, "GPU") == "0 GPUs"
    assert counted(2, "PCIe switch", "PCIe switches") == "2 PCIe switches"
    assert counted(2142720, "connection line") == "2,142,720 connection lines"


def test_counts_per_kind_name_each_kind_after_its_number() -> None:
    assert per_kind({"P2P": 133632, "NET": 9216, "SHM": 0}) == "9,216 NET, 133,632 P2P"
    assert per_kind({"P2P": 5}, ("P2P", "SHM", "NET")) == "5 P2P, 0 SHM, 0 NET"
    assert per_kind({"SHM": 0}) == ""
