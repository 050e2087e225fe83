"""AMD findings over models built from real outputs and the recorded amdsmi readings."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from k3diag.analyze.engine import run_rules
from k3diag.analyze.rules import amd as rules
from k3diag.collect.amdsmi import FakeAmdSmiBackend, collect_amdsmi
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.machine import Machine
from k3diag.model.nccl import NcclRun
from k3diag.model.source import SourceRef
from k3diag.model.topology import Link
from k3diag.parse import rocm_bandwidth
from k3diag.parse.text import Section

ROOT = Path(__file__).resolve().parents[2]
AMD = ROOT / "fixtures" / "amd"
READINGS = ROOT / "fixtures" / "amdsmi" / "mi300x_8gpu_one_link_down.json"


def machine_from(*names: str) -> Machine:
    return build_machine([Evidence(name=name, path=AMD / name) for name in names])


def ids(findings) -> list[str]:
    return [f.id for f in findings]


def by_id(findings, rule_id: str):
    return [f for f in findings if f.id == rule_id]


@pytest.fixture
def link_down_machine() -> Machine:
    return build_machine([collect_amdsmi(FakeAmdSmiBackend.from_file(READINGS))])


def test_one_pcie_pair_in_8_gpu_xgmi_hive_is_a_link_down(link_down_machine: Machine) -> None:
    findings = run_rules(link_down_machine)
    (down,) = by_id(findings, "amd-xgmi-link-down")
    assert down.severity == "fail"
    assert down.subjects == ["GPU3", "GPU5"]
    assert "27 of 28 pairs report XGMI" in down.explanation
    assert down.evidence[0].text == "amdsmi_topo_get_link_type(GPU3 -> GPU5): PCIE, hops 3"
    for command in ("amd-smi xgmi --link-status", "amd-smi metric --xgmi-err", "rocm-smi --showtopo",
                    "xgmi_num_links", "power cycle", "reseat", "RMA"):
        assert command in down.remedy
    assert "both GPU3 and GPU5" in down.remedy
    assert down.confirm_with == "amd-smi xgmi --link-status"
    assert down.data["hive"] == [f"GPU{i}" for i in range(8)]


def test_link_down_explains_the_other_findings(link_down_machine: Machine) -> None:
    findings = run_rules(link_down_machine)
    (hive,) = by_id(findings, "amd-xgmi-hive-incomplete")
    assert hive.causes == ["amd-xgmi-link-down@GPU3,GPU5"]
    assert hive.data["pairs_without_xgmi"] == [["GPU3", "GPU5"]]
    (numa,) = by_id(findings, "amd-cross-numa")
    assert numa.subjects == ["GPU3", "GPU5"] and numa.causes == ["amd-xgmi-link-down@GPU3,GPU5"]
    (fine,) = by_id(findings, "amd-fine-grain-pcie-missing")
    assert fine.severity == "info" and fine.causes == ["amd-xgmi-link-down@GPU3,GPU5"]


def test_healthy_hives_raise_no_link_findings() -> None:
    for names in (["rocm-smi-showtopo-mi308x-8gpu-lowpower-warning.txt"],
                  ["amd-smi-topology-mi300x-8gpu-rocm6.1-changelog.txt"],
                  ["amd-smi-topology-mi355x-8gpu-oci-weight0-bw0.txt"],
                  ["rocm-smi-showtopo-mi300a-4apu-tabs.txt"]):
        findings = run_rules(machine_from(*names))
        assert not {"amd-xgmi-link-down", "amd-xgmi-hive-incomplete", "amd-p2p-not-accessible",
                    "amd-fine-grain-pcie-missing"} & set(ids(findings)), names


def test_hive_spanning_numa_nodes_is_an_info() -> None:
    (info,) = by_id(run_rules(machine_from("rocm-smi-showtopo-mi308x-8gpu-lowpower-warning.txt")), "amd-cross-numa")
    assert info.severity == "info" and info.data["numa_nodes"] == [0, 1]
    assert "numactl --cpunodebind" in info.remedy


def _two_hives(loner: bool = False) -> Machine:
    """Two 4-GPU XGMI hives joined by PCIe across sockets (the 2 x 4 MI100 layout)."""
    machine = Machine()
    for i in range(8):
        gpu = machine.gpu(i)
        gpu.vendor, gpu.numa_node = "AMD", i // 4
    for a in range(8):
        for b in range(a + 1, 8):
            same = a // 4 == b // 4
            if loner and 7 in (a, b):
                same = False
            machine.add_link(Link(f"GPU{a}", f"GPU{b}", "XGMI" if same else "PCIE", hops=1 if same else 3,
                                  weight=15 if same else 72, origin="rocm-smi-showtopo",
                                  source=SourceRef("topo.txt", 10 + a, f"GPU{a} row")))
    return machine


def test_two_equal_hives_are_a_design_not_a_fault() -> None:
    findings = run_rules(_two_hives())
    assert "amd-xgmi-link-down" not in ids(findings)
    assert "amd-xgmi-hive-incomplete" not in ids(findings)
    (numa,) = [f for f in by_id(findings, "amd-cross-numa") if f.kind == "design"]
    assert numa.severity == "info"  # how the box is built: advice for TP groups, not a warning
    assert len(numa.data["pairs"]) == 16


def test_a_gpu_outside_the_hive() -> None:
    findings = run_rules(_two_hives(loner=True))
    incomplete = by_id(findings, "amd-xgmi-hive-incomplete")
    assert any(f.subjects == ["GPU7"] and "outside the XGMI hive" in f.title for f in incomplete)
    assert any("different sizes" in f.title for f in incomplete)
    assert "amd-xgmi-link-down" not in ids(findings)


def test_radeon_pair_without_p2p() -> None:
    findings = run_rules(machine_from("amd-smi-topology-2x-rx7900xtx-access-disabled-legend.txt"))
    (p2p,) = by_id(findings, "amd-p2p-not-accessible")
    assert p2p.severity == "warn" and p2p.subjects == ["GPU0", "GPU1"]
    assert p2p.evidence[0].text.startswith("0000:03:00.0 ENABLED      DISABLED")
    assert "Above 4G Decoding" in p2p.remedy and "iommu=pt" in p2p.remedy


def test_p2p_from_rocm_bandwidth_test_access_matrix() -> None:
    name = "rocm-bandwidth-test-2.6.0-2x-mi50-no-p2p.txt"
    machine = Machine()
    machine.benchmarks.extend(rocm_bandwidth.parse(Section((AMD / name).read_text(), 1), name).benchmarks)
    (p2p,) = by_id(list(rules.check_p2p_not_accessible(machine, [])), "amd-p2p-not-accessible")
    assert p2p.subjects == ["GPU0", "GPU1"]
    assert p2p.evidence[0].line == 16


def _amd_machine(cmdline: str | None = None, mode: str | None = None) -> Machine:
    machine = machine_from("amd-smi-topology-mi300x-8gpu-rocm6.1-changelog.txt")
    machine.host.kernel_cmdline = cmdline
    machine.host.iommu_mode = mode
    return machine


def test_iommu_rule_variants() -> None:
    check = rules.check_iommu_not_passthrough
    assert list(check(_amd_machine("BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt amd_iommu=on"), [])) == []
    assert list(check(_amd_machine(mode="passthrough"), [])) == []
    assert list(check(_amd_machine("ro quiet amd_iommu=off"), [])) == []
    (warn,) = check(_amd_machine("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet splash"), [])
    assert warn.severity == "warn" and "no `iommu=pt`" in warn.explanation
    assert warn.evidence[0].text == "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet splash"
    (unknown,) = check(_amd_machine(), [])
    assert unknown.severity == "info" and unknown.confirm_with == "cat /proc/cmdline"
    assert list(check(Machine(), [])) == []  # no AMD GPU: nothing to say


def test_iommu_from_rccl_warning_line() -> None:
    machine = _amd_machine()
    machine.nccl.append(NcclRun(library="RCCL", input="rccl.log", warnings=[
        'Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!']))
    (warn,) = rules.check_iommu_not_passthrough(machine, [])
    assert warn.severity == "warn" and "iommu=pt" in warn.evidence[0].text and warn.evidence[0].input == "rccl.log"


def test_fine_grain_rule_reads_the_job_environment() -> None:
    base = machine_from("amd-smi-topology-2x-rx7900xtx-access-disabled-legend.txt")
    unset = copy.deepcopy(base)
    unset.nccl.append(NcclRun(library="RCCL", input="job.log", env={"HSA_FORCE_FINE_GRAIN_PCIE": "0"}))
    (warn,) = rules.check_fine_grain_pcie(unset, [])
    assert warn.severity == "warn" and "'0'" in warn.explanation
    good = copy.deepcopy(base)
    good.nccl.append(NcclRun(library="RCCL", env={"HSA_FORCE_FINE_GRAIN_PCIE": "1"}))
    assert list(rules.check_fine_grain_pcie(good, [])) == []
    logged = copy.deepcopy(base)
    logged.nccl.append(NcclRun(library="RCCL", input="rccl.log", warnings=[
        'Missing "HSA_FORCE_FINE_GRAIN_PCIE=1" from environment which can lead to low RCCL performance, '
        "system instablity or hang!"]))
    (warn,) = rules.check_fine_grain_pcie(logged, [])
    assert warn.severity == "warn" and warn.evidence[0].input == "rccl.log"
    (info,) = rules.check_fine_grain_pcie(base, [])
    assert info.severity == "info" and "export HSA_FORCE_FINE_GRAIN_PCIE=1" in info.remedy
    assert list(rules.check_fine_grain_pcie(machine_from("rocm-smi-showtopo-mi300a-4apu-tabs.txt"), [])) == []


def _transferbench_on(machine: Machine, slow: float | None = None):
    name = "transferbench-p2p-mi300x-presets-doc.txt"
    (bench,) = rocm_bandwidth.parse(Section((AMD / name).read_text(), 1), name).benchmarks
    if slow is not None:
        gpu2, gpu6 = bench.gpu_devices()[2].id, bench.gpu_devices()[6].id
        matrix = bench.matrices["unidirectional"]
        matrix.values[matrix.row_ids.index(gpu2)][matrix.col_ids.index(gpu6)] = slow
    machine.benchmarks.append(bench)
    return machine


def test_bandwidth_in_line_with_xgmi_is_quiet() -> None:
    machine = _transferbench_on(machine_from("rocm-smi-showtopo-mi308x-8gpu-lowpower-warning.txt"))
    assert list(rules.check_bandwidth_below_class(machine, [])) == []


def test_bandwidth_far_below_link_class() -> None:
    machine = _transferbench_on(machine_from("rocm-smi-showtopo-mi308x-8gpu-lowpower-warning.txt"), slow=12.5)
    (finding,) = rules.check_bandwidth_below_class(machine, [])
    assert finding.subjects == ["GPU2", "GPU6"] and finding.data["class"] == "XGMI"
    assert finding.data["value_gb_s"] == 12.5 and 48 < finding.data["class_median_gb_s"] < 50
    assert finding.evidence[0].text.lstrip().startswith("GPU 02  ->")


def test_rule_ids_have_doc_pages() -> None:
    for rule in rules.RULES:
        page = ROOT / rule.doc_path()
        assert page.is_file(), page
        text = page.read_text()
        assert f"`{rule.id}`" in text or rule.id in text
