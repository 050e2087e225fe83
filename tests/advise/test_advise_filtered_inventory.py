"""`advise` from a filtered `nvidia-smi -q -i 0` of an 8-GPU H100 machine: the plan is for the one GPU the input
shows, and the report says that the machine has 8 and how to plan all of them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from tests.nvidia_cuts import first_gpu_blocks

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"
FULL = FIXTURES / "smi-q-8xh100-565-multi-gpu-fabric.txt"
runner = CliRunner()


def _first_block(tmp_path: Path) -> Path:
    return first_gpu_blocks(FULL.name, 1, tmp_path)


def test_the_plan_says_it_covers_one_of_the_eight_attached_gpus_and_how_to_plan_them_all(tmp_path: Path) -> None:
    path = _first_block(tmp_path)
    text = runner.invoke(app, ["advise", "-m", "k2", str(path)]).stdout
    assert text.splitlines()[0] == "Kimi K2 (FP8) on 1 x NVIDIA H100 SXM 80GB (1 of 8 attached shown)"
    assert (f"These inputs show 1 GPU of the 8 attached (`Attached GPUs : 8`, line 7 of {path}): the output was "
            "filtered (`-i`), so this plans for the 1 GPU shown.") in text
    assert "`--gpu h100 --count 8`" in text
    report = json.loads(runner.invoke(app, ["advise", "-m", "k2", str(path), "--json"]).stdout)
    assert report["hardware"]["count"] == 1 and report["hardware"]["attached_count"] == 8


def test_the_whole_output_and_a_real_one_gpu_machine_say_nothing_of_attached_gpus() -> None:
    whole = runner.invoke(app, ["advise", "-m", "k2", str(FULL)]).stdout
    assert whole.splitlines()[0] == "Kimi K2 (FP8) on 8 x NVIDIA H100 SXM 80GB"
    assert "attached" not in whole
    report = json.loads(runner.invoke(app, ["advise", "-m", "k2", str(FULL), "--json"]).stdout)
    assert report["hardware"]["attached_count"] == 8
    one = runner.invoke(app, ["advise", "-m", "llama-70b", str(FIXTURES / "smi-q-gh200-550-c2c-ats-pcie-x1.txt")]).stdout
    assert " on 1 x " in one.splitlines()[0] and "attached" not in one


def test_a_gpu_list_cut_with_dots_is_planned_as_at_least_the_gpus_shown() -> None:
    cut = FIXTURES / "topo-p2p-n-8x-rtx-pro-6000-580-ns-elided-header.txt"
    text = runner.invoke(app, ["advise", "-m", "llama-70b", "--gpu", "rtx-pro-6000", str(cut)]).stdout
    assert text.splitlines()[0] == "Llama-3.1-70B on at least 3 x NVIDIA RTX PRO 6000 Blackwell"
    assert (f"The GPU list in these inputs was cut short in the paste (`GPU0 GPU1 GPU2 ...`, line 3 of {cut}): the "
            "machine has at least 3 GPUs, and this plans for those.") in text
    report = json.loads(runner.invoke(app, ["advise", "-m", "llama-70b", "--gpu", "rtx-pro-6000", str(cut), "--json"]).stdout)
    assert report["hardware"]["count"] == 3 and report["hardware"]["count_is_a_floor"] is True
