"""Paths and sections of the fixtures the NCCL tests read. A module of its own name, not `conftest`: with
several test folders collected together, `from conftest import ...` finds whichever conftest came first."""

from __future__ import annotations

from pathlib import Path

from k3diag.parse.text import Section

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def fixture_path(domain: str, name: str) -> Path:
    return FIXTURES / domain / name


def fixture_section(domain: str, name: str) -> Section:
    return Section(text=fixture_path(domain, name).read_text(encoding="utf-8"), first_line=1)
