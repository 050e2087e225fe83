"""NIC findings and GPUDirect RDMA per GPU-NIC pair, from real `topo -m`, `ibstat` and `ibv_devinfo` pastes."""

from __future__ import annotations

from k3diag.analyze.engine import run_rules
from k3diag.analyze.gdr import gdr_report
from k3diag.model.fabric import IbPort
from k3diag.model.source import SourceRef
from tests.fabric.conftest import machine_from


def _by_id(findings, finding_id):
    return [f for f in findings if f.id == finding_id]


def test_port_down_while_peers_are_active() -> None:
    findings = run_rules(machine_from("fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt"))
    [down] = _by_id(findings, "ib-port-down")
    # A CX-6 Dx port disabled next to active CX-7 ports: a spare, so a warning, not a lost rail.
    assert down.subjects == ["mlx5_10:1"] and down.severity == "warn"
    assert down.title == "RDMA port mlx5_10:1 is down (Disabled) while 2 other ports are active"
    assert down.evidence[0].text.strip() == "State: Down"
    assert not _by_id(findings, "ib-port-rate-below-peers")  # both active ports run at 200


def _ports(machine, *specs) -> None:
    for device, rate, mtu, layer in specs:
        machine.fabric.ib_ports[f"{device}:1"] = port = IbPort(
            device, 1, state="active", rate_gbps=rate, active_mtu=mtu, link_layer=layer,
            source=SourceRef("ibstat.txt", 1, f"CA '{device}' Rate: {rate}"))
        machine.nic(device).ports.append(port)


def test_rate_below_peers_and_mtu_mismatch() -> None:
    machine = machine_from("fabric/ibstat-cx6dx-100g-log-header-l2fwd.txt")
    machine.fabric.ib_ports.clear()
    for nic in machine.nics.values():
        nic.ports.clear()
    _ports(machine, ("mlx5_0", 400.0, 4096, "InfiniBand"), ("mlx5_1", 400.0, 4096, "InfiniBand"),
           ("mlx5_2", 200.0, 4096, "InfiniBand"), ("mlx5_3", 400.0, 2048, "InfiniBand"))
    findings = run_rules(machine)
    [slow] = _by_id(findings, "ib-port-rate-below-peers")
    assert slow.subjects == ["mlx5_2:1"] and "200 Gb/s where its peers run at 400" in slow.title
    [mtu] = _by_id(findings, "ib-mtu-mismatch")
    assert mtu.subjects == ["mlx5_3:1"] and "mlx5_3:1 2048" in mtu.title


def test_mixed_link_layers() -> None:
    machine = machine_from("fabric/ibstat-mlx4-tabs-ibwarn-two-ports-rdma-core847.txt")
    _ports(machine, ("mlx5_0", 400.0, 4096, "InfiniBand"), ("mlx5_1", 400.0, 4096, "InfiniBand"),
           ("mlx5_2", 100.0, 4096, "Ethernet"))
    [mixed] = _by_id(run_rules(machine), "ib-link-layer-mixed")
    assert mixed.subjects == ["mlx5_2:1"]
    # the remedy names this machine's devices, not `<dev>` placeholders
    assert "`NCCL_IB_HCA=mlx4_0,mlx5_0,mlx5_1` leaves out the Ethernet ones" in mixed.remedy  # mlx4_0: the ibstat
    assert "`mlxconfig -d mlx5_2 set LINK_TYPE_P1=...`" in mixed.remedy and "<dev>" not in mixed.remedy


def test_every_gpu_gets_its_nic_on_an_hgx_style_box() -> None:
    machine = machine_from("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt")
    machine.fabric.peer_memory.nvidia_peermem = "2.19.3"
    report = gdr_report(machine)
    assert [(p.gpu, p.nic, p.path) for p in report.pairs if p.best] == [(0, "NIC0", "PIX"), (1, "NIC1", "PIX"),
                                                                        (2, "NIC2", "PIX"), (3, "NIC3", "PIX")]
    assert all(p.eligible for p in report.pairs if p.best)
    assert not any(p.eligible for p in report.pairs if p.path == "SYS")
    findings = run_rules(machine)
    [gdr_map] = _by_id(findings, "gdr-nic-map")
    assert "GPU0 -> NIC0 (PIX); GPU1 -> NIC1 (PIX)" in gdr_map.title
    assert not _by_id(findings, "gpu-no-gdr-nic") and not _by_id(findings, "gdr-not-possible")


