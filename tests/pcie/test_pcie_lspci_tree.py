"""`lspci -tv` / `lspci -t`: parents, bus ranges, names, domains."""

from __future__ import annotations

from pcie_paths import PCIE, section

from k3diag.parse import lspci_tree
from k3diag.parse.text import Section


def nodes(name: str) -> dict[str, lspci_tree.TreeNode]:
    result = lspci_tree.parse(section(name), name)
    return {node.bdf: node for node in result.nodes}


def test_amd_mi100_tree_with_names() -> None:
    tree = nodes("lspci-tv-amd-mi100-rccl-547.txt")
    assert len(tree) == 28
    gpu = tree["0000:4a:00.0"]
    assert gpu.name == "Advanced Micro Devices, Inc. [AMD/ATI] Device 738c"
    chain = []
    current = gpu.parent
    while current:
        chain.append(current)
        current = tree[current].parent
    assert chain == ["0000:49:00.0", "0000:48:00.0", "0000:47:00.0", "0000:46:00.0", "0000:44:01.0",
                     "0000:43:00.0", "0000:40:01.1"]
    assert (tree["0000:40:01.1"].secondary_bus, tree["0000:40:01.1"].subordinate_bus) == (0x43, 0x53)
    assert tree["0000:45:00.0"].parent == "0000:44:00.0"
    assert tree["0000:45:00.0"].name == "Mellanox Technologies MT28908 Family [ConnectX-6]"
    assert tree["0000:43:00.1"].parent == "0000:40:01.1"  # second function after a deep subtree
    assert tree["0000:40:00.0"].root_bus == "0000:40" and tree["0000:40:00.0"].parent is None


def test_switch_chains_without_names() -> None:
    tree = nodes("lspci-t-3090-switch-club3090-741.txt")
    assert tree["0000:0c:00.0"].parent == "0000:07:08.0"
    assert tree["0000:07:08.0"].parent == "0000:06:00.0"
    assert tree["0000:06:00.0"].parent == "0000:04:08.0"
    assert tree["0000:04:08.0"].parent == "0000:03:00.0"
    assert tree["0000:03:00.0"].parent == "0000:00:02.1"
    assert (tree["0000:00:02.2"].secondary_bus, tree["0000:00:02.2"].subordinate_bus) == (0x11, 0x78)
    assert tree["0000:12:00.0"].secondary_bus == 0x17  # an empty port `-[17-46]--`
    assert all(node.name is None for node in tree.values())


def test_multi_domain_roots_and_cut_range() -> None:
    result = lspci_tree.parse(section("lspci-t-multi-domain-club3090-1261.txt"), "t.txt")
    tree = {node.bdf: node for node in result.nodes}
    assert tree["0000:21:00.0"].parent == "0000:20:07.1" and tree["0000:21:00.0"].root_bus == "0000:20"
    assert tree["0000:63:00.0"].parent == "0000:62:02.0"
    assert any("cut short" in w for w in result.warnings)


def test_generated_tree_matches_the_server() -> None:
    tree = nodes("dual-socket-server/lspci-tv.txt")
    assert tree["0000:03:00.0"].parent == "0000:02:00.0"
    assert tree["0000:05:00.1"].parent == "0000:02:02.0"
    assert tree["0000:41:00.0"].parent == "0000:40:01.1"
    assert tree["0000:81:00.0"].root_bus == "0000:80"


def test_sniff() -> None:
    assert lspci_tree.sniff((PCIE / "lspci-tv-amd-mi100-rccl-547.txt").read_text()) >= 0.9
    assert lspci_tree.sniff((PCIE / "lspci-t-3090-switch-club3090-741.txt").read_text()) >= 0.9
    assert lspci_tree.sniff((PCIE / "lspci-vvv-dell-root-ports-acs-gpud.txt").read_text()) == 0.0


def test_damaged_lines() -> None:
    text = "-[0000:00]-+-00.0\n           |  +-zz.9\n                      \\-05.0  orphan\n"
    result = lspci_tree.parse(Section(text, 1), "bad.txt")
    assert [n.bdf for n in result.nodes] == ["0000:00:00.0"]
    assert any("no parent" in w for w in result.warnings)
