"""`rocm-bandwidth-test`, classic 1.0-2.6 and the TransferBench-based p2p output."""

from __future__ import annotations

from pathlib import Path

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.parse.detect import split_sections
from k3diag.parse import rocm_bandwidth
from k3diag.parse.text import Section

AMD = Path(__file__).resolve().parents[2] / "fixtures" / "amd"


def parse(name: str):
    return rocm_bandwidth.parse(Section((AMD / name).read_text(), 1), name)


def test_mi50_pair_without_p2p() -> None:
    result = parse("rocm-bandwidth-test-2.6.0-2x-mi50-no-p2p.txt")
    (bench,) = result.benchmarks
    assert bench.version == "2.6.0"
    assert [(d.id, d.type, d.bus_id, d.gpu_index, d.uuid) for d in bench.devices] == [
        (0, "cpu", None, None, None),
        (1, "gpu", "0000:19:00.0", 0, "GPU-9318692173497dfc"),
        (2, "gpu", "0000:67:00.0", 1, "GPU-6a96212172f0fcb5"),
    ]
    access = bench.matrices["access"]
    assert access.values == [[1, 0, 0], [1, 1, 0], [1, 0, 1]]
    assert bench.matrices["numa_distance"].values[1] == [20, 0, None]
    uni = bench.matrices["unidirectional"]
    assert uni.value(1, 1) == 696.717 and uni.value(1, 2) is None and uni.value(0, 2) == 13.769
    assert bench.matrices["bidirectional"].value(2, 0) == 25.911
    assert uni.source(2).line == 40
    as_json = bench.to_json()
    assert as_json["tool"] == "rocm-bandwidth-test"
    assert as_json["matrices"]["unidirectional"][0] == [None, 13.75, 13.769]
    assert as_json["devices"][1]["bus_id"] == "0000:19:00.0"
    assert result.warnings == []


def test_2_0_1_prompt_dots_trailing_spaces_and_bdirectional_typo() -> None:
    (bench,) = parse("rocm-bandwidth-test-2.0.1-2x-wx8100-prompt-bdirectional.txt").benchmarks
    assert bench.version == "2.0.1"
    assert [d.bus_id for d in bench.devices] == [None, "0000:0d:00.0", "0000:07:00.0"]
    assert bench.devices[1].name == "Vega 10 [Radeon PRO WX 8100]"
    assert bench.matrices["bidirectional"].value(1, 0) == 25.938865
    assert bench.matrices["unidirectional"].value(2, 2) == 389.988691


def test_1_0_0_titles_without_copy_and_devices_without_bus() -> None:
    (bench,) = parse("rocm-bandwidth-test-1.0.0-2x-rx480-peak-no-copy-word.txt").benchmarks
    assert [d.type for d in bench.devices] == ["cpu", "gpu", "gpu"]
    assert set(bench.matrices) == {"access", "numa_distance", "unidirectional", "bidirectional"}
    assert bench.matrices["unidirectional"].value(0, 1) == 10.175722
    assert bench.matrices["access"].value(1, 2) == 0


def test_docs_snippet_ten_devices_no_device_list() -> None:
    (bench,) = parse("rocm-bandwidth-test-2.6.0-bidir-10dev-docs-snip.txt").benchmarks
    matrix = bench.matrices["bidirectional"]
    assert matrix.col_ids == list(range(10)) and matrix.row_ids == list(range(10))
    assert matrix.value(2, 3) == 101.458 and matrix.value(2, 4) == 80.902 and matrix.value(9, 9) is None
    assert bench.devices == []


def test_transferbench_p2p_matrices() -> None:
    (bench,) = parse("transferbench-p2p-mi300x-presets-doc.txt").benchmarks
    assert bench.variant == "transferbench"
    gpus = bench.gpu_devices()
    assert [d.gpu_index for d in gpus] == list(range(8))
    uni = bench.matrices["unidirectional"]
    gpu0, gpu1 = gpus[0].id, gpus[1].id
    assert uni.value(gpu0, gpu1) == 48.83 and uni.value(gpu0, gpu0) == 1618.87
    assert bench.matrices["bidirectional"].value(gpu0, gpu1) == 92.36
    assert bench.matrices["bidirectional_send"].value(gpu0, gpu1) == 46.15
    assert bench.matrices["bidirectional"].value(gpu0, gpu0) is None


def test_detection_and_one_section() -> None:
    for name in [p.name for p in AMD.glob("rocm-bandwidth-test-*.txt")] + ["transferbench-p2p-mi300x-presets-doc.txt"]:
        text = (AMD / name).read_text()
        assert rocm_bandwidth.sniff(text) >= 0.8, name
        machine = build_machine([Evidence(name=name, path=AMD / name)])
        assert [r.format for r in machine.inputs] == ["rocm-bandwidth-test"], name


def test_two_runs_in_one_file_are_split() -> None:
    text = (AMD / "rocm-bandwidth-test-2.6.0-2x-mi50-no-p2p.txt").read_text()
    text += "\n" + (AMD / "rocm-bandwidth-test-1.0.0-2x-rx480-peak-no-copy-word.txt").read_text()
    sections = split_sections(text)
    assert len(sections) == 2


def test_sniff_is_not_fooled_by_nvidia_benchmarks() -> None:
    p2p = "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 769.09   8.59\n"
    assert rocm_bandwidth.sniff(p2p) == 0.0
