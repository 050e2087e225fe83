"""The NVML collector, run for real against recorded readings replayed by the fake backend."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from k3diag.collect import nvml
from k3diag.collect.nvml import NvmlUnavailable, collect_nvml
from k3diag.collect.nvml_fake import FakeNvmlBackend
from k3diag.join.build import build_machine

NVML_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"
PCIE_BOX = NVML_FIXTURES / "pcie-8x-l40s-dual-socket-gpu2-x8.json"
NVSWITCH_BOX = NVML_FIXTURES / "h100-sxm-8x-nvswitch-gpu3-link-down.json"


@pytest.mark.parametrize("fixture", [PCIE_BOX, NVSWITCH_BOX])
def test_replayed_readings_round_trip(fixture: Path) -> None:
    recorded = json.loads(fixture.read_text())
    evidence = collect_nvml(FakeNvmlBackend(recorded))
    assert (evidence.name, evidence.kind, evidence.format_hint, evidence.error) == (
        "nvml-readings.json", "reading", "nvml-readings", None,
    )
    assert json.loads(evidence.data) == recorded


def test_pcie_box_readings() -> None:
    readings = json.loads(collect_nvml(FakeNvmlBackend.from_file(PCIE_BOX)).data)
    gpu2 = readings["devices"][2]
    assert gpu2["pcie"] == {"gen_current": 4, "gen_max": 4, "gen_device_max": 4, "width_current": 8, "width_max": 16}
    assert gpu2["cpu_affinity"] == "0-31,64-95" and gpu2["numa_node"] == 0
    paths = {(link["a"], link["b"]): link["path"] for link in readings["links"]}
    assert paths[(0, 1)] == "PIX" and paths[(0, 2)] == "NODE" and paths[(3, 4)] == "SYS"
    statuses = {(p["src"], p["dst"], p["capability"]): p["status"] for p in readings["p2p"]}
    assert statuses[(0, 1, "read")] == "OK" and statuses[(0, 7, "read")] == "CNS"
    assert statuses[(0, 1, "nvlink")] == "NS"


def test_nvswitch_pairs_count_links_through_the_switches() -> None:
    readings = json.loads(collect_nvml(FakeNvmlBackend.from_file(NVSWITCH_BOX)).data)
    nvlinks = {(link["a"], link["b"]): link["nvlinks"] for link in readings["links"]}
    assert nvlinks[(0, 1)] == 18
    assert nvlinks[(2, 3)] == 17 and nvlinks[(3, 7)] == 17  # GPU3 link 7 is down
    assert readings["devices"][3]["nvlinks"][7] == {"link": 7, "active": False, "remote_bus_id": None, "remote_type": None}


def test_a_failing_call_costs_only_its_field() -> None:
    backend = FakeNvmlBackend.from_file(PCIE_BOX, fail={"pcie_width_current", "topology_common_ancestor", "uuid"})
    readings = json.loads(collect_nvml(backend).data)
    assert all(device["pcie"]["width_current"] is None for device in readings["devices"])
    assert all(device["pcie"]["width_max"] == 16 for device in readings["devices"])
    assert all(device["uuid"] is None for device in readings["devices"])
    assert all(link["path"] is None and link["topology_level"] is None for link in readings["links"])
    assert readings["devices"][5]["name"] == "NVIDIA L40S"


def test_everything_failing_still_returns_readings() -> None:
    recorded = json.loads(PCIE_BOX.read_text())
    failing = {name for name in dir(FakeNvmlBackend) if not name.startswith("_") and name not in {"init", "shutdown", "from_file", "device_count"}}
    readings = json.loads(collect_nvml(FakeNvmlBackend(recorded, fail=failing)).data)
    assert len(readings["devices"]) == 8
    assert readings["devices"][0]["name"] is None and readings["p2p"][0]["status"] is None


def test_no_gpu_host_says_so_in_one_sentence() -> None:
    evidence = collect_nvml(FakeNvmlBackend({"schema": nvml.SCHEMA, "devices": [], "device_count": 0}))
    assert evidence.error == "NVML reports no NVIDIA GPU on this host"
    machine = build_machine([evidence])
    assert machine.gpus == {} and machine.notes[0].message == evidence.error


def test_library_missing_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    class LibraryNotFound(Exception):
        pass

    fake = types.ModuleType("pynvml")
    for name in ("nvmlDeviceGetP2PStatus", "NVML_P2P_CAPS_INDEX_READ", "nvmlDeviceGetTopologyCommonAncestor"):
        setattr(fake, name, object())
    fake.NVMLError_LibraryNotFound = LibraryNotFound

    def nvml_init() -> None:
        raise LibraryNotFound()

    fake.nvmlInit = nvml_init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    evidence = collect_nvml()
    assert evidence.error is not None and "libnvidia-ml.so.1 was not found" in evidence.error
    assert evidence.error.count(".") <= 2
    assert json.loads(evidence.data)["devices"] == []


def test_legacy_pynvml_package_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    legacy = types.ModuleType("pynvml")
    legacy.nvmlInit = lambda: None  # the old package has no P2P status API
    monkeypatch.setitem(sys.modules, "pynvml", legacy)
    with pytest.raises(NvmlUnavailable, match="shadows nvidia-ml-py"):
        nvml.load_pynvml()
    assert "shadows nvidia-ml-py" in (collect_nvml().error or "")


def test_real_backend_on_this_machine_never_raises() -> None:
    # Runs nvidia-ml-py for real: without a driver it must give a sentence, with one it must give readings.
    evidence = collect_nvml()
    readings = json.loads(evidence.data)
    assert readings["schema"] == nvml.SCHEMA
    assert evidence.error is not None or readings["devices"]


@pytest.mark.parametrize(
    ("masks", "cpulist"),
    [([0xFFFFFFFF, 0xFFFFFFFF], "0-31,64-95"), ([0b1011], "0-1,3"), ([0, 1 << 63], "127"), ([], None), ([0], None)],
)
def test_cpu_masks(masks: list[int], cpulist: str | None) -> None:
    assert nvml.masks_to_cpulist(masks) == cpulist
    if cpulist:
        assert nvml.masks_to_cpulist(nvml.cpulist_to_masks(cpulist)) == cpulist
