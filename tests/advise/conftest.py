from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.advise.catalog import find_model
from k3diag.advise.memory import Layout, ReserveSettings, stage_ledgers

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "advise"


@pytest.fixture(scope="session")
def k3():
    return find_model("k3")


@pytest.fixture(scope="session")
def k3_tp8(k3):
    """Kimi K3 on one MI355X of an 8-GPU TP8 group, experts split by TP (AMD's Day-0 layout)."""
    return stage_ledgers(k3, Layout(dp=1, tp=8, pp=1, ep=1), 288.0, 1 << 20, ReserveSettings())[0]


@pytest.fixture
def advise_fixtures() -> Path:
    return FIXTURES
