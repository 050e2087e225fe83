"""`k3diag topo --from` names how many paths it read in words: '(1 path)', '(2 paths)'."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def test_the_title_counts_one_path_and_several() -> None:
    topo = str(NVIDIA / "topo-m-2gpu-nv2-numa-na.txt")
    one = CliRunner().invoke(app, ["topo", "--from", topo])
    assert one.stdout.splitlines()[0] == "k3diag topo: saved evidence (1 path)", one.stdout
    two = CliRunner().invoke(app, ["topo", "--from", topo, "--from", str(NVIDIA / "csv-l40s-8x-idle-gen1.txt")])
    assert two.stdout.splitlines()[0] == "k3diag topo: saved evidence (2 paths)", two.stdout
