"""What `k3diag analyze` shows for outputs of the newest drivers (R565-R580) and GPUs (GB200, B200, H20,
RTX PRO 6000 Blackwell, RTX 5090), real pastes listed in fixtures/nvidia/SOURCES.md."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.parse import nvidia_topo_matrix as topo
from k3diag.parse.text import Section, normalize

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def _analyze(name: str, *options: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["analyze", str(NVIDIA / name), *options])
    return result.exit_code, result.stdout


def _report(name: str) -> dict:
    _, out = _analyze(name, "--json")
    return json.loads(out)


def _topo(name: str) -> topo.TopoMatrixResult:
    text = normalize((NVIDIA / name).read_bytes().decode("utf-8"))
    return topo.parse(Section(text=text, first_line=1), name)


GB200 = "topo-m-4xgb200-nv18-gpu-numa-id-8nic.txt"


def test_gb200_tray_gpus_sit_on_the_cpu_node_their_numa_affinity_list_starts_with() -> None:
    """On Grace Blackwell `NUMA Affinity` is a list (`0,3-9,11-17`: the CPU's node and the GPUs' memory
    nodes) and `GPU NUMA ID` a number; the GPU's node is the CPU's, not unknown."""
    report = _report(GB200)
    gpus = report["topology"]["gpus"]
    assert [gpu["numa_node"] for gpu in gpus] == [0, 0, 1, 1]
    assert [gpu["cpu_affinity"] for gpu in gpus] == ["0-71", "0-71", "72-143", "72-143"]
    _, text = _analyze(GB200, "--details")
    assert "Machine: 4 GPUs; NUMA 0: GPU0-1; NUMA 1: GPU2-3" in text
    assert "CUDA_VISIBLE_DEVICES=0,1 numactl --cpunodebind=0 --membind=0" in text
    assert "CUDA_VISIBLE_DEVICES=2,3 numactl --cpunodebind=1 --membind=1" in text


def test_gb200_tray_keeps_gpu_numa_ids_affinities_as_printed_and_every_link() -> None:
    result = _topo(GB200)
    rows = [result.rows[f"GPU{i}"] for i in range(4)]
    assert [row.gpu_numa_id for row in rows] == [2, 10, 18, 26]
    assert [row.numa_node for row in rows] == [0, 0, 1, 1]
    assert [row.numa_affinity for row in rows] == ["0,3-9,11-17", "0,3-9,11-17", "1,19-25,27-33", "1,19-25,27-33"]
    assert {result.cell(f"GPU{a}", f"GPU{b}") for a in range(4) for b in range(4) if a != b} == {"NV18"}
    assert result.cell("NIC2", "NIC3") == result.cell("NIC6", "NIC7") == "PIX"
    assert result.nic_legend == {f"NIC{i}": f"mlx5_{i}" for i in range(8)}
    assert result.warnings == []
    report = _report(GB200)
    links = {(link["a"], link["b"]): link["path"] for link in report["topology"]["links"]}
    assert links[("GPU0", "GPU3")] == "NV18" and links[("GPU0", "NIC0")] == "SYS"


def test_a_numa_list_without_a_gpu_numa_id_stays_unknown() -> None:
    """A guest's `0-1` (no GPU memory node beside it) says nothing about where the GPU sits."""
    text = (NVIDIA / GB200).read_text().replace("             2\n", "             N/A\n")
    result = topo.parse(Section(text=normalize(text), first_line=1), "edited")
    assert result.rows["GPU0"].gpu_numa_id is None and result.rows["GPU0"].numa_node is None
    assert result.rows["GPU1"].numa_node == 0  # its GPU NUMA ID 10 is still there


