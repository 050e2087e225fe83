"""`amd-smi topology` text tables and `--json` (both JSON shapes), from real outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.parse import amd_smi
from k3diag.parse.text import Section

AMD = Path(__file__).resolve().parents[2] / "fixtures" / "amd"
MI300X_BDFS = ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0",
               "0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0"]


def parse(name: str):
    return amd_smi.parse(Section((AMD / name).read_text(), 1), name)


def by_bus(result, src: str, dst: str):
    return next(p for p in result.pairs if (p.src_bus_id, p.dst_bus_id) == (src, dst))


def test_mi300x_tables_labelled_by_bdf() -> None:
    result = parse("amd-smi-topology-mi300x-8gpu-rocm6.1-changelog.txt")
    assert [g.bus_id for g in result.gpus] == MI300X_BDFS
    assert result.tables == ["ACCESS", "WEIGHT", "HOPS", "LINK TYPE", "NUMA BW"]
    assert len(result.pairs) == 56
    link = by_bus(result, "0000:5c:00.0", "0000:af:00.0")
    assert (link.link_type, link.hops, link.weight, link.accessible) == ("XGMI", 1, 15, True)
    assert (link.bandwidth_min, link.bandwidth_max) == (50000, 50000)
    assert link.sources["link_type"].text.startswith("0000:5c:00.0 XGMI")
    assert result.warnings == []


def test_radeon_pair_pcie_access_disabled_and_extra_tables() -> None:
    result = parse("amd-smi-topology-2x-rx7900xtx-access-disabled-legend.txt")
    link = by_bus(result, "0000:03:00.0", "0000:0c:00.0")
    assert (link.link_type, link.hops, link.weight, link.accessible) == ("PCIE", 2, 40, False)
    assert link.bandwidth_max is None and link.coherent is None and link.atomics is None
    assert "CACHE COHERANCY" in result.tables and "BI-DIRECTIONAL" in result.tables
    assert result.warnings == []


def test_mi355x_weight_zero_and_bandwidth_zero_are_unknown() -> None:
    result = parse("amd-smi-topology-mi355x-8gpu-oci-weight0-bw0.txt")
    link = by_bus(result, "0000:0d:00.0", "0000:f4:00.0")
    assert (link.link_type, link.hops, link.weight, link.bandwidth_max) == ("XGMI", 1, None, None)
    assert (link.coherent, link.atomics, link.dma, link.bi_directional) == ("C", "64,32", "T", "T")
    assert any("weight 0" in w for w in result.warnings)
    assert any("0-0" in w for w in result.warnings)


def test_json_legacy_shape_by_gpu_index() -> None:
    result = parse("amd-smi-topology-json-legacy-2gpu-pcie-changelog.txt")
    forward = next(p for p in result.pairs if (p.src_index, p.dst_index) == (0, 1))
    assert (forward.link_type, forward.hops, forward.weight, forward.accessible) == ("PCIE", 2, 40, False)
    assert forward.sources["link_type"].text.strip() == '"gpu_1": "PCIE"'
    assert forward.sources["link_type"].line == 19


def test_json_links_shape_with_bdfs() -> None:
    result = parse("amd-smi-topology-json-links-access-type-2gpu-changelog.txt")
    forward = next(p for p in result.pairs if (p.src_index, p.dst_index) == (0, 1))
    assert (forward.src_bus_id, forward.dst_bus_id) == ("0000:08:00.0", "0000:44:00.0")
    assert forward.link_type == "PCIE" and forward.accessible is False
    assert forward.weight is None and forward.hops is None  # `-a -t` asked for access and type only
    assert forward.sources["link_type"].line == 17


def test_json_documentation_copy_with_trailing_commas() -> None:
    result = parse("amd-smi-topology-json-links-doc-trailing-commas-ellipsis.txt")
    (link,) = result.pairs
    assert (link.src_bus_id, link.dst_bus_id) == ("0000:01:00.0", "0001:01:00.0")
    assert (link.link_type, link.hops, link.weight) == ("XGMI", 1, 15)
    assert (link.bandwidth_min, link.bandwidth_max) == (50000, 100000)
    assert any("trailing commas" in w for w in result.warnings)


def test_json_single_gpu_after_root_prompt() -> None:
    result = parse("amd-smi-topology-json-links-rx6600-1gpu-root-prompt.txt")
    assert [(g.index, g.bus_id) for g in result.gpus] == [(0, "0000:0b:00.0")]
    assert result.pairs == []


def test_json_wrapped_in_an_object_and_old_booleans_and_xmgi() -> None:
    text = (
        '{"gpu_data": [{"gpu": 0, "link_accessibility": {"gpu_0": true, "gpu_1": false},'
        ' "link_type": {"gpu_0": 0, "gpu_1": "XMGI"}}]}'
    )
    result = amd_smi.parse(Section(text, 1), "wrapped.json")
    (link,) = result.pairs
    assert (link.accessible, link.link_type, link.link_type_raw) == (False, "XGMI", "XMGI")
    assert link.sources["link_type"].line == 1


@pytest.mark.parametrize("name", sorted(p.name for p in AMD.glob("amd-smi-*.txt")))
def test_detected_as_amd_smi(name: str) -> None:
    machine = build_machine([Evidence(name=name, path=AMD / name)])
    assert [record.format for record in machine.inputs] == ["amd-smi-topology"]


def test_bdf_labelled_gpus_get_bus_order_indices() -> None:
    name = "amd-smi-topology-mi300x-8gpu-rocm6.1-changelog.txt"
    machine = build_machine([Evidence(name=name, path=AMD / name)])
    assert [gpu.bus_id for gpu in machine.sorted_gpus()] == MI300X_BDFS
    assert len(machine.links) == 28
    assert machine.link("GPU0", "GPU7").path == "XGMI"
    assert len([p for p in machine.p2p if p.status == "OK"]) == 56
    bandwidth = machine.extras["amd_link_bandwidth"]
    assert bandwidth[0]["min_mb_s"] == 50000 and bandwidth[0]["a"] == "GPU0"


def test_amd_smi_joins_gpus_already_known_by_bus_id() -> None:
    from k3diag.model.machine import Machine

    machine = Machine()
    machine.gpu(5).bus_id = "0000:03:00.0"  # e.g. from lspci or amdsmi with another numbering
    name = "amd-smi-topology-2x-rx7900xtx-access-disabled-legend.txt"
    build_machine([Evidence(name=name, path=AMD / name)], machine)
    # 0000:0c:00.0 is second in bus order, so it is GPU1; 0000:03:00.0 joins the known GPU5.
    assert machine.link("GPU1", "GPU5").path == "PCIE"
    assert machine.gpus[1].bus_id == "0000:0c:00.0"
    assert 0 not in machine.gpus


def test_a_json_error_names_the_files_line_not_the_documents() -> None:
    # the JSON starts on line 2 (after the prompt): "at line 5" of the document is line 6 of the file
    lines = (AMD / "amd-smi-topology-json-legacy-2gpu-pcie-changelog.txt").read_text().split("\n")
    assert lines[5].strip().startswith('"')
    lines[5] = '        "gpu": ,'
    result = amd_smi.parse(Section("\n".join(lines), 1), "topo.txt")
    assert "not valid JSON: Expecting value at line 6" in result.warnings
