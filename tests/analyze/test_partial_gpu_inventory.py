"""Inputs that show only some of a machine's GPUs: a GPU list cut short in the paste (`GPU0  GPU1  GPU2  ...`) and
a filtered `nvidia-smi -q -i 0,1`. The verdict judges no TP size for a machine it has not seen whole, the
machine line says how many GPUs are known, and `topology.gpu_inventory` says whether the list is complete."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from tests.nvidia_cuts import first_gpu_blocks

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"
CUT_P2P = NVIDIA / "topo-p2p-n-8x-rtx-pro-6000-580-ns-elided-header.txt"
FULL_Q = NVIDIA / "smi-q-8xh100-565-multi-gpu-fabric.txt"
runner = CliRunner()


def _report(path: Path) -> dict:
    return json.loads(runner.invoke(app, ["analyze", str(path), "--json"]).stdout)


def test_a_gpu_list_cut_with_dots_is_at_least_three_gpus_not_a_three_gpu_machine() -> None:
    report = _report(CUT_P2P)
    assert report["verdict"]["level"] == "unknown"
    assert report["verdict"]["text"].startswith(
        f"At least 3 GPUs: the GPU list was cut short in the paste (`GPU0 GPU1 GPU2 ...`, line 3 of {CUT_P2P}), so "
        "the GPUs left out and the paths to them are unknown and no TP size can be judged")
    inventory = report["topology"]["gpu_inventory"]
    assert inventory["shown"] == 3 and inventory["attached"] is None and inventory["complete"] is False
    assert [(cut["line"], cut["text"].split()) for cut in inventory["cut_lists"]] == [(3, ["GPU0", "GPU1", "GPU2", "..."])]
    text = runner.invoke(app, ["analyze", str(CUT_P2P)]).stdout
    assert "Machine: at least 3 GPUs (a GPU list was cut)" in text


def test_two_gpu_blocks_of_eight_attached_are_two_of_eight(tmp_path: Path) -> None:
    path = first_gpu_blocks(FULL_Q.name, 2, tmp_path, "smi-q-i01.txt")
    report = _report(path)
    assert report["verdict"]["text"].startswith(
        f"2 of the 8 attached GPUs are in these inputs (`Attached GPUs : 8`, line 7 of {path}): the output was "
        "filtered (`-i`), so no TP size can be judged")
    assert {"what": "the other 6 attached GPUs and the paths between them",
            "command": "nvidia-smi -q; nvidia-smi topo -m"} in report["verdict"]["missing"]
    inventory = report["topology"]["gpu_inventory"]
    assert (inventory["shown"], inventory["attached"], inventory["complete"]) == (2, 8, False)
    assert inventory["attached_source"]["line"] == 7
    assert "Machine: 2 of 8 attached GPUs (2x NVIDIA H100 80GB HBM3)" in runner.invoke(app, ["analyze", str(path)]).stdout


def test_the_whole_output_is_a_complete_inventory_and_an_lspci_alone_says_nothing_of_one() -> None:
    report = _report(FULL_Q)
    inventory = report["topology"]["gpu_inventory"]
    assert (inventory["shown"], inventory["attached"], inventory["complete"], inventory["cut_lists"]) == (8, 8, True, [])
    assert "attached" not in report["verdict"]["text"] and "At least" not in report["verdict"]["text"]
    lspci = _report(NVIDIA.parent / "pcie" / "lspci-vv-amd-rx570-spaces.txt")["topology"]["gpu_inventory"]
    assert lspci["complete"] is None and lspci["attached"] is None
