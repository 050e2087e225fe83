"""The amdsmi collector: fake backend replay, a broken/missing library, recorded readings."""

from __future__ import annotations

import builtins
import json
import sys
from pathlib import Path

import pytest

from k3diag.collect import amdsmi as collect
from k3diag.collect.amdsmi import (
    FakeAmdSmiBackend,
    RealAmdSmiBackend,
    collect_amdsmi,
    pcie_generation,
    read_amdsmi,
)
from k3diag.join.build import build_machine
from k3diag.parse import amdsmi_readings
from k3diag.parse.text import Section

READINGS = Path(__file__).resolve().parents[2] / "fixtures" / "amdsmi" / "mi300x_8gpu_one_link_down.json"


def test_replay_reproduces_the_recording() -> None:
    recorded = json.loads(READINGS.read_text())
    assert read_amdsmi(FakeAmdSmiBackend(recorded)) == recorded


def test_collect_with_fake_backend_gives_reading_evidence() -> None:
    evidence = collect_amdsmi(FakeAmdSmiBackend.from_file(READINGS))
    assert (evidence.name, evidence.kind, evidence.format_hint, evidence.error) == (
        "amdsmi-readings.json", "reading", "amdsmi-readings", None)
    readings = json.loads(evidence.data)
    assert len(readings["processors"]) == 8 and len(readings["pairs"]) == 56


def test_readings_parse_into_gpus_links_p2p() -> None:
    result = amdsmi_readings.parse(Section(READINGS.read_text(), 1), "amdsmi-readings.json")
    assert amdsmi_readings.sniff(READINGS.read_text()) == 1.0  # our own schema id, nothing else
    assert amdsmi_readings.sniff('{"gpu": 0, "links": []}') == 0.0
    down = next(p for p in result.pairs if (p.src_index, p.dst_index) == (3, 5))
    assert (down.link_type, down.hops, down.weight, down.bandwidth_max) == ("PCIE", 3, 72, None)
    assert down.sources["link_type"].line is None
    assert "amdsmi_topo_get_link_type(GPU3 -> GPU5): PCIE" in down.sources["link_type"].text
    machine = build_machine([collect_amdsmi(FakeAmdSmiBackend.from_file(READINGS))])
    gpu = machine.gpus[4]
    assert (gpu.vendor, gpu.bus_id, gpu.numa_node, gpu.name) == ("AMD", "0000:9f:00.0", 1, "AMD Instinct MI300X")
    assert (gpu.pcie.gen_current, gpu.pcie.width_max) == (5, 16)
    assert machine.link("GPU3", "GPU5").path == "PCIE"
    assert machine.link("GPU3", "GPU4").path == "XGMI"
    assert all(p.status == "OK" for p in machine.p2p) and len(machine.p2p) == 56


def test_saved_readings_file_is_analyzed_like_live_evidence() -> None:
    from k3diag.evidence import Evidence

    machine = build_machine([Evidence(name=READINGS.name, path=READINGS)])
    assert machine.inputs[0].format == "amdsmi-readings"
    assert machine.link("GPU3", "GPU5").path == "PCIE"


def test_one_failing_call_does_not_stop_the_reading() -> None:
    recorded = json.loads(READINGS.read_text())
    recorded["processors"][2]["errors"]["numa_node"] = "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"
    recorded["pairs"][0]["errors"]["weight"] = "AMDSMI_STATUS_API_FAILED"
    readings = read_amdsmi(FakeAmdSmiBackend(recorded))
    assert readings["processors"][2]["numa_node"] is None
    assert readings["processors"][2]["errors"]["numa_node"].startswith("AMDSMI_STATUS_NOT_SUPPORTED")
    assert readings["pairs"][0]["weight"] is None and readings["pairs"][1]["weight"] == 15


def _block_amdsmi_import(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "amdsmi":
            raise exc
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)


@pytest.mark.parametrize(
    "exc",
    [KeyError("libamd_smi.so"), OSError("libamd_smi.so: cannot open shared object file"),
     ImportError("libamd_smi.so: cannot open shared object file")],
)
def test_missing_rocm_library_is_one_sentence(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    _block_amdsmi_import(monkeypatch, exc)
    evidence = collect_amdsmi()
    assert evidence.data is None
    assert evidence.error == collect.LIBRARY_MISSING
    assert "pip install k3diag[amd]" in evidence.error


def test_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _block_amdsmi_import(monkeypatch, ModuleNotFoundError("No module named 'amdsmi'"))
    evidence = collect_amdsmi()
    assert evidence.error == collect.PACKAGE_MISSING
    machine = build_machine([evidence])
    assert machine.inputs[0].format == "unknown" and machine.inputs[0].warnings == [collect.PACKAGE_MISSING]


class _FakeModule:
    """Just enough of amdsmi for RealAmdSmiBackend: new-style link enum numbering."""

    class amdsmi_wrapper:  # noqa: N801 - mirrors the real attribute name
        AMDSMI_LINK_TYPE_INTERNAL = 0
        AMDSMI_LINK_TYPE_XGMI = 1
        AMDSMI_LINK_TYPE_PCIE = 2

    def amdsmi_topo_get_link_type(self, src, dst):
        return {"hops": 1, "type": 1}

    def amdsmi_get_minmax_bandwith_between_processors(self, src, dst):  # the old misspelt name
        return {"min_bandwidth": 50000, "max_bandwidth": 64000}

    def amdsmi_get_pcie_info(self, handle):
        return {"pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000, "pcie_interface_version": 5},
                "pcie_metric": {"pcie_width": 16, "pcie_speed": 16000}}


def test_real_backend_reads_link_numbering_from_the_module() -> None:
    backend = RealAmdSmiBackend(_FakeModule())
    assert backend.link_type("a", "b") == ("XGMI", 1, 1)
    assert backend.minmax_bandwidth("a", "b") == (50000, 64000)
    summary = collect._pcie_summary(backend.pcie_info("a"))
    assert (summary["gen_current"], summary["gen_max"], summary["width_current"]) == (4, 5, 16)


def test_pcie_generation_from_mts_or_gts() -> None:
    assert [pcie_generation(v) for v in (2500, 8000, 16000, 32000, 16, 64, None, 0, 0xFFFFFFFF)] == [
        1, 3, 4, 5, 4, 6, None, None, None]
    assert collect._generation("PCIe 5.0") == 5 and collect._generation("Gen 4") == 4
