"""`nvidia-smi -q` parsing across driver generations (R270, R410, R525)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.parse.detect import detect, split_sections
from k3diag.parse import nvidia_query as query
from k3diag.parse.text import Section, normalize

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def parse_file(name: str) -> query.NvidiaQueryResult:
    text = normalize((NVIDIA / name).read_text())
    [section] = [s for s in split_sections(text) if (spec := detect(s.text, s.command)) and spec.name == "nvidia-smi-query"]
    return query.parse(section, name)


def test_r525_h800_with_device_and_host_max() -> None:
    result = parse_file("smi-q-h800-525-new-layout.txt")
    assert result.driver_version == "525.105.17" and result.cuda_version == "12.0"
    assert result.attached_gpus == 8
    [gpu] = result.gpus
    assert gpu.index == 0 and gpu.index_from == "command"  # `> nvidia-smi -q -i 0`
    assert gpu.name == "NVIDIA H800"
    assert gpu.bus_id == "00000000:18:00.0"
    assert gpu.uuid == "GPU-34bf77d1-c686-6821-79a8-32d326c5039c"
    assert gpu.minor_number == 0
    assert (gpu.gen_max, gpu.gen_current, gpu.gen_device_current, gpu.gen_device_max, gpu.gen_host_max) == (5, 5, 5, 5, 5)
    assert (gpu.width_max, gpu.width_current) == (16, 16)
    assert gpu.performance_state == "P0"
    assert gpu.memory_total_mib == 81559  # FB Memory Usage, not BAR1
    assert gpu.idle_throttle_active is True
    assert gpu.sources["width_current"].line == 64
    assert gpu.sources["width_current"].text.strip() == "Current                   : 16x"
    assert result.warnings == []


def test_r410_v100_max_and_current_only() -> None:
    result = parse_file("smi-q-v100-410-old-layout.txt")
    assert result.driver_version == "410.48" and result.cuda_version is None
    [gpu] = result.gpus
    assert gpu.name == "Tesla V100-PCIE-32GB"
    assert (gpu.gen_max, gpu.gen_current, gpu.gen_device_max, gpu.gen_host_max) == (3, 3, None, None)
    assert (gpu.width_max, gpu.width_current) == (16, 16)
    assert gpu.memory_total_mib == 32480
    assert gpu.utilization_gpu_percent == 44
    # 1 of 4 attached GPUs shown, no -i: the index is a guess (Minor Number 0) and the parser says so.
    assert gpu.index == 0 and gpu.index_from == "minor"
    assert any("1 of 4" in w for w in result.warnings)


def test_r270_m2090_power_state_and_short_bus_id() -> None:
    result = parse_file("smi-q-m2090-270-ancient.txt")
    assert result.driver_version == "270.41.19"
    [gpu] = result.gpus
    assert gpu.block_bus_id == "0:2:0" and gpu.bus_id == "0:2:0"
    assert gpu.name == "Tesla M2090"
    assert gpu.performance_state == "P12"  # Power Readings > Power State on R270
    assert gpu.memory_total_mib == 5375  # "5375 Mb"
    assert gpu.width_current is None and gpu.gen_current is None


def test_several_gpu_blocks_take_their_order_as_index() -> None:
    block = (NVIDIA / "smi-q-h800-525-new-layout.txt").read_text().split("GPU 00000000:18:00.0\n", 1)[1]
    text = (
        "==============NVSMI LOG==============\n\nDriver Version : 525.105.17\n\nAttached GPUs : 2\n"
        "GPU 00000000:18:00.0\n" + block + "\nGPU 00000000:2A:00.0\n" + block.replace("00000000:18:00.0", "00000000:2A:00.0")
        .replace("Current                   : 16x", "Current                   : 8x")
    )
    result = query.parse(Section(text, 1), "two.txt")
    assert [gpu.index for gpu in result.gpus] == [0, 1]
    assert [gpu.bus_id for gpu in result.gpus] == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert [gpu.width_current for gpu in result.gpus] == [16, 8]
    assert result.warnings == []


def test_flattened_indentation_still_nests_link_info() -> None:
    text = (
        "GPU 00000000:3B:00.0\nProduct Name : Tesla T4\nGPU Link Info\nPCIe Generation\nMax : 3\nCurrent : 1\n"
        "Link Width\nMax : 16x\nCurrent : 8x\nPerformance State : P8\n"
    )
    [gpu] = query.parse(Section(text, 1), "flat").gpus
    assert (gpu.gen_max, gpu.gen_current, gpu.width_max, gpu.width_current) == (3, 1, 16, 8)
    assert gpu.performance_state == "P8"


def test_sniff() -> None:
    assert query.sniff((NVIDIA / "smi-q-v100-410-old-layout.txt").read_text()) == 1.0
    assert query.sniff((NVIDIA / "topo-m-a100-nv12-narrow.txt").read_text()) == 0.0
    assert query.sniff("GPU 00000000:18:00.0\n    Product Name : x\n    PCI\n        GPU Link Info\n") >= 0.5


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mutated_real_output_never_raises(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(p.name for p in NVIDIA.glob("smi-q-*.txt"))))
    text = (NVIDIA / name).read_text()
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 400)))
    mutated = text[:start] + data.draw(st.text(max_size=30)) + text[end:]
    query.sniff(mutated)
    query.parse(Section(mutated, 1, data.draw(st.sampled_from([None, "nvidia-smi -q -i 3", "nvidia-smi -q -i 0,1"]))), name)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_random_text_never_raises(text: str) -> None:
    query.parse(Section(text, 1), "fuzz")


def test_markdown_hard_breaks_do_not_hide_the_gpu() -> None:
    # A K80 `nvidia-smi -q | head` pasted into markdown with ` \` line breaks (driver 367, 4-digit domain):
    # the GPU block line read `GPU 0000:00:1E.0 \` and the GPU was lost ("no GPU block").
    result = parse_file("smi-q-k80-367-markdown-backslash-breaks.txt")
    assert result.warnings == [] and result.attached_gpus == 1 and result.driver_version == "367.106"
    [gpu] = result.gpus
    assert (gpu.bus_id, gpu.name) == ("0000:00:1E.0", "Tesla K80")
    assert gpu.sources["block"].text == "GPU 0000:00:1E.0 \\" and gpu.sources["block"].line == 7


# R550-R580 `-q` outputs (fixtures/nvidia/SOURCES.md), read by hand: file -> (driver, CUDA, GPUs shown,
# first GPU's name and bus id, its PCIe gen current/max/host max and width current/max, P-state).
NEWEST_DRIVERS = {
    "smi-q-8xh100-565-multi-gpu-fabric.txt": (
        "565.57.01", "12.7", 8, "NVIDIA H100 80GB HBM3", "00000000:18:00.0", (5, 5, 5, 16, 16), "P0"),
    "smi-q-rtx5090-570-hmm-c2c-fabric-na.txt": (
        "570.124.06", "12.8", 1, "NVIDIA GeForce RTX 5090", "00000000:02:00.0", (1, 5, 5, 8, 16), "P8"),
    "smi-q-2x3090-560.txt": (
        "560.35.03", "12.6", 2, "NVIDIA GeForce RTX 3090", "00000000:41:00.0", (1, 4, 4, 16, 16), "P8"),
    # Grace Hopper: the GPU hangs off NVLink-C2C; its PCIe link is a Gen4 x1 with no host max
    "smi-q-gh200-550-c2c-ats-pcie-x1.txt": (
        "550.127.05", "12.4", 1, "NVIDIA GH200 480GB", "00000000:DD:00.0", (4, 4, None, 1, 1), "P0"),
}


def test_newest_driver_outputs_read_as_printed() -> None:
    for name, (driver, cuda, count, gpu_name, bus_id, link, pstate) in NEWEST_DRIVERS.items():
        result = parse_file(name)
        assert (result.driver_version, result.cuda_version, result.attached_gpus) == (driver, cuda, count), name
        assert [gpu.index for gpu in result.gpus] == list(range(count)), name
        gpu = result.gpus[0]
        assert (gpu.name, gpu.bus_id, gpu.performance_state) == (gpu_name, bus_id, pstate), name
        assert (gpu.gen_current, gpu.gen_max, gpu.gen_host_max, gpu.width_current, gpu.width_max) == link, name
        assert result.warnings == [], name


def test_eight_h100_blocks_of_r565_each_carry_their_bus_id_and_fabric_state() -> None:
    result = parse_file("smi-q-8xh100-565-multi-gpu-fabric.txt")
    assert [gpu.bus_id[9:11] for gpu in result.gpus] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    assert {(gpu.fabric.state, gpu.fabric.status, gpu.fabric.clique_id) for gpu in result.gpus} == {
        ("Completed", "Success", 0)}
    assert all(gpu.idle_throttle_active is True for gpu in result.gpus)  # P0 but idle: `Idle : Active`
