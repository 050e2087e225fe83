"""deploy/nhc/k3diag.nhc sourced the way LBNL NHC sources its checks. NHC itself is not packaged in Debian,
so its `die` (which records the failure and drains) is replaced by one that prints what NHC would log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "deploy" / "nhc" / "k3diag.nhc"
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"
GOOD = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"


@pytest.mark.parametrize("bundle, status, logged", [
    (BAD, 1, "die 1 k3diag: pcie-width-below-max GPU2: GPU2 link runs at x8 of x16\n"),
    (GOOD, 0, ""),
])
def test_check_k3diag_fails_through_die_only_on_a_failure(bundle: Path, status: int, logged: str) -> None:
    script = (f'die() {{ echo "die $1 $2"; }}\n'
              f'K3DIAG="env PYTHONPATH={REPO} {sys.executable} -m k3diag"\n'
              f'. {CHECK}\n'
              f'check_k3diag --from {bundle}\n')
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == status, result.stderr
    assert result.stdout == logged
