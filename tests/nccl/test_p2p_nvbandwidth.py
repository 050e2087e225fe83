"""p2pBandwidthLatencyTest and nvbandwidth (text and JSON), and NCCL topology XML."""

from __future__ import annotations

from nccl_fixtures import fixture_section

from k3diag.parse import nccl_topo_xml, nvbandwidth, p2p_bandwidth
from k3diag.parse.text import Section


def p2p(name: str):
    result = p2p_bandwidth.parse(fixture_section("bench", name), name)
    assert len(result.benchmarks) == 1
    return result, result.benchmarks[0]


def test_p2p_full_two_gpus():
    _, bench = p2p("p2pbw-2x4090-patched-driver.txt")
    assert [(g.index, g.name, g.bus_id) for g in bench.gpus] == [
        (0, "NVIDIA GeForce RTX 4090", "0000:02:00.0"), (1, "NVIDIA GeForce RTX 4090", "0000:17:00.0")]
    assert bench.can_access == [[None, True], [True, None]]
    assert bench.connectivity == [[1, 1], [1, 1]]
    assert bench.matrices["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"] == [[1008.06, 6.34], [6.34, 926.75]]
    assert bench.matrices["Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"][0] == [1015.27, 6.6]
    assert bench.matrices["Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)"][1] == [8.67, 926.39]
    assert bench.sources["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"].line == 16


def test_p2p_reads_matrix_and_values():
    _, bench = p2p("p2pbw-6gpu-p2p-slower-than-disabled.txt")
    assert set(bench.matrices) == {
        "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)",
        "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)",
        "Unidirectional P2P=Enabled Bandwidth (P2P Reads) Matrix (GB/s)",
    }
    assert bench.matrices["Unidirectional P2P=Enabled Bandwidth (P2P Reads) Matrix (GB/s)"][5] == \
        [9.95, 9.95, 10.46, 9.95, 9.95, 921.29]


def test_p2p_latency_gpu_and_cpu_tables_with_editor_line_numbers():
    _, bench = p2p("p2pbw-4gpu-latency-vim-line-numbers.txt")
    assert bench.matrices["P2P=Disabled Latency Matrix (us)"][1] == [11.09, 2.10, 19.16, 18.72]
    assert bench.matrices["P2P=Disabled Latency Matrix (us) CPU"][3] == [6.20, 6.24, 5.79, 2.49]
    assert bench.matrices["P2P=Enabled Latency (P2P Writes) Matrix (us) CPU"][2] == [1.92, 1.76, 2.58, 1.94]


def test_p2p_diagonals_over_1000_and_touching_values():
    _, bench = p2p("p2pbw-8xh100-nvlink-diag-over-1000.txt")
    matrix = bench.matrices["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"]
    assert matrix[0][0] == 2474.76 and matrix[7][7] == 2503.38 and matrix[5][6] == 38.05
    assert bench.connectivity[3] == [1] * 8
    # the same table with the separating spaces lost next to the diagonal (`%6.02f` cells touching)
    text = fixture_section("bench", "p2pbw-8xh100-nvlink-diag-over-1000.txt").text
    text = text.replace("2474.76  37.19", "2474.7637.19").replace("36.27 2498.88", "36.272498.88")
    bench = p2p_bandwidth.parse(Section(text, 1), "touching.txt").benchmarks[0]
    matrix = bench.matrices["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"]
    assert matrix[0][:3] == [2474.76, 37.19, 37.20]
    assert matrix[2][:3] == [36.34, 36.27, 2498.88]


def test_p2p_cannot_access():
    _, bench = p2p("p2pbw-6x50xx-mixed-cannot-access-head.txt")
    assert bench.can_access[2][3] is True and bench.can_access[0][1] is False
    assert bench.can_access[4][0] is None  # not in the excerpt
    assert bench.gpus[1].name == "NVIDIA GeForce RTX 5070 Ti" and bench.gpus[1].bus_id == "0000:e2:00.0"


def test_p2p_partial_tables():
    _, bench = p2p("p2pbw-8x3090-tail-latency.txt")
    assert bench.matrices["Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"][4][:4] == [8.58, 8.61, 8.61, 8.58]
    latency = bench.matrices["P2P=Disabled Latency Matrix (us)"]
    assert latency[1][0] == 20.72 and len(latency) == 7


