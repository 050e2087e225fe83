"""Reading `scontrol show node` (real Slurm 22.05 outputs) and the drain/resume decision built on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.fleet.slurm import drain_reason, parse_show_node

SLURM = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


@pytest.mark.parametrize("name, state, reason, drained", [
    ("scontrol-show-node-22.05-idle.txt", "IDLE", None, False),
    ("scontrol-show-node-22.05-drain.txt", "IDLE+DRAIN", "k3diag: pcie-width-below-max GPU2", True),
    ("scontrol-show-node-22.05-drain-by-hand.txt", "IDLE+DRAIN", "maintenance: PSU swap", True),
])
def test_state_and_reason_without_the_user_and_time(name: str, state: str, reason: str | None, drained: bool) -> None:
    status = parse_show_node((SLURM / name).read_text())
    assert (status.state, status.reason, status.drained) == (state, reason, drained)


def test_pasted_with_crlf_and_tabs() -> None:
    text = (SLURM / "scontrol-show-node-22.05-drain.txt").read_text().replace("\n", "\r\n").replace("   ", "\t")
    status = parse_show_node(text)
    assert status.reason == "k3diag: pcie-width-below-max GPU2" and status.drained


def test_the_reason_names_the_finding_and_stays_short() -> None:
    assert drain_reason("pcie-width-below-max", "GPU2") == "k3diag: pcie-width-below-max GPU2"
    long = drain_reason("nccl-same-host-pair-not-p2p", "host-" + "x" * 300)
    assert long.startswith("k3diag: nccl-same-host-pair-not-p2p host-") and len(long) == 120
