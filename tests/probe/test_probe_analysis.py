"""Probe readings judged against the machine's other evidence: a GPU whose host copies fall short of
its PCIe link class is named, with the down-trained link as the cause when the readings show it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.collect.probe.cuda import CudaDriverApi
from k3diag.collect.probe.measure import MIB, ProbeOptions, run_probe
from tests.probe.fake_gpu import FakeCudaLibrary, FakeDevice, FakeMachine

# Recorded NVML readings of a dual-socket 8x L40S box whose GPU2 trained at x8 (fixtures/nvml/SOURCES.md).
L40S_READINGS = Path(__file__).resolve().parents[2] / "fixtures" / "nvml" / "pcie-8x-l40s-dual-socket-gpu2-x8.json"


def _l40s_probe(tmp_path: Path, gpu2_gbps: float) -> Path:
    readings = json.loads(L40S_READINGS.read_text())
    devices = [FakeDevice("NVIDIA L40S", d["bus_id"], total_bytes=48 * 1024**3, h2d_gbps=24.6, d2h_gbps=25.1)
               for d in readings["devices"]]
    devices[2].h2d_gbps, devices[2].d2h_gbps = gpu2_gbps, gpu2_gbps + 0.4
    machine = FakeMachine(devices=devices, peer_disabled_gbps=10.0)
    doc = run_probe(CudaDriverApi(FakeCudaLibrary(machine)), ProbeOptions(size_bytes=2 * MIB, pairs=False))
    path = tmp_path / "probe-readings.json"
    path.write_text(json.dumps(doc))
    return path


def test_gpu_at_half_its_link_class_is_named_with_the_narrow_link_as_cause(tmp_path: Path) -> None:
    probe = _l40s_probe(tmp_path, gpu2_gbps=12.3)
    result = CliRunner().invoke(app, ["analyze", str(L40S_READINGS), str(probe), "--json"])
    report = json.loads(result.stdout)
    low = [f for f in report["findings"] if f["id"] == "probe-host-bandwidth-low"]
    assert [f["subjects"] for f in low] == [["GPU2"]]
    finding = low[0]
    assert finding["title"] == "GPU2 moves 12.3 GB/s host->device over a Gen4 x16 link that gives ~25 GB/s"
    assert "The link trained at Gen4 x8" in finding["explanation"]
    assert "pcie-width-below-max@GPU2" in finding["causes"]
    assert any(e["text"].startswith("probe GPU2 pinned host->device 12.3 GB/s") for e in finding["evidence"])
    probe_input = next(i for i in report["inputs"] if i["path"] == str(probe))
    assert probe_input["format"] == "probe-readings"


def test_gpus_within_their_link_class_get_no_finding(tmp_path: Path) -> None:
    probe = _l40s_probe(tmp_path, gpu2_gbps=24.0)
    result = CliRunner().invoke(app, ["analyze", str(L40S_READINGS), str(probe), "--json"])
    report = json.loads(result.stdout)
    assert [f for f in report["findings"] if f["id"].startswith("probe-")] == []
    bench = next(b for b in report["benchmarks"] if b["tool"] == "k3diag-probe")
    assert [g["host_to_device_gbps"] for g in bench["gpus"]] == [24.6, 24.6, 24.0, 24.6, 24.6, 24.6, 24.6, 24.6]


def test_corrupted_copies_fail(tmp_path: Path) -> None:
    doc = json.loads(_l40s_probe(tmp_path, gpu2_gbps=24.0).read_text())
    doc["gpus"][5]["data_ok"] = False
    probe = tmp_path / "corrupt.json"
    probe.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["analyze", str(L40S_READINGS), str(probe), "--json"])
    report = json.loads(result.stdout)
    bad = next(f for f in report["findings"] if f["id"] == "probe-data-mismatch")
    assert bad["severity"] == "fail" and bad["subjects"] == ["GPU5"]
    assert bad["title"] == "Bytes copied to GPU5 and back came back different"
    assert result.exit_code == 2