def nvb(name: str):
    result = nvbandwidth.parse(fixture_section("bench", name), name)
    assert len(result.benchmarks) == 1
    return result, result.benchmarks[0]


def test_nvbandwidth_text_trimmed_without_running_line():
    _, bench = nvb("nvbandwidth-v0.8-a6000-d2d-read-trimmed.txt")
    case = bench.testcases["device_to_device_memcpy_read_ce"]
    assert case.sum == 715.53 and case.status == "Passed"
    assert case.matrix[0] == [None, 26.34, 26.35, 21.95, 22.64, 21.80]
    assert case.matrix[5][5] is None and len(case.matrix) == 6
    assert (bench.version, bench.driver_version, bench.cuda_runtime_version) == ("v0.8", "580.95.05", "13000")


def test_nvbandwidth_text_several_tests():
    _, bench = nvb("nvbandwidth-v0.2-4090-host-device.txt")
    assert bench.testcases["host_to_device_memcpy_ce"].sum == 205.04
    assert bench.testcases["device_to_host_memcpy_ce"].matrix == [[26.77, 26.47, 26.25, 26.63, 27.10, 27.11, 27.11, 26.83]]
    assert bench.testcases["device_to_host_memcpy_ce"].description == "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)"
    assert len(bench.devices) == 8


def test_nvbandwidth_waived_assert_and_quoted():
    _, bench = nvb("nvbandwidth-v0.2-2080ti-waived.txt")
    assert bench.testcases["device_to_device_memcpy_write_ce"].status == "Waived"
    _, bench = nvb("nvbandwidth-v0.7-a100-assert.txt")
    assert bench.testcases["device_to_device_memcpy_read_ce"].status == "Error"
    assert bench.devices[4]["bus_id"] == "0000:9b:00.0"
    assert bench.errors
    _, bench = nvb("nvbandwidth-h100-sm-quoted-paste.txt")
    assert bench.testcases["device_to_host_memcpy_sm"].matrix[0][3] == 52.78


def test_nvbandwidth_json_and_json_among_log_lines():
    for name in ("nvbandwidth-v0.5-json-1gpu-verbose.json", "nvbandwidth-v0.5-json-with-warning-lines.txt"):
        _, bench = nvb(name)
        assert len(bench.testcases) == 32
        case = bench.testcases["host_to_device_memcpy_ce"]
        assert case.matrix == [[12.3964]] and round(case.sum, 4) == 12.3964 and case.status == "Passed"
        assert bench.testcases["device_to_device_memcpy_read_ce"].status == "Waived"
        assert bench.version == "v0.5" and bench.driver_version == "565.02"


def test_sniffers():
    assert p2p_bandwidth.sniff(fixture_section("bench", "p2pbw-2x4090-patched-driver.txt").text) >= 0.9
    assert nvbandwidth.sniff(fixture_section("bench", "nvbandwidth-v0.8-a6000-d2d-read-trimmed.txt").text) >= 0.9
    assert nvbandwidth.sniff(fixture_section("bench", "p2pbw-2x4090-patched-driver.txt").text) == 0.0
    assert p2p_bandwidth.sniff(fixture_section("bench", "nvbandwidth-v0.2-4090-host-device.txt").text) == 0.0


def test_topo_xml():
    result = nccl_topo_xml.parse(fixture_section("nccl", "nccl-topo-azure-ncv4-4xa100-nvlink-pairs.xml"), "t.xml")
    gpus = {g.dev: g for g in result.gpus}
    assert gpus[0].bus_id == "0001:00:00.0" and gpus[0].numa == 0
    assert gpus[2].nvlinks == [("0004:00:00.0", 12)]
    assert result.nics[0].name == "eth0" and result.nics[0].gdr is False and result.nics[0].speed_mbps == 100000
    assert gpus[3].source.line == 28
    result = nccl_topo_xml.parse(fixture_section("nccl", "nccl-topo-azure-ndv4-pci-only.xml"), "n.xml")
    assert len(result.gpus) == 8
    assert {g.bus_id for g in result.gpus if g.numa == 2} == {"000d:00:00.0", "000e:00:00.0"}
    assert all(g.link_gen == 4 and g.link_width == 16 for g in result.gpus)
    broken = nccl_topo_xml.parse(Section('<system version="1"><cpu numaid="0">', 1), "b.xml")
    assert broken.warnings and not broken.gpus


