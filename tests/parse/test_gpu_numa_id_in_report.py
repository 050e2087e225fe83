"""A GB200 tray's `GPU NUMA ID` column (each GPU's memory its own NUMA node) reaches the JSON report."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def test_each_gpu_of_a_gb200_tray_has_its_gpu_numa_id_in_the_json() -> None:
    result = CliRunner().invoke(app, ["analyze", str(FIXTURES / "topo-m-4xgb200-nv18-gpu-numa-id-8nic.txt"), "--json"])
    gpus = json.loads(result.stdout)["topology"]["gpus"]
    assert [(gpu["index"], gpu["gpu_numa_id"]) for gpu in gpus] == [(0, 2), (1, 10), (2, 18), (3, 26)]


def test_a_gpu_numa_id_printed_as_n_a_is_null() -> None:
    result = CliRunner().invoke(app, ["analyze", str(FIXTURES / "topo-m-2x5090-tabs-gpu-numa-id.txt"), "--json"])
    gpus = json.loads(result.stdout)["topology"]["gpus"]
    assert [gpu["gpu_numa_id"] for gpu in gpus] == [None, None]
    assert [gpu["numa_node"] for gpu in gpus] == [0, 0]
