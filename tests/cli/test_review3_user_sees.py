"""Small things a user reads, found by a fuzzing review: every sentence is about this input, no placeholder
to fill in, no `None`."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"


def _analyze(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3diag", "analyze", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_a_bundle_cut_to_a_few_bytes_is_called_cut_not_to_be_unpacked(tmp_path: Path) -> None:
    whole = gzip.compress(b"x" * 100_000)
    cut = tmp_path / "node.tar.gz"
    cut.write_bytes(whole[:60])
    result = _analyze(str(cut))
    assert f"{cut} is gzip-compressed but ends early or is corrupt (60 bytes" in result.stdout, result.stdout
    assert "unpack it first" not in result.stdout  # gunzip would fail on it too
    whole_file = tmp_path / "notes.txt.gz"
    whole_file.write_bytes(gzip.compress(b"hello\n"))
    assert f"unpack it first (`gunzip -k {whole_file}`)" in _analyze(str(whole_file)).stdout


def test_a_manifest_without_a_schema_says_so_not_none(tmp_path: Path) -> None:
    import shutil

    bundle = tmp_path / "node"
    shutil.copytree(EXAMPLE, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.pop("schema", None)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = _analyze(str(bundle))
    assert "manifest.json names no schema (expected 'k3diag.bundle/1')" in result.stdout, result.stdout
    assert "'None'" not in result.stdout


def test_the_audit_asks_for_an_all_reduce_run_that_pastes_into_a_shell() -> None:
    from k3diag.audit.q_p2p import P2P_REQUEST

    assert "<" not in P2P_REQUEST and '-g "$(nvidia-smi -L | wc -l)"' in P2P_REQUEST
