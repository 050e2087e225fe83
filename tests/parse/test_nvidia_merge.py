"""What the NVIDIA parsers put into the Machine, joined by bus id and index."""

from __future__ import annotations

from pathlib import Path

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NVIDIA = FIXTURES / "nvidia"


def machine_of(*names: str, data: dict[str, bytes] | None = None):
    evidence = [Evidence(name=name, path=NVIDIA / name) for name in names]
    for name, blob in (data or {}).items():
        evidence.append(Evidence(name=name, data=blob))
    return build_machine(evidence)


def test_topo_matrix_fills_gpus_nics_and_links() -> None:
    machine = machine_of("topo-m-h800-nv8-nic-rows-truncated.txt")
    assert sorted(machine.gpus) == list(range(8))
    gpu4 = machine.gpus[4]
    assert (gpu4.vendor, gpu4.numa_node, gpu4.cpu_affinity) == ("NVIDIA", 1, "32-63,96-127")
    assert machine.nics["NIC0"].device == "mlx5_0"
    assert machine.nics["NIC0"].numa_node == 0  # PIX to GPU1 on node 0
    assert machine.nics["NIC3"].numa_node == 1
    assert machine.link("GPU0", "GPU5").path == "NV8"
    link = machine.link("GPU1", "NIC0")
    assert (link.a, link.b, link.path, link.origin) == ("GPU1", "NIC0", "PIX", "nvidia-smi-topo-matrix")
    assert link.source.line == 12
    # one link per unordered pair: 8 GPUs -> 28 pairs, plus 4 NICs x 8 GPUs
    assert len(machine.links) == 28 + 32


def test_p2p_statuses_keep_capability_and_origin() -> None:
    machine = machine_of("topo-p2p-r-2xl4-cns-no-legend.txt")
    [status] = machine.p2p_status("GPU0", "GPU1")
    assert (status.capability, status.status, status.origin) == ("read", "CNS", "nvidia-smi-topo-p2p")
    assert status.source.text == " GPU0   X       CNS"


def test_query_sets_pcie_versions_and_identity() -> None:
    machine = machine_of("smi-q-h800-525-new-layout.txt")
    gpu = machine.gpus[0]
    assert gpu.bus_id == "0000:18:00.0"
    assert gpu.name == "NVIDIA H800" and gpu.memory_total_mib == 81559
    assert gpu.pcie.to_json() == {
        "gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "gen_device_max": 5, "gen_host_max": 5,
    }
    assert gpu.pcie.source.line == 64
    assert machine.host.driver_version == "525.105.17" and machine.host.cuda_version == "12.0"


def test_query_joins_by_bus_id_not_position() -> None:
    """A -q of one GPU (no -i) must land on the GPU with that bus id, not on GPU0."""
    csv = (
        b"index, name, pci.bus_id, pcie.link.width.current, pcie.link.width.max\n"
        b"0, Tesla V100-PCIE-32GB, 00000000:17:00.0, 16, 16\n"
        b"1, Tesla V100-PCIE-32GB, 00000000:18:00.0, 16, 16\n"
    )
    machine = build_machine(
        [Evidence(name="a.csv", data=csv), Evidence(name="q.txt", path=NVIDIA / "smi-q-v100-410-old-layout.txt")]
    )
    assert machine.gpus[1].bus_id == "0000:18:00.0"
    assert machine.gpus[1].performance_state == "P0"
    assert machine.gpus[1].memory_total_mib == 32480
    assert machine.gpus[0].memory_total_mib is None
    q_record = [record for record in machine.inputs if record.path == "q.txt"][0]
    assert any("GPU1 in another input but GPU0 here" in w for w in q_record.warnings)


def test_csv_rows_without_index_after_elision_are_placed_by_bus_id_only() -> None:
    machine = machine_of("csv-h100-name-busid-vbios-elided.txt")
    assert sorted(machine.gpus) == [0]
    assert machine.gpus[0].bus_id == "0000:04:00.0"
    record = machine.inputs[0]
    assert any("could not be placed" in w for w in record.warnings)


def test_nvml_readings_fill_everything_with_nvml_origin() -> None:
    blob = (FIXTURES / "nvml" / "pcie-8x-l40s-dual-socket-gpu2-x8.json").read_bytes()
    machine = build_machine([Evidence(name="nvml-readings.json", data=blob, kind="reading", format_hint="nvml-readings")])
    assert machine.inputs[0].format == "nvml-readings"
    assert len(machine.gpus) == 8
    gpu2 = machine.gpus[2]
    assert (gpu2.bus_id, gpu2.numa_node, gpu2.cpu_affinity) == ("0000:3d:00.0", 0, "0-31,64-95")
    assert (gpu2.pcie.width_current, gpu2.pcie.width_max, gpu2.performance_state) == (8, 16, "P0")
    assert machine.link("GPU0", "GPU1").path == "PIX"
    assert machine.link("GPU0", "GPU2").path == "NODE"
    assert machine.link("GPU3", "GPU4").path == "SYS"
    assert machine.link("GPU0", "GPU1").origin == "nvml"
    [read] = machine.p2p_status("GPU0", "GPU5", "read")
    assert (read.status, read.origin) == ("CNS", "nvml")
    assert machine.host.driver_version == "550.90.07" and machine.host.cuda_version == "12.4"


def test_topo_and_nvml_for_one_host_agree_without_warnings() -> None:
    blob = (FIXTURES / "nvml" / "h100-sxm-8x-nvswitch-gpu3-link-down.json").read_bytes()
    machine = build_machine(
        [
            Evidence(name="topo.txt", path=NVIDIA / "topo-m-h100-nv18-narrow.txt"),
            Evidence(name="nvml-readings.json", data=blob, format_hint="nvml-readings"),
        ]
    )
    assert machine.link("GPU0", "GPU1", origin="nvml").path == "NV18"
    assert machine.link("GPU3", "GPU5", origin="nvml").path == "NV17"
    assert machine.link("GPU3", "GPU5", origin="nvidia-smi-topo-matrix").path == "NV18"
    # NUMA agrees; CPU lists differ (the paste is from another H100 box) and are reported, not overwritten.
    assert machine.gpus[5].numa_node == 1
    assert machine.gpus[5].cpu_affinity == "52-103"
    nvml_record = machine.inputs[1]
    assert any("cpu affinity" in w for w in nvml_record.warnings)


def test_nvml_error_becomes_a_note() -> None:
    blob = b'{"schema": "k3diag.nvml-readings/1", "error": "NVML reports no NVIDIA GPU on this host", "devices": []}'
    machine = build_machine([Evidence(name="nvml-readings.json", data=blob, format_hint="nvml-readings")])
    assert machine.gpus == {}
    assert [(note.subject, note.message) for note in machine.notes] == [("nvml", "NVML reports no NVIDIA GPU on this host")]
