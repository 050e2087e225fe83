"""The recorded /sys/class/infiniband tree: collected into the sysfs snapshot, read back into NIC records."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from k3diag.analyze.engine import run_rules
from k3diag.collect.sysfs import read_snapshot, snapshot_evidence
from k3diag.join.build import build_machine
from tests.fabric.conftest import FIXTURES

H100_TREE = FIXTURES / "fabric/sysfs-infiniband-h100-gpud"


def test_real_h100_tree_gives_nine_active_ports() -> None:
    machine = build_machine([snapshot_evidence(H100_TREE)])
    ports = machine.fabric.ib_ports
    assert len(ports) == 9
    assert (ports["mlx5_0:1"].state, ports["mlx5_0:1"].physical_state, ports["mlx5_0:1"].rate_gbps,
            ports["mlx5_0:1"].rate_text) == ("active", "LinkUp", 400.0, "400 Gb/sec (4X NDR)")
    assert ports["mlx5_bond_0:1"].link_layer == "Ethernet"
    assert machine.nics["mlx5_0"].hca_type == "MT4129"
    # The copy has no /sys/module: peer memory is unknown, not missing.
    assert machine.fabric.peer_memory.checked is False
    findings = run_rules(machine)
    # The bond port is Ethernet among InfiniBand ports: said once; rates compared only within a link layer.
    assert [f.subjects for f in findings if f.id == "ib-link-layer-mixed"] == [["mlx5_bond_0:1"]]
    assert not [f for f in findings if f.id == "ib-port-rate-below-peers"]


def _b200_like_tree(tmp_path: Path) -> Path:
    """Derived from the real H100 tree: mlx5_8/9 get PCI functions whose VPD says SW_MNG, the others plain VPD,
    and the host has nvidia-peermem loaded. (The VPD bytes are the marker only, not a full VPD image.)"""
    root = tmp_path / "root"
    shutil.copytree(H100_TREE, root)
    for index, name in enumerate(sorted(os.listdir(root / "sys/class/infiniband"))):
        bdf = f"0000:{0x18 + index:02x}:00.0"
        pci = root / "sys/devices/pci0000:00" / bdf
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text("1\n" if index >= 4 else "0\n")
        (pci / "current_link_width").write_text("16\n")
        (pci / "current_link_speed").write_text("32.0 GT/s PCIe\n")
        marker = b"\x82\x10\x00Nvidia ConnectX-7\x90\x20\x00SMDL=SW_MNG" if name in ("mlx5_8", "mlx5_9") else b"\x82PN"
        (pci / "vpd").write_bytes(marker)
        os.symlink(f"../../../devices/pci0000:00/{bdf}", root / "sys/class/infiniband" / name / "device")
    (root / "sys/module/nvidia_peermem").mkdir(parents=True)
    (root / "sys/module/nvidia_peermem/version").write_text("550.54.15\n")
    return root


def test_management_ports_pci_link_numa_and_peermem(tmp_path: Path) -> None:
    root = _b200_like_tree(tmp_path)
    snapshot = read_snapshot(root)
    by_name = {d["name"]: d for d in snapshot["infiniband"]}
    assert by_name["mlx5_8"]["vpd_sw_mng"] is True and by_name["mlx5_0"]["vpd_sw_mng"] is False
    assert snapshot["peer_memory"]["nvidia_peermem"] == "550.54.15"
    machine = build_machine([snapshot_evidence(root)])
    nic = machine.nics["mlx5_8"]
    assert (nic.management_port, nic.pcie_width, nic.pcie_speed, nic.numa_node) == (True, 16, "32.0 GT/s PCIe", 1)
    assert machine.nics["mlx5_0"].management_port is False
    assert machine.fabric.peer_memory.available is True
    findings = run_rules(machine)
    [mgmt] = [f for f in findings if f.id == "nic-management-port"]
    assert mgmt.title == "mlx5_8, mlx5_9 are NVSwitch management ports, not network NICs"
    assert "SW_MNG" in mgmt.evidence[0].text
    # Management ports are never compared with network ports.
    assert not [f for f in findings if f.id.startswith("ib-") and any("mlx5_8" in s for s in f.subjects)]
