"""The example shipped in the package (README: "Try it without a GPU") tells the x8 / SYS / ACS story."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()


def _example() -> Path:
    return Path(str(resources.files("k3diag") / "data" / "examples" / "dual-socket-8gpu-pcie"))


def test_example_bundle_ships_and_analyzes() -> None:
    result = runner.invoke(app, ["analyze", str(_example()), "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 2  # a failure: GPU2 at x8
    assert len(report["topology"]["gpus"]) == 8
    gpu2 = report["topology"]["gpus"][2]
    assert (gpu2["pcie"]["width_current"], gpu2["pcie"]["width_max"]) == (8, 16)
    ids = {f["id"] for f in report["findings"]}
    assert {"pcie-width-below-max", "gpu-pair-sys", "p2p-not-supported"} <= ids
    # TP2 groups stay behind the PCIe switches (PIX pairs), TP4 inside a socket, never across sockets
    assert report["recommendations"]["tp_groups"]["2"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert report["recommendations"]["tp_groups"]["4"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert report["inputs"][0]["format"] == "bundle"
    # one machine: every file of the example describes the same one
    assert "machines" not in report
    assert "inputs-several-machines" not in ids


def test_example_terminal_story() -> None:
    result = runner.invoke(app, ["analyze", str(_example())])
    assert result.output.startswith("k3diag analyze")
    assert ("Verdict [FAIL]: GPU2 link runs at x8 of x16 (fix first). Serve with TP4 on {0,1,2,3} {4,5,6,7}; TP8 "
            "would cross SYS") in result.output
    assert "different machines" not in result.output
    assert "Fix: Reseat the card" in result.output
    # the crossing is one advisory line, not sixteen warnings; one launch line per TP4 group with its NUMA node
    assert "  - 16 GPU pairs cross the CPU interconnect (SYS)" in result.output
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=4,5,6,7 numactl --cpunodebind=1 --membind=1" in result.output
