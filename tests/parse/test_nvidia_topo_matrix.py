"""`nvidia-smi topo -m` parsing on real pastes (fixtures/nvidia/SOURCES.md) and on damaged input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3diag.parse import nvidia_topo_matrix as topo
from k3diag.parse.text import Section, normalize

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def parse_fixture(name: str) -> topo.TopoMatrixResult:
    text = normalize((NVIDIA / name).read_bytes().decode("utf-8"))
    return topo.parse(Section(text=text, first_line=1), name)


def test_h800_nic_rows_only_with_nic_legend_and_cut_affinities() -> None:
    result = parse_fixture("topo-m-h800-nv8-nic-rows-truncated.txt")
    assert result.columns == [f"GPU{i}" for i in range(8)]
    assert result.trailing_labels == ["CPU Affinity", "NUMA Affinity"]
    assert result.cell("GPU0", "GPU7") == "NV8"
    assert result.cell("NIC0", "GPU1") == "PIX"
    assert result.cell("NIC3", "GPU7") == "PIX"
    assert result.cell("NIC2", "GPU0") == "SYS"
    assert result.nic_legend == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert [result.rows[f"GPU{i}"].numa_node for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    # The paste lost the first character of these CPU lists; kept as printed, with a warning.
    assert result.rows["GPU0"].cpu_affinity == "-31,64-95"
    assert any("GPU0 is not a CPU list" in w for w in result.warnings)
    # Legend lines cut at the terminal edge still name their codes.
    assert set(result.legend) == {"X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"}
    assert result.rows["GPU0"].source.line == 4


def test_k80_very_old_legend_with_soc_and_named_mlx4_column() -> None:
    result = parse_fixture("topo-m-k80-soc-legend-mlx4.txt")
    assert result.columns == ["GPU0", "GPU1", "GPU2", "GPU3", "mlx4_0"]
    assert result.trailing_labels == ["CPU Affinity"]
    assert result.cell("GPU0", "GPU1") == "PIX"
    assert result.cell("GPU2", "GPU3") == "PIX"
    assert result.cell("mlx4_0", "GPU3") == "PHB"
    assert result.rows["GPU0"].cpu_affinity == "0-11"
    assert result.rows["GPU0"].numa_node is None  # no NUMA Affinity column on old drivers
    assert result.legend_style == "old"
    assert "SOC" in result.legend
    assert result.warnings == []


def test_dgx1_tabs_nvlink_hybrid_mesh_and_switches_legend() -> None:
    result = parse_fixture("topo-m-dgx1-v100-mlx5-tabs.txt")
    assert result.columns[8:] == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    assert result.cell("GPU0", "GPU1") == "NV1"
    assert result.cell("GPU0", "GPU3") == "NV2"
    assert result.cell("GPU0", "GPU5") == "SYS"
    assert result.cell("GPU4", "mlx5_2") == "PIX"
    assert result.cell("mlx5_3", "mlx5_2") == "PHB"
    assert result.rows["GPU4"].cpu_affinity == "20-39,60-79"
    assert result.legend_style == "switches"
    assert len(result.cells) == 12 * 11
    assert result.warnings == []


@pytest.mark.parametrize(
    ("name", "code", "affinity", "nodes"),
    [
        ("topo-m-a100-nv12-narrow.txt", "NV12", "24-47", [0, 0, 0, 0, 1, 1, 1, 1]),
        ("topo-m-h100-nv18-narrow.txt", "NV18", "52-103", [0, 0, 0, 0, 1, 1, 1, 1]),
    ],
)
def test_nvswitch_boxes_with_two_space_columns(name: str, code: str, affinity: str, nodes: list[int]) -> None:
    result = parse_fixture(name)
    assert len(result.columns) == 8
    assert {cell.value for cell in result.cells} == {code}
    assert result.rows["GPU7"].cpu_affinity == affinity
    assert [result.rows[f"GPU{i}"].numa_node for i in range(8)] == nodes
    assert result.warnings == []


def test_numa_affinity_na_is_unknown() -> None:
    result = parse_fixture("topo-m-2gpu-nv2-numa-na.txt")
    assert result.cell("GPU0", "GPU1") == "NV2"
    assert result.rows["GPU0"].numa_affinity == "N/A"
    assert result.rows["GPU0"].numa_node is None


@pytest.mark.parametrize("name", ["topo-m-8x4090-dual-socket-sys-tabs.txt", "topo-m-8x4090-crlf-ansi-derived.txt"])
def test_dual_socket_4090_gpu_numa_id_after_double_tab(name: str) -> None:
    result = parse_fixture(name)
    assert result.trailing_labels == ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert result.cell("GPU0", "GPU7") == "SYS"
    assert result.cell("GPU6", "NIC0") == "PHB"
    assert result.cell("NIC0", "NIC1") == "PIX"
    assert result.rows["GPU4"].cpu_affinity == "56-111,168-223"
    assert result.rows["GPU4"].numa_node == 1
    assert result.rows["GPU4"].gpu_numa_id is None  # N/A
    assert result.legend == {}
    assert result.warnings == []


def test_five_gpus_one_alone_on_numa_node_1() -> None:
    result = parse_fixture("topo-m-5gpu-sys-node-phb.txt")
    assert result.rows["GPU0"].numa_node == 1
    assert result.rows["GPU0"].cpu_affinity == "8-15,24-31"
    assert [result.rows[f"GPU{i}"].numa_node for i in range(1, 5)] == [0, 0, 0, 0]
    assert result.cell("GPU1", "GPU2") == "PHB"
    assert result.cell("GPU1", "GPU3") == "NODE"
    assert result.cell("GPU0", "GPU4") == "SYS"
    assert result.legend_style == "bridges"


def test_header_glued_to_the_command_line() -> None:
    result = parse_fixture("topo-m-2x5070-header-on-command-line.txt")
    assert result.columns == ["GPU0", "GPU1"]
    assert result.cell("GPU1", "GPU0") == "PHB"
    assert result.rows["GPU1"].cpu_affinity == "0-23"
    assert result.legend == {"PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"}


def test_indented_paste_with_wrapped_legend_stops_before_the_p2p_matrix() -> None:
    result = parse_fixture("topo-m-and-p2p-indented-wrapped-legend.txt")
    assert result.columns == ["GPU0", "GPU1"]
    assert result.cell("GPU0", "GPU1") == "NODE"
    assert result.rows["GPU1"].cpu_affinity == "0-15"
    assert result.legend["SYS"].endswith("between NUMA nodes (e.g., QPI/UPI)")
    assert result.legend["PHB"].endswith("(typically the CPU)")
    assert "OK" not in result.legend  # the P2P legend belongs to the next output


def test_trailing_shell_prompt_is_not_glued_to_the_legend() -> None:
    result = parse_fixture("topo-m-4x4090-phb-trailing-prompt.txt")
    assert result.legend["NV#"] == "Connection traversing a bonded set of # NVLinks"
    assert len(result.cells) == 12
    assert {cell.value for cell in result.cells} == {"PHB"}


def test_cut_paste_reports_missing_rows_and_keeps_what_is_there() -> None:
    result = parse_fixture("topo-m-8gpu-mlx4-old-driver-cut.txt")
    assert result.columns[-1] == "mlx4_0"
    assert sorted(result.rows) == ["GPU0", "GPU1", "GPU2", "GPU3", "GPU4"]
    assert result.cell("GPU4", "GPU5") == "PIX"
    assert result.cell("GPU3", "mlx4_0") == "PHB"
    assert any("no row for GPU5, GPU6, GPU7, mlx4_0" in w for w in result.warnings)


def test_a_row_cut_mid_line_keeps_its_first_cells_and_marks_the_rest_unknown() -> None:
    text = (NVIDIA / "topo-m-a100-nv12-narrow.txt").read_text()
    lines = text.split("\n")
    lines[4] = lines[4][:20]  # "GPU2  NV12  NV12   X"
    result = topo.parse(Section("\n".join(lines), 1), "cut.txt")
    cells = {cell.col: cell.value for cell in result.cells if cell.row == "GPU2"}
    assert cells["GPU0"] == "NV12" and cells["GPU1"] == "NV12"
    assert cells["GPU3"] is None and cells["GPU7"] is None
    assert result.rows["GPU2"].cpu_affinity is None
    assert any("line 5: the GPU2 row has 3 of 8 cells" in w for w in result.warnings)


def test_asymmetric_matrix_is_reported() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-7\nGPU1\tSYS\t X \t0-7\n"
    result = topo.parse(Section(text, 10), "x")
    assert any("GPU0->GPU1 reads PHB but GPU1->GPU0 reads SYS" in w for w in result.warnings)
    assert result.rows["GPU1"].source.line == 12


def test_no_header_is_one_warning() -> None:
    result = topo.parse(Section("hello\nworld\n", 1), "junk.txt")
    assert result.cells == [] and len(result.warnings) == 1


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("topo-m-h800-nv8-nic-rows-truncated.txt", True),
        ("topo-m-2x5090-tabs-gpu-numa-id.txt", True),
        ("topo-m-k80-soc-legend-mlx4.txt", True),
        ("topo-p2p-2x5090-gns-tabs.txt", False),
        ("topo-p2p-r-h100-8x-ok.txt", False),
        ("smi-q-v100-410-old-layout.txt", False),
    ],
)
def test_sniff_tells_topo_from_p2p_by_cell_codes(name: str, expected: bool) -> None:
    score = topo.sniff((NVIDIA / name).read_text())
    assert (score >= 0.5) is expected


def test_start_re_matches_headers_not_rows() -> None:
    assert topo.START_RE.match("\tGPU0\tGPU1\tCPU Affinity")
    assert topo.START_RE.match("        GPU0    GPU1    GPU2")
    assert topo.START_RE.match("nvidia-smi topo -m                   GPU0    GPU1    CPU Affinity")
    assert topo.START_RE.match("GPU0\tCPU Affinity\tNUMA Affinity")
    assert not topo.START_RE.match("GPU0     X      NV12    NV12")
    assert not topo.START_RE.match(" GPU0\tX\tGNS\t")


_TOKENS = st.sampled_from(
    ["GPU0", "GPU1", "GPU2", "NIC0", "mlx5_0", "X", " X ", "NV12", "PIX", "SYS", "NODE", "N/A", "0-23", "1",
     "CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "Legend:", "NIC Legend:", "  NIC0: mlx5_0", "=", "\t", "  ",
     "\x1b[4m", "\r", "\n", "OK", "GNS"]
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOKENS, max_size=60))
def test_random_token_soup_never_raises(tokens: list[str]) -> None:
    text = "".join(tokens)
    topo.sniff(text)
    result = topo.parse(Section(normalize(text), 1), "fuzz")
    assert isinstance(result.warnings, list)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mutated_real_output_never_raises(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(p.name for p in NVIDIA.glob("topo-m-*.txt"))))
    text = (NVIDIA / name).read_bytes().decode()
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    junk = data.draw(st.text(max_size=20))
    mutated = text[:start] + junk + text[end:]
    topo.sniff(mutated)
    topo.parse(Section(normalize(mutated), 1), name)


# file -> (GPU count, one pair and its path, NUMA node of each GPU row or None when the output has no NUMA column)
EVERY_FIXTURE = {
    "topo-m-h800-nv8-nic-rows-truncated.txt": (8, ("NIC1", "GPU3", "PIX"), [0, 0, 0, 0, 1, 1, 1, 1]),
    "topo-m-k80-soc-legend-mlx4.txt": (4, ("GPU1", "GPU2", "PHB"), [None] * 4),
    "topo-m-dgx1-v100-mlx5-tabs.txt": (8, ("GPU3", "GPU7", "NV1"), [None] * 8),
    "topo-m-a100-nv12-narrow.txt": (8, ("GPU3", "GPU4", "NV12"), [0, 0, 0, 0, 1, 1, 1, 1]),
    # inside a Slurm job's CPU set: GPU4-7 have an empty CPU Affinity, their NUMA node 1 comes first
    "topo-m-8x-a100-slurm-cpuset-excerpt.txt": (8, ("GPU6", "GPU7", "NV12"), [0, 0, 0, 0, 1, 1, 1, 1]),
    "topo-m-h100-nv18-narrow.txt": (8, ("GPU0", "GPU7", "NV18"), [0, 0, 0, 0, 1, 1, 1, 1]),
    "topo-m-2gpu-nv2-numa-na.txt": (2, ("GPU0", "GPU1", "NV2"), [None, None]),
    "topo-m-8x4090-dual-socket-sys-tabs.txt": (8, ("GPU7", "NIC1", "SYS"), [0, 0, 0, 0, 1, 1, 1, 1]),
    "topo-m-8x4090-crlf-ansi-derived.txt": (8, ("NIC0", "NIC1", "PIX"), [0, 0, 0, 0, 1, 1, 1, 1]),
    "topo-m-5gpu-sys-node-phb.txt": (5, ("GPU3", "GPU4", "PHB"), [1, 0, 0, 0, 0]),
    "topo-m-2x5090-tabs-gpu-numa-id.txt": (2, ("GPU0", "GPU1", "PHB"), [0, 0]),
    "topo-m-and-p2p-5x5090-prompts.txt": (5, ("GPU3", "GPU4", "PHB"), [0] * 5),
    "topo-m-4x4090-phb-trailing-prompt.txt": (4, ("GPU0", "GPU3", "PHB"), [0] * 4),
    "topo-m-2x5070-header-on-command-line.txt": (2, ("GPU0", "GPU1", "PHB"), [0, 0]),
    "topo-m-and-p2p-indented-wrapped-legend.txt": (2, ("GPU0", "GPU1", "NODE"), [0, 0]),
    "topo-m-8gpu-mlx4-old-driver-cut.txt": (5, ("GPU0", "GPU1", "PIX"), [None] * 5),
    "topo-m-3x-a6000-nv4-pair-node-prompt.txt": (3, ("GPU0", "GPU1", "NV4"), [1, 1, 1]),
    # GB200 tray: NUMA Affinity `0,3-9,11-17` beside GPU NUMA ID 2; the CPU's node is the first listed
    "topo-m-4xgb200-nv18-gpu-numa-id-8nic.txt": (4, ("GPU1", "GPU2", "NV18"), [0, 0, 1, 1]),
    "topo-m-8xh20-nv18-ibp-rocep-nic-legend.txt": (8, ("GPU6", "NIC3", "PIX"), [0, 0, 0, 0, 1, 1, 1, 1]),
    # `SYSSYS`: two cells glued (NIC14, NIC15)
    "topo-m-8xb200-570-16nic-glued-cells-excerpt.txt": (1, ("GPU0", "NIC15", "SYS"), [0]),
    "topo-m-8xb200-13nic-glued-header-excerpt.txt": (4, ("GPU0", "NIC12", "NODE"), [0, 0, 0, 0]),
    "topo-m-8xb200-nic11-glued-to-cpu-affinity-excerpt.txt": (4, ("GPU3", "NIC11", "SYS"), [0, 0, 1, 1]),
    "topo-m-8xb300-cx8-mlx5-bond-pxb-root-prompt.txt": (8, ("GPU5", "NIC5", "PXB"), [0, 0, 0, 0, 1, 1, 1, 1]),
    "topo-m-gb10-spark-580-roce-nics-trailing-tabs.txt": (1, ("NIC2", "NIC3", "PIX"), [0]),
}


def test_topo_mp_is_told_apart_from_topo_m() -> None:
    """`topo -mp` prints PCIe paths only (NVLink hidden): every NVLink pair of a JUWELS Booster node reads SYS."""
    mp = parse_fixture("topo-mp-4x-a100-juwels-booster-percent-prompt.txt")
    assert mp.pcie_only is True and mp.cell("GPU0", "GPU1") == "SYS"
    assert parse_fixture("topo-m-3x-a6000-nv4-pair-node-prompt.txt").pcie_only is False  # NV# in legend and cells
    assert parse_fixture("topo-m-8x4090-dual-socket-sys-tabs.txt").pcie_only is None  # no legend: cannot tell


def test_the_table_names_every_topo_fixture() -> None:
    assert set(EVERY_FIXTURE) == {path.name for path in NVIDIA.glob("topo-m-*.txt")}


@pytest.mark.parametrize("name", sorted(EVERY_FIXTURE))
def test_every_fixture(name: str) -> None:
    gpus, (a, b, path), nodes = EVERY_FIXTURE[name]
    result = parse_fixture(name)
    gpu_rows = [row for row in result.rows.values() if row.gpu_index is not None]
    assert len(gpu_rows) == gpus
    assert result.cell(a, b) == path or result.cell(b, a) == path
    assert [row.numa_node for row in sorted(gpu_rows, key=lambda row: row.gpu_index)] == nodes
    assert all(cell.source.line >= 1 and cell.source.input == name for cell in result.cells)


def test_a_topo_matrix_does_not_wake_the_rocm_smi_parser(fixtures_dir) -> None:
    from k3diag.parse.registry import spec_named

    text = (fixtures_dir / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt").read_text()
    assert "NUMA Affinity" in text
    assert not spec_named("rocm-smi-showtopo").may_match(text)
    rocm = "============================ Numa Nodes ============================\nGPU[0]\t\t: (Topology) Numa Node: 0"
    assert spec_named("rocm-smi-showtopo").may_match(rocm)


def test_an_empty_cpu_affinity_under_a_cpu_set_leaves_the_numa_node_where_it_belongs() -> None:
    # `srun -c32 nvidia-smi topo -m`: the job has no CPU on NUMA node 1, so GPU4-7 print no CPU list and the
    # node is the first value after the cells; read left to right it was their CPU list and the node was lost
    result = parse_fixture("topo-m-8x-a100-slurm-cpuset-excerpt.txt")
    rows = [result.rows[f"GPU{index}"] for index in range(8)]
    assert [row.cpu_affinity for row in rows] == ["0-15,56-71"] * 4 + [None] * 4
    assert [row.numa_affinity for row in rows] == ["0"] * 4 + ["1"] * 4
    assert ("GPU4, GPU5, GPU6, GPU7 show no CPU affinity: nvidia-smi ran under a CPU set (a Slurm job, a container) "
            "with no CPU on their NUMA node") in " ".join(result.warnings)


def test_rows_that_all_lack_their_cpu_list_are_placed_by_the_header() -> None:
    # the same output with only the rows of the GPUs outside the job's CPU set (an excerpt as people paste
    # one): no row has all its values to compare with, so the header's `CPU Affinity` column is
    lines = (NVIDIA / "topo-m-8x-a100-slurm-cpuset-excerpt.txt").read_text().split("\n")
    text = "\n".join([lines[1]] + [line for line in lines if line.startswith(("GPU4", "GPU5", "GPU6", "GPU7"))])
    result = topo.parse(Section(text=normalize(text), first_line=1), "gpu4-7.txt")
    rows = [result.rows[f"GPU{index}"] for index in range(4, 8)]
    assert [(row.cpu_affinity, row.numa_node) for row in rows] == [(None, 1)] * 4
    assert "GPU4, GPU5, GPU6, GPU7 show no CPU affinity" in " ".join(result.warnings)
    # squeezed to single spaces the positions say nothing: read left to right, as before
    squeezed = "\n".join(" ".join(line.split()) for line in text.split("\n"))
    result = topo.parse(Section(text=normalize(squeezed), first_line=1), "squeezed.txt")
    assert result.rows["GPU4"].cpu_affinity == "1"
    assert not any("no CPU affinity" in warning for warning in result.warnings)


def test_a_row_cut_at_its_end_still_reads_left_to_right() -> None:
    # no shift past the usual column: the missing values are the last ones (a line cut in the paste)
    text = ("        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
            "GPU0     X      NV4     0-31    0               N/A\n"
            "GPU1    NV4      X      32-63   1\n")
    result = topo.parse(Section(text=normalize(text), first_line=1), "cut.txt")
    assert (result.rows["GPU1"].cpu_affinity, result.rows["GPU1"].numa_node) == ("32-63", 1)
    assert not any("no CPU affinity" in warning for warning in result.warnings)
