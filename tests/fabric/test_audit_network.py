"""The audit's GPUDirect RDMA and NIC questions, answered from the fabric facts."""

from __future__ import annotations

from k3diag.audit.answer import FAIL, PASS, WARN
from k3diag.audit.context import AuditContext
from k3diag.audit.q_network import answer_gpudirect_rdma, answer_multi_node_network
from tests.fabric.conftest import machine_from


def _ctx(machine) -> AuditContext:
    return AuditContext(machine=machine, findings=[])


def test_gdr_pass_with_peermem_and_a_nic_per_gpu() -> None:
    machine = machine_from("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt")
    machine.fabric.peer_memory.nvidia_peermem = "550.54.15"
    answer = answer_gpudirect_rdma(_ctx(machine))
    assert answer.verdict == PASS
    assert "every GPU has a network NIC within NCCL_NET_GDR_LEVEL PXB" in answer.summary
    assert answer.details[0].startswith("GPU0: use NIC0 (PIX): GPUDirect RDMA eligible")


def test_gdr_fail_without_peer_memory_on_an_old_kernel() -> None:
    machine = machine_from("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt")
    machine.fabric.peer_memory.checked = True
    machine.host.kernel = "5.4.0-150-generic"
    answer = answer_gpudirect_rdma(_ctx(machine))
    assert answer.verdict == FAIL and answer.summary.startswith("No: no peer-memory module is loaded")


def test_nic_answer_lists_ports_and_leaves_out_management_ports() -> None:
    machine = machine_from("fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt")
    machine.nics["mlx5_1"].management_port = True
    answer = answer_multi_node_network(_ctx(machine))
    assert answer.data["management_ports"] == ["mlx5_1"] and "mlx5_1" not in answer.data["nics"]
    assert answer.verdict == WARN and "1 port is down (mlx5_10:1)" in answer.summary
    assert any(d.startswith("mlx5_0: port 1 active 200 Gb/s Ethernet") for d in answer.details)
