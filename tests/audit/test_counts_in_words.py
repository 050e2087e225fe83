"""The audit counts in words, with the verb agreeing: '1 GPU shares', '2 GPUs share', never 'GPU(s)'."""

from __future__ import annotations

import json
from pathlib import Path

from k3diag.audit.answer import AuditReport
from k3diag.audit.context import AuditContext
from k3diag.audit.facts import network_nics
from k3diag.audit.q_network import answer_gpudirect_rdma, answer_multi_node_network
from k3diag.audit.terminal import render_plain
from k3diag.model.fabric import IbPort
from k3diag.model.topology import Link
from tests.audit.test_audit_cli import _run, _topo_bundle
from tests.audit.test_checklist import _audit


def test_wrong_values_one_and_several(kit) -> None:
    for wrong, said in ((1, "counted 1 wrong value: data corruption"), (3, "counted 3 wrong values: data corruption")):
        machine = kit.build_machine(count=2)
        machine.benchmarks.append(kit.nccl_tests(2, 360.0, wrong=wrong))
        assert said in _audit(machine)[1]["nccl-allreduce"].summary


def test_gpu_counts_not_measured_one_and_several(kit) -> None:
    machine = kit.build_machine(count=4)
    machine.benchmarks.extend([kit.nccl_tests(2, 360.0), kit.nccl_tests(4, 355.0)])
    assert "not measured at 1 GPU" in _audit(machine)[1]["nccl-allreduce"].details
    machine = kit.build_machine(count=8)
    machine.benchmarks.extend([kit.nccl_tests(1, 0.0), kit.nccl_tests(8, 370.0)])
    assert "not measured at 2 GPUs, 4 GPUs" in _audit(machine)[1]["nccl-allreduce"].details


def test_gpus_sharing_a_switch_with_a_nic_one_and_several(kit) -> None:
    machine = kit.build_machine(count=2)
    kit.add_nics(machine, lambda i, k: "PIX" if i == k == 0 else "SYS")
    gdr = _audit(machine)[1]["gpudirect-rdma"]
    assert gdr.summary.startswith("Probably: 1 GPU shares a PCIe switch with a NIC (PIX/PXB)"), gdr.summary
    machine = kit.build_machine(count=2)
    kit.add_nics(machine, lambda i, k: "PIX" if i == k else "SYS")
    assert _audit(machine)[1]["gpudirect-rdma"].summary.startswith("Probably: 2 GPUs share a PCIe switch")


def test_gdrdma_connections_one_and_several(kit) -> None:
    for pairs, said in (([(0, 8)], "on 1 connection."), ([(0, 8), (8, 0)], "on 2 connections.")):
        machine = kit.build_machine(count=2)
        kit.add_nics(machine, lambda i, k: "PIX" if i == k else "SYS")
        kit.add_nccl(machine, "NET/IB/0/GDRDMA", "NET", pairs).nodes = 2
        answer = answer_gpudirect_rdma(AuditContext(machine=machine, findings=[]))
        assert answer.summary == f"Yes: NCCL moved data with GPUDirect RDMA (GDRDMA) {said}"


def test_narrow_cards_one_and_several(kit) -> None:
    one = _audit(kit.build_machine(count=2, width={0: 8}))[1]["pcie-x16"]
    assert one.request.startswith("Ask the vendor to reseat or move the card to a x16 slot"), one.request
    both = _audit(kit.build_machine(count=2, width={0: 8, 1: 8}))[1]["pcie-x16"]
    assert both.request.startswith("Ask the vendor to reseat or move the cards to a x16 slot"), both.request


def test_acs_bridges_and_unreadable_devices_one_and_several(kit) -> None:
    machine = kit.build_machine(count=4)
    kit.add_bridge(machine, "0000:15:01.0", False, [0, 1, 2, 3], "PEX890xx")
    assert "ACS redirect is off on the 1 bridge whose ACS control was read" in _audit(machine)[1]["acs-iommu"].details
    assert ("ACS redirect is off on all 2 bridges whose ACS control was read"
            in _audit(kit.good())[1]["acs-iommu"].details)
    for count, said in ((1, "1 device read without root"), (2, "2 devices read without root")):
        machine = kit.build_machine(count=2)
        for index in range(count):
            kit.add_bridge(machine, f"0000:1{index}:01.0", False, [index], "PEX890xx").acs = None
            machine.pci[-2].access_denied = True
        details = _audit(machine)[1]["acs-iommu"].details
        assert f"{said}: ACS state <access denied>" in details, details


