"""Live `k3diag topo` reads NVML and sysfs in process and runs a tool only for what they lack.

NVML is replaced at its boundary (the backend's function table, replaying recorded readings of an
8x L40S box), nvidia-smi and lspci by executables on PATH that log every call."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.collect import nvml
from k3diag.collect.nvml_fake import FakeNvmlBackend
from k3diag.collect.live import RDMA_NIC_DRIVERS, _snapshot_has_rdma_nic
from k3diag.evidence import Evidence

READINGS = Path(__file__).resolve().parents[2] / "fixtures" / "nvml" / "pcie-8x-l40s-dual-socket-gpu2-x8.json"


@pytest.fixture
def logged_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool in ("nvidia-smi", "lspci"):
        path = bin_dir / tool
        path.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\nexit 1\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))
    return log


def test_topo_with_nvml_runs_no_nvidia_smi(fixtures_dir: Path, logged_tools: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "PynvmlBackend", lambda sysfs_root: FakeNvmlBackend.from_file(READINGS))
    root = fixtures_dir / "hostroot" / "dual_socket"  # CPUs and NUMA nodes; its PCI devices come from NVML here
    result = CliRunner().invoke(app, ["topo", "--root", str(root), "--json"])
    report = json.loads(result.stdout)
    assert [g["name"] for g in report["topology"]["gpus"]] == ["NVIDIA L40S"] * 8
    assert report["topology"]["gpus"][2]["pcie"]["width_current"] == 8
    calls = logged_tools.read_text().splitlines() if logged_tools.exists() else []
    assert calls == []  # neither nvidia-smi (NVML answered) nor lspci (sysfs answered)


def test_topo_without_nvml_still_asks_nvidia_smi(fixtures_dir: Path, logged_tools: Path) -> None:
    root = fixtures_dir / "sysfs" / "dual_socket_switch"
    CliRunner().invoke(app, ["topo", "--root", str(root), "--json"])
    calls = logged_tools.read_text().splitlines()
    assert calls[0] == "nvidia-smi topo -m"
    assert not any(call.startswith("lspci") for call in calls)


def test_an_rdma_nic_keeps_topo_m_for_its_gpu_nic_paths() -> None:
    snapshot = {"schema": "k3diag.sysfs-snapshot/1",
                "devices": [{"bdf": "0000:1a:00.0", "driver": "mlx5_core"}, {"bdf": "0000:1b:00.0", "driver": "nvidia"}]}
    assert "mlx5_core" in RDMA_NIC_DRIVERS
    assert _snapshot_has_rdma_nic(Evidence(name="sysfs-snapshot.json", data=json.dumps(snapshot).encode()))
    snapshot["devices"][0]["driver"] = "virtio-pci"
    assert not _snapshot_has_rdma_nic(Evidence(name="sysfs-snapshot.json", data=json.dumps(snapshot).encode()))
