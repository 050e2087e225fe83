"""`rocm-smi --showtopo` and its parts, from real outputs (fixtures/amd/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.parse.detect import detect
from k3diag.parse import rocm_smi
from k3diag.parse.text import Section

AMD = Path(__file__).resolve().parents[2] / "fixtures" / "amd"


def parse(name: str):
    text = (AMD / name).read_text()
    return rocm_smi.parse(Section(text, 1), name)


def pair(result, src: int, dst: int):
    return next(p for p in result.pairs if (p.src_index, p.dst_index) == (src, dst))


def test_mi308x_eight_gpus_all_xgmi_two_numa_nodes() -> None:
    result = parse("rocm-smi-showtopo-mi308x-8gpu-lowpower-warning.txt")
    assert sorted(g.index for g in result.gpus) == list(range(8))
    assert len(result.pairs) == 56
    assert {p.link_type for p in result.pairs} == {"XGMI"}
    assert {p.hops for p in result.pairs} == {1}
    assert {p.weight for p in result.pairs} == {15}
    assert {g.index: g.numa_node for g in result.gpus} == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert result.warnings == []
    # The low-power WARNING line is kept as a tool message, not parsed as a row.
    assert result.tool_messages[0].text.startswith("WARNING: AMD GPU device(s) is/are in a low-power state")
    ref = pair(result, 2, 7).sources["link_type"]
    assert ref.line == 30 and ref.text.startswith("GPU2   XGMI")


def test_mi300a_tabs_and_trailing_spaces() -> None:
    result = parse("rocm-smi-showtopo-mi300a-4apu-tabs.txt")
    assert {g.index: g.numa_node for g in result.gpus} == {0: 0, 1: 1, 2: 2, 3: 3}
    assert {g.index: g.numa_affinity for g in result.gpus} == {0: 0, 1: 1, 2: 2, 3: 3}
    assert pair(result, 0, 3).link_type == "XGMI"
    assert pair(result, 3, 0).weight == 15
    assert pair(result, 1, 2).hops == 1
    assert result.tables == [
        "Weight between two GPUs", "Hops between two GPUs", "Link Type between two GPUs", "Numa Nodes"]


def test_pcie_box_across_sockets_truncated_numa_line() -> None:
    result = parse("rocm-smi-showtopo-4gpu-pcie-hops3-truncated.txt")
    assert {p.link_type for p in result.pairs} == {"PCIE"}
    assert pair(result, 0, 1).hops == 3 and pair(result, 0, 1).weight == 52
    assert all(g.numa_node is None for g in result.gpus)
    assert any("cut short" in w and "line 24" in w for w in result.warnings)


def test_numa_only_outputs_both_spacing_styles() -> None:
    tabs = parse("rocm-smi-showtoponuma-8gpu-prompt-tabs.txt")
    assert [g.numa_node for g in sorted(tabs.gpus, key=lambda g: g.index)] == [0, 0, 0, 0, 1, 1, 1, 1]
    spaces = parse("rocm-smi-showtoponuma-mi210-8gpu-nps4.txt")
    assert [g.numa_node for g in sorted(spaces.gpus, key=lambda g: g.index)] == [3, 2, 1, 0, 7, 6, 5, 4]
    assert spaces.pairs == []


def test_collapsed_spaces_without_banner() -> None:
    result = parse("rocm-smi-linktype-mi100-2gpu-collapsed-spaces.txt")
    assert pair(result, 0, 1).link_type == "PCIE"
    assert pair(result, 1, 0).link_type == "PCIE"
    # The `*****` line under the paste ends the section quietly.
    assert result.warnings == []


def test_single_gpu_vm() -> None:
    result = parse("rocm-smi-linktype-mi300x-kvm-1gpu-sglang-env.txt")
    assert [g.index for g in result.gpus] == [0]
    assert result.pairs == []
    assert any("only one GPU" in w for w in result.warnings)


@pytest.mark.parametrize("name", sorted(p.name for p in AMD.glob("rocm-smi-*.txt")))
def test_detected_as_rocm_smi_and_one_section(name: str) -> None:
    machine = build_machine([Evidence(name=name, path=AMD / name)])
    assert [record.format for record in machine.inputs] == ["rocm-smi-showtopo"]
    assert all(gpu.vendor == "AMD" for gpu in machine.gpus.values())


def test_machine_links_from_rocm_smi() -> None:
    name = "rocm-smi-showtopo-mi300a-4apu-tabs.txt"
    machine = build_machine([Evidence(name=name, path=AMD / name)])
    link = machine.link("GPU1", "GPU3", origin="rocm-smi-showtopo")
    assert (link.path, link.hops, link.weight) == ("XGMI", 1, 15)
    assert len(machine.links) == 6
    assert machine.gpus[2].numa_node == 2


def test_sniff_rejects_nvidia_and_other_rocm_smi() -> None:
    nvidia = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\t0-31\t0\nGPU1\tNV12\t X \t0-31\t0\n"
    assert rocm_smi.sniff(nvidia) == 0.0
    concise = (AMD / "rocm-smi-showtopo-mi308x-8gpu-lowpower-warning.txt").read_text().split("=== Weight")[0]
    assert rocm_smi.sniff(concise) < 0.5
    assert detect(nvidia) is None or detect(nvidia).name != "rocm-smi-showtopo"