def test_b200_cells_run_together_in_the_paste_are_split_back() -> None:
    """sglang #8120: `SYSSYS` where the tab between the NIC14 and NIC15 cells of an 8x B200 row was lost."""
    name = "topo-m-8xb200-570-16nic-glued-cells-excerpt.txt"
    report = _report(name)
    links = {(link["a"], link["b"]): link["path"] for link in report["topology"]["links"]}
    assert links[("GPU0", "NIC14")] == "SYS" and links[("GPU0", "NIC15")] == "SYS"
    assert links[("GPU0", "NIC4")] == "PIX"
    [record] = report["inputs"]
    assert "line 3: 'SYSSYS' in the GPU0 row read as SYS SYS (the separator between two cells was lost in the paste)" \
        in record["warnings"]
    assert not any("unknown path code" in warning for warning in record["warnings"])
    gpu0 = report["topology"]["gpus"][0]
    assert (gpu0["cpu_affinity"], gpu0["numa_node"]) == ("0-27,112-139", 0)


def test_r580_vgpu_host_cuda_not_found_is_not_a_cuda_version() -> None:
    """`CUDA Version : Not Found` on an RTX PRO 6000 Blackwell server running the R580 vGPU host driver."""
    report = _report("smi-q-d-4x-rtx-pro-6000-580-cuda-not-found-vgpu-excerpt.txt")
    assert report["host"]["driver_version"] == "580.105.06"
    assert report["host"]["cuda_version"] is None
    [gpu] = report["topology"]["gpus"]
    assert (gpu["bus_id"], gpu["performance_state"]) == ("0000:42:00.0", "P8")


def test_a_looped_csv_of_two_h200_is_two_gpus_sampled_seven_times() -> None:
    """`nvidia-smi --query-gpu=timestamp,name,pci.bus_id,... --format=csv -lms 1000` (an HPC centre's `gpumon`):
    each sample repeats both GPUs; they were read as GPU2..GPU13 clashing with GPU0 and GPU1."""
    report = _report("csv-2xh200-looped-lms-timestamp-gpumon.txt")
    gpus = report["topology"]["gpus"]
    assert [(gpu["index"], gpu["name"], gpu["bus_id"]) for gpu in gpus] == [
        (0, "NVIDIA H200", "0000:5d:00.0"), (1, "NVIDIA H200", "0000:9b:00.0")]
    [record] = report["inputs"]
    assert record["warnings"] == [
        "the CSV repeats the same 2 GPUs 7 times (a loop, `-l`/`-lms`); the first sample (from line 3) is read "
        "and 12 later rows left out"]


def test_a_p2p_matrix_whose_header_the_author_cut_with_dots_is_still_read() -> None:
    """8x RTX PRO 6000 Blackwell on R580: `GPU0  GPU1  GPU2  ...` above two rows, all NS for NVLink; it was
    not recognized at all ("none of its code blocks holds an output k3diag reads")."""
    report = _report("topo-p2p-n-8x-rtx-pro-6000-580-ns-elided-header.txt")
    [record] = report["inputs"]
    assert record["format"] == "nvidia-smi-topo-p2p"
    statuses = {(p["src"], p["dst"]): (p["capability"], p["status"]) for p in report["topology"]["p2p"]}
    assert statuses == {(a, b): ("nvlink", "NS") for a, b in (
        ("GPU0", "GPU1"), ("GPU0", "GPU2"), ("GPU1", "GPU0"), ("GPU1", "GPU2"))}
    assert record["warnings"][0] == (
        "line 3: the header was cut short in the paste (`...` after GPU2); the statuses of the GPUs left out are "
        "unknown")


def test_a_gb200_tray_is_not_called_a_virtual_machine() -> None:
    """A list in `NUMA Affinity` on every GPU is a VM's sign only where no `GPU NUMA ID` is printed: on
    Grace the list is the CPU's node and the GPU-memory nodes (it was `topology-virtualized`: "The GPUs
    are seen through a virtual machine")."""
    report = _report(GB200)
    assert "topology-virtualized" not in [finding["id"] for finding in report["findings"]]
    _, text = _analyze(GB200)
    assert "virtual machine" not in text
