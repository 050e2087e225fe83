"""`k3diag topo` on a host with no GPU, and with fake tools on PATH (a hanging nvidia-smi)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()


@pytest.fixture
def empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_no_gpu_host_prints_host_and_explains(fixtures_dir: Path, empty_path: Path) -> None:
    root = fixtures_dir / "hostroot" / "dual_socket"
    result = runner.invoke(app, ["topo", "--root", str(root)])
    assert result.exit_code == 3, result.output  # no GPU where one is looked for: cannot pass
    assert "2 CPU packages" in result.output
    assert "node1: cpus 32-63,96-127" in result.output
    assert "No GPU was found, so this machine cannot be assessed" in result.output
    assert "nvidia-smi` is not installed" in result.output


def test_no_gpu_host_json(fixtures_dir: Path, empty_path: Path) -> None:
    root = fixtures_dir / "hostroot" / "dual_socket"
    result = runner.invoke(app, ["topo", "--root", str(root), "--json"])
    report = json.loads(result.stdout)
    assert report["schema"] == "k3diag.report/1"
    assert report["topology"]["gpus"] == []
    assert [f["id"] for f in report["findings"]] == ["no-gpu-found"]
    assert report["verdict"]["level"] == "none"
    assert len(report["host"]["numa_nodes"]) == 2
    assert report["exit_code"] == 3


def test_hanging_nvidia_smi_is_reported_and_report_still_comes_out(fixtures_dir: Path, empty_path: Path) -> None:
    tool = empty_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\nexec sleep 60\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (empty_path / "sleep").symlink_to("/bin/sleep")
    root = fixtures_dir / "hostroot" / "dual_socket"
    result = runner.invoke(app, ["topo", "--root", str(root), "--timeout", "1", "--json"])
    report = json.loads(result.stdout)
    ids = [f["id"] for f in report["findings"]]
    assert "command-timed-out" in ids
    timed_out = next(f for f in report["findings"] if f["id"] == "command-timed-out")
    assert "fallen off the bus" in timed_out["explanation"]
    # one hang stops the other nvidia-smi calls: only one was attempted
    assert sum(1 for i in report["inputs"] if i["path"].startswith("nvidia-smi")) == 1
    assert result.exit_code == 2
    assert len(report["host"]["numa_nodes"]) == 2


def test_fail_on_never_and_bad_value(fixtures_dir: Path, empty_path: Path) -> None:
    root = fixtures_dir / "hostroot" / "dual_socket"
    result = runner.invoke(app, ["topo", "--root", str(root), "--fail-on", "never"])
    assert result.exit_code == 0 and "No GPU was found" in result.output
    bad = runner.invoke(app, ["topo", "--fail-on", "sometimes"])
    assert bad.exit_code == 64  # a usage error (EX_USAGE), never 2, which means failures found
    assert "must be one of fail, warn, never" in bad.output
