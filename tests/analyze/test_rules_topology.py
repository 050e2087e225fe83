"""Topology rules on real outputs and recorded NVML readings."""

from __future__ import annotations

from pathlib import Path

from k3diag.analyze.engine import run_rules
from k3diag.analyze.finding import Finding
from k3diag.analyze.rules import topology
from k3diag.collect.nvml import collect_nvml
from k3diag.collect.nvml_fake import FakeNvmlBackend
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.machine import Machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NVIDIA = FIXTURES / "nvidia"
REPO = FIXTURES.parent


def machine_of(*names: str) -> Machine:
    return build_machine([Evidence(name=name, path=NVIDIA / name) for name in names])


def run(check, machine: Machine) -> list[Finding]:
    return list(check(machine, []))


def test_every_rule_has_a_doc_page() -> None:
    for rule in topology.RULES:
        page = REPO / rule.doc_path()
        assert page.is_file(), page
        text = page.read_text()
        for heading in ("**What it means.**", "**Why it matters.**", "**Confirm by hand.**", "**Fix.**"):
            assert heading in text, (rule.id, heading)


def test_sys_pairs_are_one_design_finding_for_the_dual_socket_4090_box() -> None:
    machine = machine_of("topo-m-8x4090-dual-socket-sys-tabs.txt")
    [finding] = run(topology.check_gpu_pair_sys, machine)  # one per machine, not 28 per pair
    assert (finding.id, finding.severity, finding.subjects) == ("gpu-pair-sys", "info", [])
    assert finding.title.startswith("28 GPU pairs cross the CPU interconnect (SYS)")
    assert len(finding.data["pairs"]) == 28  # every pair of this box is SYS, even within a socket
    assert "gpu-pair-sys@GPU0,GPU1" in finding.aliases and len(finding.aliases) == 28
    assert finding.evidence[0].line == 2 and "SYS" in finding.evidence[0].text
    assert "NUMA node 0: GPU 0, 1, 2, 3; NUMA node 1: GPU 4, 5, 6, 7" in finding.explanation
    assert finding.confirm_with == "nvidia-smi topo -p -i 0,1"


def test_nvlink_pairs_are_never_sys() -> None:
    machine = machine_of("topo-m-dgx1-v100-mlx5-tabs.txt")
    [finding] = run(topology.check_gpu_pair_sys, machine)
    pairs = {tuple(pair) for pair in finding.data["pairs"]}
    assert ("GPU0", "GPU4") not in pairs  # NV2
    assert ("GPU0", "GPU5") in pairs  # SYS in the hybrid cube mesh
    assert len(pairs) == 12


def test_old_driver_soc_counts_as_cross_socket() -> None:
    text = "        GPU0    GPU1    CPU Affinity\nGPU0     X      SOC     0-11\nGPU1    SOC      X      12-23\n"
    machine = build_machine([Evidence(name="old.txt", data=text.encode())])
    [finding] = run(topology.check_gpu_pair_sys, machine)
    assert finding.data["paths"] == ["SOC"]


def test_phb_and_node_pairs_are_one_design_finding() -> None:
    machine = machine_of("topo-m-5gpu-sys-node-phb.txt")
    [finding] = run(topology.check_gpu_pair_phb, machine)
    pairs = {tuple(pair) for pair in finding.data["pairs"]}
    assert ("GPU1", "GPU2") in pairs and ("GPU1", "GPU3") in pairs
    assert ("GPU0", "GPU1") not in pairs  # SYS, reported by gpu-pair-sys
    assert finding.severity == "info" and finding.data["paths"] == ["NODE", "PHB"]
    assert len(pairs) == 6


def test_gns_on_geforce_explains_and_suggests_disabling_custom_all_reduce() -> None:
    machine = machine_of("topo-p2p-2x5090-gns-tabs.txt")
    [finding] = run(topology.check_p2p_not_supported, machine)
    # GeForce refusing P2P is how the card is sold, not a fault: one advisory for the machine
    assert (finding.id, finding.severity, finding.kind, finding.subjects) == ("p2p-not-supported", "info", "design", [])
    assert finding.data == {"codes": ["GNS"], "pairs": [["GPU0", "GPU1"]]}
    assert finding.aliases == ["p2p-not-supported@GPU0,GPU1"]
    assert "GeForce" in finding.explanation and "--disable-custom-all-reduce" in finding.remedy
    assert [ref.line for ref in finding.evidence] == [2, 3]


def test_cns_on_l4_points_at_acs_and_iommu() -> None:
    [finding] = run(topology.check_p2p_not_supported, machine_of("topo-p2p-r-2xl4-cns-no-legend.txt"))
    assert finding.data["codes"] == ["CNS"] and finding.data["capabilities"] == ["read"]
    assert "ACS" in finding.remedy and "iommu=pt" in finding.remedy