def _nic_machine(kit, count: int, down: int):
    machine = kit.build_machine(count=8)
    for k in range(count):
        nic = machine.nic(f"NIC{k}")
        nic.device = f"mlx5_{k}"
        nic.ports = [IbPort(device=f"mlx5_{k}", port=1, state="down" if k < down else "active")]
        machine.add_link(Link("GPU0", f"NIC{k}", "SYS"))
    return machine


def test_rdma_nics_and_down_ports_one_and_several(kit) -> None:
    def summary(count: int, down: int) -> str:
        return answer_multi_node_network(AuditContext(machine=_nic_machine(kit, count, down), findings=[])).summary

    assert summary(1, 0).startswith("Only 1 RDMA-capable NIC for 8 GPUs:")
    assert summary(2, 0).startswith("Only 2 RDMA-capable NICs for 8 GPUs:")
    assert summary(4, 1).startswith("4 RDMA-capable NICs, but 1 port is down (mlx5_0:1)")
    assert summary(4, 2).startswith("4 RDMA-capable NICs, but 2 ports are down (mlx5_0:1, mlx5_1:1)")
    assert summary(4, 0).startswith("4 RDMA-capable NICs; the switch")


def test_management_ports_not_counted_one_and_several(kit) -> None:
    for managed, said in ((1, "1 NVSwitch management port not counted"), (2, "2 NVSwitch management ports not counted")):
        machine = _nic_machine(kit, 4, 0)
        for k in range(managed):
            machine.nics[f"NIC{k}"].management_port = True
        assert network_nics(machine).how == f"as nvidia-smi topo -m lists them, {said}"


def test_terminal_warnings_one_and_several() -> None:
    for warnings, said in ((["w"], "1 warning:"), (["w", "v"], "2 warnings:")):
        text = render_plain(AuditReport(source="quote.tar.gz", manifest={}, answers=[], warnings=warnings))
        assert said in text.splitlines(), text


def test_expected_nic_count_of_one_is_singular(tmp_path: Path) -> None:
    bundle, spec = _topo_bundle(tmp_path), tmp_path / "nic.toml"
    spec.write_text("[nic]\ncount = 1\n")
    nic = next(a for a in json.loads(_run(str(bundle), "--json", "--expect", str(spec)).stdout)["answers"]
               if a["id"] == "multi-node-network")
    assert nic["details"][0] == ("the purchase spec expects 1 NIC: 2 (as nvidia-smi topo -m lists them: NIC0, NIC1), "
                                 "as expected"), nic["details"]


def test_more_p2p_problems_one_and_several(kit) -> None:
    one = _audit(kit.bad())[1]["p2p"].summary
    assert one.endswith(" (and 1 more problem)."), one
    machine = kit.bad()
    machine.nccl[0].env["NCCL_P2P_DISABLE"] = "1"
    several = _audit(machine)[1]["p2p"].summary
    assert several.endswith(" (and 2 more problems)."), several


def test_serving_results_without_a_layout_one_and_several(kit) -> None:
    from types import SimpleNamespace

    from k3diag.audit.q_serving import SERVING_RUNS, answer_tp2_tp4_measured
    from k3diag.model.source import SourceRef

    for count, said in ((1, "1 result does not say its layout"), (2, "2 results do not say their layout")):
        machine = kit.build_machine(count=4)
        machine.extras[SERVING_RUNS] = [SimpleNamespace(layout=SimpleNamespace(tp=None),
                                                        source=SourceRef(f"bench{i}.json", None, "{"))
                                        for i in range(count)]
        details = answer_tp2_tp4_measured(AuditContext(machine=machine, findings=[])).details
        assert f"{said} (add --metadata tp=N gpus=...)" in details, details
