from __future__ import annotations

from pathlib import Path

import pytest
from nccl_fixtures import FIXTURES


@pytest.fixture
def nccl_dir() -> Path:
    return FIXTURES / "nccl"


@pytest.fixture
def bench_dir() -> Path:
    return FIXTURES / "bench"
