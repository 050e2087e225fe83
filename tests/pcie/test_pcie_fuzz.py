"""Every parser of this layer takes random and mutated input without raising; detection picks them."""

from __future__ import annotations

import json

import pytest
from pcie_paths import PCIE
from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.machine import InputRecord, Machine
from k3diag.join.merge_pci import merge_dmesg, merge_lspci, merge_lspci_tree, merge_sysfs
from k3diag.parse import dmesg, kernel_cmdline, lspci, lspci_tree, sysfs_snapshot
from k3diag.parse.text import Section

PARSERS = (lspci, lspci_tree, sysfs_snapshot, kernel_cmdline, dmesg)
REAL = [path.read_text() for path in sorted(PCIE.glob("*.txt"))]
LINES = [line for text in REAL for line in text.split("\n")]


@st.composite
def mutated(draw) -> str:
    """Real lines shuffled, cut, with their whitespace changed and bytes flipped."""
    lines = draw(st.lists(st.sampled_from(LINES), max_size=60))
    out = []
    for line in lines:
        action = draw(st.integers(0, 5))
        if action == 0:
            line = line[: draw(st.integers(0, max(0, len(line))))]
        elif action == 1:
            line = line.replace("\t", "    ")
        elif action == 2 and line:
            position = draw(st.integers(0, len(line) - 1))
            line = line[:position] + draw(st.sampled_from(["\x00", "]", "[", "-", "+", "x", ":", "\ufffd"])) + line[position:]
        elif action == 3:
            line = line.strip()
        out.append(line)
    return "\n".join(out)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=2000))
def test_random_text(text: str) -> None:
    for module in PARSERS:
        module.sniff(text)
        result = module.parse(Section(text, 1), "fuzz")
        assert isinstance(result.warnings, list)


@settings(max_examples=80, deadline=None)
@given(mutated())
def test_mutated_real_lines(text: str) -> None:
    machine = Machine()
    record = InputRecord(path="fuzz", format="x")
    for module, merge in ((lspci, merge_lspci), (lspci_tree, merge_lspci_tree), (dmesg, merge_dmesg)):
        assert 0.0 <= module.sniff(text) <= 1.0
        merge(module.parse(Section(text, 1), "fuzz"), machine, record)
    kernel_cmdline.parse(Section(text, 1), "fuzz")


@settings(max_examples=50, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                     max_size=4), max_leaves=20))
def test_sysfs_snapshot_with_odd_json(value) -> None:
    doc = {"schema": "k3diag.sysfs-snapshot/1", "devices": [value, {"bdf": "0000:01:00.0", "files": value,
                                                                    "config_hex": value, "path": value}],
           "iommu": value}
    result = sysfs_snapshot.parse(Section(json.dumps(doc), 1), "fuzz")
    merge_sysfs(result, Machine(), InputRecord(path="fuzz", format="sysfs-snapshot"))


@pytest.mark.parametrize("name, expected", [
    ("lspci-vvv-dell-root-ports-acs-gpud.txt", "lspci-vv"),
    ("grep-acsctl-tabs-nccl-629.txt", "lspci-vv"),
    ("lspci-vv-quadro-rtx8000-downgraded-excerpt.txt", "lspci-vv"),
    ("lspci-vv-h100-access-denied-spaces.txt", "lspci-vv"),
    ("lspci-tv-amd-mi100-rccl-547.txt", "lspci-tv"),
    ("lspci-t-multi-domain-club3090-1261.txt", "lspci-tv"),
    ("dmesg-aer-surprise-down-xid79-gpu-burn.txt", "dmesg"),
    ("journal-aer-correctable-pop-os.txt", "dmesg"),
    ("dmesg-iommu-cmdline-wrapped-nix.txt", "dmesg"),
    ("cmdline-intel-iommu-pt-rocm-361.txt", "kernel-cmdline"),
    ("dual-socket-server/lspci-vv.txt", "lspci-vv"),
    ("dual-socket-server/lspci-tv.txt", "lspci-tv"),
])
def test_detected_by_content(name: str, expected: str) -> None:
    machine = build_machine([Evidence(name=name, path=PCIE / name)])
    assert [inp.format for inp in machine.inputs] == [expected]


def test_every_real_fixture_is_recognized() -> None:
    for path in sorted(PCIE.glob("*.txt")):
        machine = build_machine([Evidence(name=path.name, path=path)])
        assert all(inp.format != "unknown" for inp in machine.inputs), path.name


def test_lspci_tv_then_lspci_vv_pasted_in_one_file() -> None:
    text = ("$ lspci -tv\n" + (PCIE / "dual-socket-server/lspci-tv.txt").read_text()
            + "$ sudo lspci -vv\n" + (PCIE / "dual-socket-server/lspci-vv.txt").read_text())
    machine = build_machine([Evidence(name="both.txt", data=text.encode())])
    assert [inp.format for inp in machine.inputs] == ["lspci-tv", "lspci-vv"]
    assert machine.pci_device("0000:03:00.0").parent == "0000:02:00.0"
    assert machine.pci_device("0000:02:00.0").acs.redirects_p2p is True