def test_named_nic_columns_dgx1() -> None:
    report = gdr_report(machine_from("nvidia/topo-m-dgx1-v100-mlx5-tabs.txt"))
    assert {p.gpu: p.device for p in report.pairs if p.best} == {
        0: "mlx5_0", 1: "mlx5_0", 2: "mlx5_1", 3: "mlx5_1", 4: "mlx5_2", 5: "mlx5_2", 6: "mlx5_3", 7: "mlx5_3"}
    # Nobody said whether nvidia-peermem is loaded: GDR is unknown, never guessed.
    assert {p.eligible for p in report.pairs if p.best} == {None}


def test_gpus_far_from_every_nic() -> None:
    machine = machine_from("nvidia/topo-m-8x4090-dual-socket-sys-tabs.txt")
    machine.fabric.peer_memory.nvidia_peermem = "2.19.3"
    findings = run_rules(machine)
    [far] = _by_id(findings, "gpu-no-gdr-nic")
    assert far.subjects == [f"GPU{i}" for i in range(8)]
    # How the box is built: advice, not a warning (the 8x 4090 box exits 0).
    assert (far.severity, far.kind) == ("info", "design")
    assert far.title == "All 8 GPUs lack a NIC within GPUDirect RDMA reach (nearest over SYS/PHB)"
    assert "GPU6 -> NIC0 over PHB" in far.explanation and "GPU0 -> NIC0 over SYS" in far.explanation
    assert far.evidence[0].text.startswith("GPU0")


def test_gdr_not_possible_without_peer_memory() -> None:
    machine = machine_from("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt")
    machine.fabric.peer_memory.checked = True
    machine.host.kernel = "5.4.0-150-generic"  # before DMA-BUF
    findings = run_rules(machine)
    [finding] = _by_id(findings, "gdr-not-possible")
    assert finding.severity == "fail"
    assert "nvidia_peermem" in finding.explanation
    [gdr_map] = _by_id(findings, "gdr-nic-map")
    assert "GPU0 -> NIC0 (PIX, no GDR)" in gdr_map.title
    assert not _by_id(findings, "gpu-no-gdr-nic")  # the module is the cause, not the path


def test_management_ports_are_not_counted_as_nics() -> None:
    machine = machine_from("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt")
    machine.fabric.peer_memory.nvidia_peermem = "2.19.3"
    nic = machine.nics["NIC3"]
    nic.management_port = True
    nic.management_source = SourceRef("sysfs-snapshot.json", None, "/sys/class/infiniband/mlx5_3/device/vpd: SW_MNG")
    findings = run_rules(machine)
    [mgmt] = _by_id(findings, "nic-management-port")
    assert mgmt.severity == "info" and "3 network NICs remain" in mgmt.explanation
    report = gdr_report(machine)
    assert "NIC3" not in {p.nic for p in report.pairs}
    # GPU3's only close NIC was the management port: it now has no NIC in reach.
    assert [f.subjects for f in _by_id(findings, "gpu-no-gdr-nic")] == [["GPU3"]]


def test_peermem_missing_on_a_recent_kernel_is_a_warning_not_a_verdict() -> None:
    machine = machine_from("fabric/topo-m-4xh100-nv6-nic-pix-nccl1617.txt")
    machine.fabric.peer_memory.checked = True
    machine.host.kernel = "6.8.0-45-generic"
    findings = run_rules(machine)
    assert not _by_id(findings, "gdr-not-possible")
    [warning] = _by_id(findings, "gdr-peermem-missing")
    assert warning.severity == "warn" and "DMA-BUF" in warning.title
    assert "GPU0 -> NIC0 (PIX, GDR unknown)" in _by_id(findings, "gdr-nic-map")[0].title


def test_a_rail_down_among_its_twins_fails() -> None:
    machine = machine_from("fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt")
    port = machine.fabric.ib_ports["mlx5_10:1"]
    machine.nics["mlx5_10"].hca_type = "MT4129"  # the same adapter model as the active rails
    port.physical_state = "Polling"  # no link partner: a cable or switch-port problem
    [down] = _by_id(run_rules(machine), "ib-port-down")
    assert down.severity == "fail" and "(Polling)" in down.title


def test_a_down_port_remedy_names_its_device_and_port() -> None:
    findings = run_rules(machine_from("fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt"))
    [down] = _by_id(findings, "ib-port-down")
    assert "`mlxlink -d mlx5_10 -p 1`" in down.remedy and "<dev>" not in down.remedy