def _damaged(text: str, line: int, old: str, new: str) -> Section:
    lines = text.split("\n")
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return Section(text="\n".join(lines), first_line=1)


def test_p2p_a_damaged_gpu_index_costs_its_line_not_the_input():
    # a row label sizes the matrix (rows 0 to the largest label) and a device index the peer-access table: a
    # 400-digit one asked for a matrix no machine holds, and the parse ran out of memory (MemoryError; without a
    # memory limit the process was killed). Now the line is skipped and said, the rest read.
    text = fixture_section("bench", "p2pbw-2x4090-patched-driver.txt").text
    digits = "7" * 400
    result = p2p_bandwidth.parse(_damaged(text, 19, "     1   6.34", f"     {digits}   6.34"), "p2p.txt")
    bench = result.benchmarks[0]
    assert bench.matrices["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"] == [[1008.06, 6.34]]
    assert bench.matrices["Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)"][1] == [8.67, 926.39]
    assert result.warnings == ["damaged GPU index (none is above 1023) on line 19: row 777777... (400 digits) of "
                               "'Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)': those lines are skipped"]

    result = p2p_bandwidth.parse(_damaged(text, 7, "Device=1 CAN Access Peer Device=0",
                                          f"Device=1 CAN Access Peer Device={digits}"), "p2p.txt")
    assert result.benchmarks[0].can_access == [[None, True], [None, None]]
    assert "on line 7: peer access between devices 1 and 777777... (400 digits)" in result.warnings[0]

    result = p2p_bandwidth.parse(_damaged(text, 5, "pciBusID: 17,", f"pciBusID: {digits},"), "p2p.txt")
    assert [(gpu.index, gpu.bus_id) for gpu in result.benchmarks[0].gpus] == [(0, "0000:02:00.0"), (1, None)]
    assert result.warnings == ["damaged PCI address (a bus above ff or a device above 1f) on line 5: those GPUs are "
                               "listed without one"]


def test_nvbandwidth_a_damaged_gpu_index_costs_its_line_not_the_input():
    text = fixture_section("bench", "nvbandwidth-v0.2-4090-host-device.txt").text
    result = nvbandwidth.parse(_damaged(text, 24, "0     25.50", "7" * 5000 + "     25.50"), "nvb.txt")
    bench = result.benchmarks[0]
    assert bench.testcases["host_to_device_memcpy_ce"].matrix == []
    assert bench.testcases["host_to_device_memcpy_ce"].sum == 205.04
    assert len(bench.devices) == 8
    assert result.warnings == ["damaged GPU index (none is above 1023) on line 24: row 777777... (5000 digits): those "
                               "lines are skipped"]


def test_nvbandwidth_a_row_with_something_not_a_value_is_said_and_refused_at_once():
    # with the blank between cells optional, the row pattern could cut a run of digits into cells in
    # exponentially many ways: this 500-byte paste with a colour code's remains in one row took 170 s, and the
    # row was then dropped in silence. A subprocess bounds it (the fixed parse takes milliseconds).
    import subprocess
    import sys

    text = fixture_section("bench", "nvbandwidth-h100-sm-quoted-paste.txt").text
    damaged = _damaged(text, 9, "52.78     52.77", "52.78    \ufffd]]8;;x 52.77").text
    script = ("import sys; from k3diag.parse import nvbandwidth; from k3diag.parse.text import Section; "
              "r = nvbandwidth.parse(Section(text=sys.stdin.read(), first_line=1), 'nvb.txt'); "
              "print({n: c.matrix for n, c in r.benchmarks[0].testcases.items()}); print(r.warnings)")
    done = subprocess.run([sys.executable, "-c", script], input=damaged, capture_output=True, text=True, timeout=30)
    matrices, warnings = done.stdout.splitlines()
    assert matrices == ("{'host_to_device_memcpy_sm': [[35.19, 35.25, 35.3, 35.03, 35.25, 35.32, 35.39, 35.06]], "
                        "'device_to_host_memcpy_sm': []}")
    import ast

    assert ast.literal_eval(warnings) == [
        "line 9: a row of device_to_host_memcpy_sm holds something that is not a value ('0     52.77     52.77     "
        "52.77     52.78     52.76     52.77     52.78    \ufffd]...'); that row is not read"]
