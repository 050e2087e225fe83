"""`nvidia-smi topo -p2p` parsing: codes per ordered pair, capability from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.parse.detect import detect, split_sections
from k3diag.parse import nvidia_topo_p2p as p2p
from k3diag.parse.text import Section, normalize

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def parse_file(name: str) -> list[p2p.TopoP2PResult]:
    """Parse every P2P section of a file the way `k3diag analyze` cuts it."""
    text = normalize((NVIDIA / name).read_bytes().decode())
    results = []
    for section in split_sections(text):
        spec = detect(section.text, section.command)
        if spec is not None and spec.name == "nvidia-smi-topo-p2p":
            results.append(p2p.parse(section, name))
    return results


def test_h100_all_ok_read_from_prompt_command() -> None:
    [result] = parse_file("topo-p2p-r-h100-8x-ok.txt")
    assert result.capability == "read" and result.capability_from == "command"
    assert len(result.cells) == 56
    assert {cell.status for cell in result.cells} == {"OK"}
    assert "DR" not in result.legend and result.legend["CNS"] == "Chipset not supported"
    assert result.warnings == []


def test_l4_cns_without_legend() -> None:
    [result] = parse_file("topo-p2p-r-2xl4-cns-no-legend.txt")
    assert result.capability == "read"
    assert result.status("GPU0", "GPU1") == "CNS"
    assert result.status("GPU1", "GPU0") == "CNS"
    assert result.cells[0].source.line == 3


@pytest.mark.parametrize("name", ["topo-p2p-2x5090-gns-tabs.txt", "topo-p2p-2x5090-gns-spaces.txt"])
def test_geforce_gns_tabs_or_spaces_capability_unknown(name: str) -> None:
    [result] = parse_file(name)
    assert result.columns == ["GPU0", "GPU1"]
    assert result.status("GPU0", "GPU1") == "GNS"
    assert result.status("GPU1", "GPU0") == "GNS"
    assert result.capability == "unknown"
    assert result.legend["DR"] == "Disabled by regkey"
    assert any("capability" in w for w in result.warnings)


def test_pcie_capability_after_a_failed_command_in_the_same_paste() -> None:
    [result] = parse_file("topo-m-and-p2p-5x5090-prompts.txt")
    assert result.capability == "pcie"
    assert len(result.cells) == 20 and {cell.status for cell in result.cells} == {"OK"}
    assert result.cells[0].source.line == 22


def test_indented_ns_matrix_after_topo_m() -> None:
    [result] = parse_file("topo-m-and-p2p-indented-wrapped-legend.txt")
    assert result.status("GPU0", "GPU1") == "NS"
    assert result.cells[0].source.line == 20


@pytest.mark.parametrize(
    ("command", "capability"),
    [
        ("nvidia-smi topo -p2p r", "read"),
        ("nvidia-smi topo -p2p w", "write"),
        ("nvidia-smi topo -p2p n", "nvlink"),
        ("nvidia-smi topo -p2p a", "atomics"),
        ("nvidia-smi topo -p2p p", "pcie"),
        ("nvidia-smi topo --p2pstatus=w", "write"),
        ("nvidia-smi topo -p2p prop", "pcie"),
        ("sudo nvidia-smi topo -p2p read", "read"),
        ("nvidia-smi topo -p2p -p", None),
        ("nvidia-smi topo -m", None),
        (None, None),
    ],
)
def test_capability_from_command(command: str | None, capability: str | None) -> None:
    assert p2p.capability_from_command(command) == capability


def test_capability_from_a_script_banner() -> None:
    text = "nvidia-smi topo -p2p w (P2P Write)\n====\n        GPU0    GPU1\n GPU0   X       OK\n GPU1   OK      X\n"
    result = p2p.parse(Section(text, 1), "x")
    assert result.capability == "write"


def test_single_gpu_output() -> None:
    text = "$ nvidia-smi topo -p2p r\n        GPU0\nGPU0    X\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
    result = p2p.parse(Section(text, 1, "nvidia-smi topo -p2p r"), "x")
    assert result.columns == ["GPU0"] and result.cells == []
    assert p2p.sniff(text) >= 0.5


def test_cut_row_marks_missing_cells_unknown() -> None:
    text = "        GPU0    GPU1    GPU2\n GPU0   X       OK      OK\n GPU1   OK      X\n"
    result = p2p.parse(Section(text, 1, "nvidia-smi topo -p2p r"), "x")
    assert result.status("GPU1", "GPU2") is None
    assert any("1 of 3" in w or "2 of 3" in w for w in result.warnings)
    assert any("no row for GPU2" in w for w in result.warnings)


def test_topology_matrix_is_not_a_p2p_matrix() -> None:
    assert p2p.sniff((NVIDIA / "topo-m-2x5090-tabs-gpu-numa-id.txt").read_text()) < 0.5
    assert p2p.sniff((NVIDIA / "topo-m-h100-nv18-narrow.txt").read_text()) < 0.5


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["GPU0", "GPU1", " ", "\t", "\n", "X", "OK", "CNS", "NS", "Legend:", "=", "??"]), max_size=50))
def test_random_input_never_raises(tokens: list[str]) -> None:
    text = "".join(tokens)
    p2p.sniff(text)
    p2p.parse(Section(text, 1, None), "fuzz")


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_mutated_real_output_never_raises(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(p.name for p in NVIDIA.glob("topo-p2p-*.txt"))))
    text = (NVIDIA / name).read_text()
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    mutated = text[:start] + data.draw(st.text(max_size=15)) + text[end:]
    p2p.parse(Section(mutated, 1, data.draw(st.sampled_from([None, "nvidia-smi topo -p2p x", "nvidia-smi topo -p2p r"]))), name)
