from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.parse.text import Section

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def fixture_path(domain: str, name: str) -> Path:
    return FIXTURES / domain / name


def fixture_section(domain: str, name: str) -> Section:
    return Section(text=fixture_path(domain, name).read_text(encoding="utf-8"), first_line=1)


@pytest.fixture
def nccl_dir() -> Path:
    return FIXTURES / "nccl"


@pytest.fixture
def bench_dir() -> Path:
    return FIXTURES / "bench"
