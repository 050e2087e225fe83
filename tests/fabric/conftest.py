from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.machine import Machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def machine_from(*names: str, texts: dict[str, str] | None = None) -> Machine:
    evidence = [Evidence(name=name, path=FIXTURES / name) for name in names]
    for name, text in (texts or {}).items():
        evidence.append(Evidence(name=name, data=text.encode()))
    return build_machine(evidence)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
