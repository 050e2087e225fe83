"""Inputs from different machines are reported as different machines, with the reason; inputs of one machine join.

Every pair below is real outputs (fixtures/*/SOURCES.md) from two machines, or from one.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.inputs import load_machines

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "k3diag" / "data" / "schema" / "report.schema.json").read_text())
EXAMPLE = Path(str(resources.files("k3diag") / "data" / "examples" / "dual-socket-8gpu-pcie"))
runner = CliRunner()


def _machines(*names: str):
    machines, _ = load_machines([FIXTURES / name for name in names])
    return machines


def _reasons(machines) -> list[str]:
    return [record.machine_reason or "" for record in machines.inputs]


def test_gpu_models_tell_two_machines_apart() -> None:
    machines = _machines("nvidia/smi-q-h800-525-new-layout.txt", "bench/p2pbw-8x2080ti-cannot-access-head.txt")
    assert len(machines.machines) == 2
    assert [len(m.gpus) for m in machines.machines] == [1, 0]
    reason = _reasons(machines)[1]
    assert reason.startswith("not with ") and "smi-q-h800-525-new-layout.txt (nvidia-smi -q -i 0): different GPU models" in reason
    assert "NVIDIA H800" in reason and "NVIDIA GeForce RTX 2080 Ti" in reason


def test_a_one_gpu_machine_and_an_eight_gpu_one_are_two_machines() -> None:
    # `nvidia-smi -q` of a host with one K80 attached (`Attached GPUs : 1`), and the topo -m of eight 4090s
    machines = _machines("nvidia/topo-m-8x4090-dual-socket-sys-tabs.txt", "nvidia/smi-q-k80-367-markdown-backslash-breaks.txt")
    assert [len(m.gpus) for m in machines.machines] == [8, 1]
    assert "different GPU counts (8 vs 1)" in _reasons(machines)[1]


def test_one_gpu_s_query_of_an_eight_gpu_machine_is_that_machine() -> None:
    # `nvidia-smi -q -i 0` shows one GPU's block under `Attached GPUs : 8`: the machine has 8 GPUs, so the topo -m
    # of 8 GPUs is not contradicted (it was said to be another machine, "different GPU counts (8 vs 1)")
    machines = _machines("nvidia/topo-m-8x4090-dual-socket-sys-tabs.txt", "nvidia/smi-q-h800-525-new-layout.txt")
    assert not machines.several, _reasons(machines)
    machine = machines.machines[0]
    assert len(machine.gpus) == 8
    count = machine.identity.gpu_count
    assert count is not None and count.value == "8"
    query = next(record for record in machine.inputs if record.path.endswith("smi-q-h800-525-new-layout.txt"))
    assert query.identity.gpu_count is not None and " ".join(query.identity.gpu_count.source.text.split()) == "Attached GPUs : 8"


def test_a_bus_id_missing_from_the_inventory_is_another_machine() -> None:
    # one H100 at 04:00.0 in a --query-gpu CSV; an nccl-tests run whose H100s sit at other bus ids
    machines = _machines("nvidia/csv-h100-name-busid-vbios-elided.txt", "bench/nccl-tests-h100-2nodes-header-domain-bdf.txt")
    assert len(machines.machines) == 2
    reason = _reasons(machines)[1]
    assert "is not among the 1 GPU of the other (0000:04:00.0)" in reason


def test_host_names_tell_two_machines_apart() -> None:
    machines = _machines("nccl/nccl-2.20.5-l20-8gpu-p2p-disabled-shm.log", "bench/nccl-tests-8x4090-tree-head.txt")
    assert len(machines.machines) == 2
    reason = next(r for r in _reasons(machines) if r.startswith("not with"))
    assert "different host names (sh9-machine-20250813085604-64df4c99dc-m27xf vs gpu59)" in reason


def test_a_log_and_a_benchmark_of_one_host_join() -> None:
    machines = _machines("nccl/nccl-2.20.5-l20-8gpu-p2p-disabled-shm.log", "bench/nccl-tests-l20-footer-then-second-header.txt")
    assert not machines.several
    machine = machines.machines[0]
    assert machine.nccl and machine.benchmarks
    assert machines.machines[0].identity.values("hostnames") == {"sh9-machine-20250813085604-64df4c99dc-m27xf"}


def test_the_old_example_bundle_is_three_machines_and_an_lspci_of_none() -> None:
    machines = _machines("bundles/bad-8x-pcie-dual-socket")
    assert len(machines.machines) == 4
    by_input = {record.path.rsplit("/", 1)[-1]: record for record in machines.inputs}
    assert by_input["nvml-readings.json"].machine == 1
    assert by_input["nccl-debug.log"].machine == 2 and by_input["all_reduce_perf-g8.txt"].machine == 2
    assert by_input["p2pBandwidthLatencyTest.txt"].machine == 3
    assert "different GPU models" in by_input["nccl-debug.log"].machine_reason
    assert "nothing ties it to one of the 3 machines" in by_input["lspci-vvv.txt"].machine_reason
    l40s = machines.machines[0]
    # the L40S machine is no longer judged with the 2080 Ti's refused P2P or the L20's SHM log
    assert not l40s.nccl and not l40s.benchmarks
    assert {gpu.name for gpu in l40s.gpus.values()} == {"NVIDIA L40S"}


@pytest.mark.parametrize("bundle", sorted(p.name for p in (FIXTURES / "bundles").iterdir() if (p / "manifest.json").exists()))
def test_identity_check_on_every_bundle_fixture(bundle: str) -> None:
    machines = _machines(f"bundles/{bundle}")
    # every input is in exactly one machine, or in none with a reason
    placed = [record for machine in machines.machines for record in machine.inputs if record.format not in ("bundle",)]
    assert len(placed) + len([r for r in machines.unplaced if r.format != "bundle"]) == len(
        [r for r in machines.inputs if r.format != "bundle"])
    if machines.several:
        assert all(record.machine_reason for record in machines.inputs)
    # no machine holds two GPU models that contradict each other
    for machine in machines.machines:
        names = {gpu.name for gpu in machine.gpus.values() if gpu.name}
        assert len(names) <= 1, names


def test_the_shipped_example_is_one_machine() -> None:
    machines, _ = load_machines([EXAMPLE])
    assert not machines.several
    assert machines.machines[0].identity.gpu_count is not None
    assert machines.machines[0].identity.gpu_count.value == "8"


def test_analyze_json_reports_each_machine_and_no_joint_verdict() -> None:
    result = runner.invoke(app, ["analyze", str(FIXTURES / "bundles" / "bad-8x-pcie-dual-socket"), "--json"])
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"]["level"] == "unknown" and "4 different machines" in report["verdict"]["text"]
    assert [f["id"] for f in report["findings"]] == ["inputs-several-machines"]
    assert report["topology"]["gpus"] == []
    assert len(report["machines"]) == 4
    first = report["machines"][0]
    assert first["identity"]["gpu_names"] == ["NVIDIA L40S"] and first["identity"]["gpu_count"] == 8
    assert len(first["topology"]["gpus"]) == 8 and first["nccl"] is None
    assert all("machine_reason" in entry for entry in first["inputs"])
    assert result.exit_code == max(m["exit_code"] for m in report["machines"] if m["exit_code"] != 3)


def test_analyze_terminal_says_so_at_the_top_and_has_one_section_per_machine() -> None:
    result = runner.invoke(app, ["analyze", str(FIXTURES / "nvidia" / "smi-q-k80-367-markdown-backslash-breaks.txt"),
                                 str(FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt")])
    lines = result.output.split("\n")
    assert lines[1] == "[WARN] The inputs describe 2 different machines; each is judged on its own"
    assert "Machine 1 of 2: 1 GPU, Tesla K80, driver 367.106" in result.output
    assert "Machine 2 of 2: 8 GPUs" in result.output
    assert result.output.count("Verdict [") == 2


def test_benchmark_device_lines_name_the_gpus_of_the_same_machine() -> None:
    # The example's NVML readings with the model names taken out, and a real p2pBandwidthLatencyTest whose
    # Device lines name GPUs at the same bus ids: the join fills each GPU's name from the line that printed it.
    from k3diag.evidence import Evidence
    from k3diag.join.machines import build_machines

    readings = json.loads((EXAMPLE / "evidence" / "nvml-readings.json").read_text())
    for device in readings["devices"]:
        device.pop("name")
    p2p = FIXTURES / "bench" / "p2pbw-8x2080ti-cannot-access-head.txt"
    machines = build_machines([
        Evidence(name="nvml-readings.json", data=json.dumps(readings).encode(), kind="reading", format_hint="nvml-readings"),
        Evidence(name="p2p.txt", path=p2p),
    ])
    assert not machines.several
    gpu = machines.machines[0].gpus[4]
    assert gpu.bus_id == "0000:84:00.0" and gpu.name == "NVIDIA GeForce RTX 2080 Ti"
    assert any(ref.input == "p2p.txt" and "pciBusID: 84" in ref.text for ref in gpu.sources)
