"""Live NVML collection of per-link NVLink state, remote device type and fabric registration (fake backend)."""

from __future__ import annotations

import ctypes
import json

import pynvml

from k3diag.analyze.engine import run_rules
from k3diag.collect.nvml import collect_nvml, fabric_info_text
from k3diag.collect.nvml_fake import FakeNvmlBackend
from k3diag.join.build import build_machine
from tests.fabric.conftest import FIXTURES

H100 = FIXTURES / "nvml/h100-sxm-8x-nvswitch-gpu3-link-down.json"


def test_link_down_seen_live_names_the_link() -> None:
    machine = build_machine([collect_nvml(FakeNvmlBackend.from_file(H100))])
    gpu3 = machine.fabric.links_of(3)
    assert [r.link for r in gpu3 if r.active is False] == [7]
    assert {r.remote_type for r in gpu3 if r.active} == {"NVSwitch"}
    [finding] = [f for f in run_rules(machine) if f.id == "nvlink-inactive"]
    assert finding.subjects == ["GPU3"] and "(link 7)" in finding.title
    assert "nvmlDeviceGetNvLinkState(GPU3, link 7) = NVML_FEATURE_DISABLED" in finding.evidence[0].text


def test_fabric_info_recorded_and_judged() -> None:
    readings = json.loads(H100.read_text())
    for device in readings["devices"]:
        device["name"] = "NVIDIA GB200"
        device["fabric"] = {"state": "Completed", "status": "Success", "clique_id": 4026,
                            "cluster_uuid": "9c6f5af3-53bf-49b5-a436-b66766c413c3", "health_summary": "Healthy",
                            "health_mask": 0}
    readings["devices"][1]["fabric"].update(status="Insufficient Resources", clique_id=0,
                                            cluster_uuid="00000000-0000-0000-0000-000000000000")
    evidence = collect_nvml(FakeNvmlBackend(readings))
    assert json.loads(evidence.data)["devices"][1]["fabric"]["status"] == "Insufficient Resources"
    machine = build_machine([evidence])
    findings = [f for f in run_rules(machine) if f.id == "gpu-fabric-degraded"]
    assert [f.subjects for f in findings] == [["GPU1"]]
    assert findings[0].evidence[0].text.startswith("nvmlDeviceGetGpuFabricInfoV(GPU1): state=Completed, "
                                                   "status=Insufficient Resources, clique_id=0")


def test_fabric_struct_to_text() -> None:
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    info.state = 3
    info.status = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    info.cliqueId = 0
    info.healthSummary = 2
    ctypes.memmove(info.clusterUuid, bytes(range(16)), 16)
    text = fabric_info_text(pynvml, info)
    assert text["state"] == "Completed" and text["clique_id"] == 0 and text["health_summary"] == "Unhealthy"
    assert text["cluster_uuid"] == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert text["status"].lower() == "insufficient resources"
    pending = pynvml.c_nvmlGpuFabricInfo_t()
    pending.state = 2
    assert fabric_info_text(pynvml, pending)["status"] is None  # only meaningful once completed
