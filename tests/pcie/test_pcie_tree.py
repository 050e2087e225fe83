"""The PCIe tree: parents from sysfs, from lspci bus ranges alone, roles, hops, pair path classes."""

from __future__ import annotations

from pcie_paths import PCIE, SYSFS

from k3diag.collect.sysfs import collect_platform
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.pci import PciDevice, PciLink
from k3diag.model.pcie_tree import PcieTree, build_tree, gpu_endpoints, nic_endpoints


def server_from_sysfs():
    return build_machine(collect_platform(SYSFS / "dual_socket_switch", run_dmesg=False))


def server_from_lspci_vv_only():
    return build_machine([Evidence(name="lspci-vv.txt", path=PCIE / "dual-socket-server" / "lspci-vv.txt")])


def test_paths_roles_and_hops_from_sysfs() -> None:
    machine = server_from_sysfs()
    tree = build_tree(machine)
    assert tree.path("0000:03:00.0") == ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    assert [tree.role(b) for b in tree.path("0000:03:00.0")] == ["Root Port", "Upstream Port", "Downstream Port",
                                                                 "Endpoint"]
    hops = tree.hops("0000:03:00.0")
    # root port -> switch upstream port, then downstream port -> GPU; the switch's internal link is no hop
    assert [h.name for h in hops] == ["0000:00:01.1 -> 0000:01:00.0", "0000:02:00.0 -> 0000:03:00.0"]
    (gpu2_hop,) = tree.hops("0000:41:00.0")
    assert (gpu2_hop.upper_cap_width, gpu2_hop.lower_cap_width, gpu2_hop.cap_width, gpu2_hop.sta_width) == (8, 16, 8, 8)
    assert tree.root_complex("0000:41:00.0") == "0000:40" and tree.numa_node("0000:81:00.0") == 1


def test_pair_path_classes() -> None:
    machine = server_from_sysfs()
    tree = build_tree(machine)
    gpus = dict(gpu_endpoints(machine, tree))
    pair = tree.pair_path(gpus["GPU0"], gpus["GPU1"])
    assert pair.path == "PIX" and pair.common == "0000:01:00.0"
    assert pair.bridges == ["0000:02:00.0", "0000:02:01.0"]  # the ACS port between them is among them
    assert tree.pair_path(gpus["GPU0"], gpus["GPU2"]).path == "NODE"
    assert tree.pair_path(gpus["GPU1"], gpus["GPU3"]).path == "SYS"
    assert nic_endpoints(machine, tree) == [("mlx5_0", "0000:05:00.0")]
    assert tree.pair_path(gpus["GPU0"], "0000:05:00.0").path == "PIX"


def test_lspci_vv_alone_builds_the_same_tree_from_bus_ranges() -> None:
    machine = server_from_lspci_vv_only()
    assert all(device.parent is None for device in machine.pci)  # no sysfs, no -tv: ranges only
    tree = build_tree(machine)
    assert tree.path("0000:04:00.0") == ["0000:00:01.1", "0000:01:00.0", "0000:02:01.0", "0000:04:00.0"]
    assert tree.root_complex("0000:81:00.0") == "0000:80"
    gpus = dict(gpu_endpoints(machine, tree))
    assert tree.pair_path(gpus["GPU0"], gpus["GPU1"]).path == "PIX"
    assert tree.pair_path(gpus["GPU2"], gpus["GPU3"]).path == "SYS"


def test_roles_inferred_when_no_source_states_them() -> None:
    devices = [
        PciDevice("0000:00:01.0", is_bridge=True, secondary_bus=1, subordinate_bus=3),
        PciDevice("0000:01:00.0", is_bridge=True, secondary_bus=2, subordinate_bus=3),
        PciDevice("0000:02:04.0", is_bridge=True, secondary_bus=3, subordinate_bus=3),
        PciDevice("0000:03:00.0", class_code=0x0302, vendor_id="10de",
                  link=PciLink(cap_speed_gts=16.0, cap_width=16, sta_speed_gts=16.0, sta_width=16)),
    ]
    tree = PcieTree(devices)
    assert [tree.role(b) for b in tree.path("0000:03:00.0")] == ["Root Port", "Upstream Port", "Downstream Port",
                                                                 "Endpoint"]


def test_cycles_and_self_parents_do_not_hang() -> None:
    devices = [PciDevice("0000:01:00.0", parent="0000:02:00.0", is_bridge=True),
               PciDevice("0000:02:00.0", parent="0000:01:00.0", is_bridge=True),
               PciDevice("0000:03:00.0", parent="0000:03:00.0")]
    tree = PcieTree(devices)
    assert len(tree.path("0000:01:00.0")) <= 3
    assert tree.path("0000:03:00.0") == ["0000:03:00.0"]
    assert tree.pair_path("0000:01:00.0", "0000:03:00.0").path in (None, "PIX", "PXB", "PHB")


def test_derived_links_and_path_description() -> None:
    from k3diag.model.pcie_tree import derived_links, describe_gpu_paths

    machine = server_from_sysfs()
    links = {(link.a, link.b): link.path for link in derived_links(machine)}
    assert links == {("GPU0", "GPU1"): "PIX", ("GPU0", "GPU2"): "NODE", ("GPU0", "GPU3"): "SYS",
                     ("GPU1", "GPU2"): "NODE", ("GPU1", "GPU3"): "SYS", ("GPU2", "GPU3"): "SYS"}
    # no tool reported these pairs, so the build step fills them from the tree (origin pcie-tree)
    assert {(link.a, link.b): link.path for link in machine.links} == links
    assert {link.origin for link in machine.links} == {"pcie-tree"}
    paths = {entry["gpu"]: entry for entry in describe_gpu_paths(machine)}
    gpu0 = paths["GPU0"]
    assert [step["role"] for step in gpu0["path"]] == ["Root Port", "Upstream Port", "Downstream Port", "Endpoint"]
    assert gpu0["path"][2]["acs_redirect"] is True and gpu0["root_complex"] == "0000:00"
    assert paths["GPU2"]["narrowest_hop"] == "0000:40:01.1 -> 0000:41:00.0"
    assert paths["GPU3"]["numa_node"] == 1


def test_nic_endpoints_are_found_once_per_reading_and_again_when_the_nics_change() -> None:
    """Inside `model.shared.reading()` the rules share one answer; a NIC record added or renamed, or another
    tree, is a new question (the fast NICs are named as the NIC records name them)."""
    from k3diag.model.shared import reading
    from k3diag.model.topology import Nic

    machine = server_from_sysfs()
    with reading():
        tree = build_tree(machine)
        first = nic_endpoints(machine, tree)
        assert first == [("mlx5_0", "0000:05:00.0")]
        first.append(("scratch", "0000:ff:00.0"))  # a caller's list is its own
        assert nic_endpoints(machine, tree) == [("mlx5_0", "0000:05:00.0")]
        for nic in list(machine.nics.values()):
            if nic.bus_id and nic.bus_id.endswith("05:00.0"):
                nic.name = "ib-renamed"
        machine.nics["NIC9"] = Nic(name="NIC9", bus_id="0000:03:00.0")  # names a GPU's function, as a test can
        assert nic_endpoints(machine, tree) == [(name, bdf) for name, bdf in
                                                nic_endpoints(machine, PcieTree(list(machine.pci)))]
        assert ("NIC9", "0000:03:00.0") in nic_endpoints(machine, tree)
