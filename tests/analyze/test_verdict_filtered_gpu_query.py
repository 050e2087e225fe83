"""`nvidia-smi -q -i 0` of a multi-GPU machine: one GPU block under `Attached GPUs : 2` is one GPU of the
inputs, not a one-GPU machine; the verdict says so and names the commands that show them all."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from tests.nvidia_cuts import first_gpu_blocks

FULL = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia" / "smi-q-2x3090-560.txt"
runner = CliRunner()


def _one_block(tmp_path: Path) -> Path:
    """The real 2-GPU output cut after its first GPU block, as `nvidia-smi -q -i 0` prints it."""
    return first_gpu_blocks(FULL.name, 1, tmp_path)


def test_one_gpu_block_of_two_attached_is_not_judged_a_one_gpu_machine(tmp_path: Path) -> None:
    path = _one_block(tmp_path)
    report = json.loads(runner.invoke(app, ["analyze", str(path), "--json"]).stdout)
    verdict = report["verdict"]
    assert "One GPU" not in verdict["text"]
    assert verdict["text"].startswith("1 of the 2 attached GPUs is in these inputs (`Attached GPUs : 2`")
    assert "line 7 of" in verdict["text"] and "`nvidia-smi -q` without `-i`" in verdict["text"]
    assert verdict["level"] == "unknown"
    text = runner.invoke(app, ["analyze", str(path)]).stdout
    assert "1 of the 2 attached GPUs" in text and "no tensor parallelism possible" not in text


def test_a_real_one_gpu_machine_still_reads_one_gpu() -> None:
    k80 = [p for p in (FULL.parent).glob("smi-q-*k80*")]
    if not k80:
        return
    report = json.loads(runner.invoke(app, ["analyze", str(k80[0]), "--json"]).stdout)
    assert "attached GPUs is in these inputs" not in report["verdict"]["text"]


def test_the_missing_list_names_the_other_gpu_in_words(tmp_path: Path) -> None:
    report = json.loads(runner.invoke(app, ["analyze", str(_one_block(tmp_path)), "--json"]).stdout)
    assert {"what": "the other attached GPU and the paths between them",
            "command": "nvidia-smi -q; nvidia-smi topo -m"} in report["verdict"]["missing"]