def test_ok_and_nvlink_ns_are_not_findings() -> None:
    assert run(topology.check_p2p_not_supported, machine_of("topo-p2p-r-h100-8x-ok.txt")) == []
    readings = collect_nvml(FakeNvmlBackend.from_file(FIXTURES / "nvml" / "pcie-8x-l40s-dual-socket-gpu2-x8.json"))
    machine = build_machine([readings])
    findings = run(topology.check_p2p_not_supported, machine)
    # nvlink/atomics NS everywhere is normal on PCIe; only the 16 cross-socket pairs refuse read/write (CNS).
    assert len(findings) == 16
    assert all(f.data["codes"] == ["CNS"] for f in findings)
    assert findings[0].evidence[0].line is None and "nvmlDeviceGetP2PStatus" in findings[0].evidence[0].text


def test_width_below_max_from_csv_and_nvml() -> None:
    [from_csv] = run(topology.check_pcie_width, machine_of("csv-5060ti-width-x8-of-x16.txt"))
    assert (from_csv.severity, from_csv.subjects) == ("fail", ["GPU1"])
    assert from_csv.evidence[0].text == "1, NVIDIA GeForce RTX 5060 Ti, 3, 3, 8, 16"
    machine = build_machine([collect_nvml(FakeNvmlBackend.from_file(FIXTURES / "nvml" / "pcie-8x-l40s-dual-socket-gpu2-x8.json"))])
    [from_nvml] = run(topology.check_pcie_width, machine)
    assert from_nvml.subjects == ["GPU2"]
    assert from_nvml.confirm_with == "sudo lspci -vv -s 0000:3d:00.0 | grep -E 'LnkCap|LnkSta'"
    assert "nvmlDeviceGetCurrPcieLinkWidth=8" in from_nvml.evidence[0].text


def test_gen_below_max_is_info_when_idle_and_warn_in_p0() -> None:
    idle = run(topology.check_pcie_gen, machine_of("csv-l40s-8x-idle-gen1.txt"))
    assert len(idle) == 8 and {f.severity for f in idle} == {"info"}
    assert "pcie.link.gen.current" in idle[0].confirm_with
    busy_csv = (
        "index, pstate, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max\n"
        "0, P0, 3, 4, 16, 16\n1, P8, 1, 4, 16, 16\n"
    )
    machine = build_machine([Evidence(name="busy.csv", data=busy_csv.encode())])
    findings = {f.subjects[0]: f for f in run(topology.check_pcie_gen, machine)}
    assert findings["GPU0"].severity == "warn" and findings["GPU1"].severity == "info"


def test_nvswitch_box_with_one_link_down_names_only_that_gpu() -> None:
    machine = build_machine([collect_nvml(FakeNvmlBackend.from_file(FIXTURES / "nvml" / "h100-sxm-8x-nvswitch-gpu3-link-down.json"))])
    findings = [f for f in run_rules(machine) if f.id in {r.id for r in topology.RULES}]
    # NV17/NV18 pairs are not SYS/PHB, P2P is OK, links at x16 Gen5 in P0: only the missing NVLink is reported
    assert [(f.id, f.subjects) for f in findings] == [("nvlink-count-low", ["GPU3"])]
    assert findings[0].data["typical"] == 18 and findings[0].data["nvlinks"] == [17]
    assert findings[0].data["peers"] == ["GPU0", "GPU1", "GPU2", "GPU4", "GPU5", "GPU6", "GPU7"]
    assert "nvidia-smi nvlink --status -i 3" in findings[0].confirm_with


def test_pairwise_nvlink_bridges_are_not_a_fault() -> None:
    # Two NVLink-bridged pairs (NV4) and PCIe between them: differing counts by design, no finding.
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\n"
        "GPU0\t X \tNV4\tSYS\tSYS\t0-15\nGPU1\tNV4\t X \tSYS\tSYS\t0-15\n"
        "GPU2\tSYS\tSYS\t X \tNV4\t16-31\nGPU3\tSYS\tSYS\tNV4\t X \t16-31\n"
    )
    machine = build_machine([Evidence(name="topo.txt", data=text.encode())])
    assert not [f for f in run_rules(machine) if f.id == "nvlink-count-low"]


def test_one_sys_pair_is_written_in_the_singular(tmp_path) -> None:
    """A 2-GPU box across two sockets: '1 GPU pair crosses', not '1 GPU pair(s) cross'."""
    topo = tmp_path / "topo.txt"
    topo.write_text("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                    "GPU0\t X \tSYS\t0-15\t0\n"
                    "GPU1\tSYS\t X \t16-31\t1\n\n"
                    "Legend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect "
                    "between NUMA nodes (e.g., QPI/UPI)\n")
    machine = build_machine([Evidence(name="topo.txt", path=topo)])
    [finding] = run(topology.check_gpu_pair_sys, machine)
    assert finding.title.startswith("1 GPU pair crosses the CPU interconnect (SYS)"), finding.title
