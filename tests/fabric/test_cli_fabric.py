"""What a user scripting against `k3diag analyze --json` sees for fabric and NIC pastes."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3diag.cli import app
from tests.fabric.conftest import FIXTURES


def _analyze(*names: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["analyze", *(str(FIXTURES / n) for n in names), "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_gb200_tray_fabric_fault_with_its_line() -> None:
    code, report = _analyze("fabric/nvlink-s-gb200-18x53-cut.txt",
                            "fabric/query-fabric-insufficient-resources-azhpc506.txt")
    assert code == 2
    [finding] = [f for f in report["findings"] if f["id"] == "gpu-fabric-degraded"]
    assert finding["subjects"] == ["GPU0"] and finding["severity"] == "fail"
    assert "Insufficient Resources" in finding["evidence"][0]["text"]
    assert report["fabric"]["gpu_fabric"][0]["clique_id"] == 0
    assert {r["format"] for r in report["inputs"]} == {"nvidia-smi-nvlink-status", "nvidia-smi-query-fabric"}


def test_nics_carry_port_state_and_gdr_reach() -> None:
    code, report = _analyze("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt",
                            "fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt")
    nics = {nic["name"]: nic for nic in report["topology"]["nics"]}
    assert nics["NIC2"]["gdr"] == {"possible": None, "level": "PXB", "eligible_gpus": [], "nearest_gpus": [2]}
    assert (nics["mlx5_0"]["state"], nics["mlx5_0"]["rate_gbps"], nics["mlx5_0"]["link_layer"]) == (
        "active", 200.0, "Ethernet")
    best = {pair["gpu"]: pair["nic"] for pair in report["fabric"]["gdr"] if pair["best"]}
    assert best == {0: "NIC0", 1: "NIC1", 2: "NIC2", 3: "NIC3"}
    assert code == 1  # the disabled spare port warns
