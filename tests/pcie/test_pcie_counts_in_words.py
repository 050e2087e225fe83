"""PCIe findings count links and bridges in words, with the verb agreeing: '1 PCIe link runs', '2 PCIe links
run', 'is on at 1 bridge', never 'link(s)'."""

from __future__ import annotations

from pcie_paths import PCIE

from k3diag.analyze.engine import run_rules
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.machine import Machine
from k3diag.model.pci import PciDevice, PciLink


def _titles(machine: Machine, finding_id: str) -> list[str]:
    return [f.title for f in run_rules(machine) if f.id == finding_id]


def _narrow(count: int) -> Machine:
    machine = Machine()
    for index in range(count):
        link = PciLink(cap_speed_gts=16.0, cap_width=16, sta_speed_gts=16.0, sta_width=8)
        link.recompute_downgrades()  # what the lspci parser does once a device's lines are read
        machine.pci.append(PciDevice(None, description=f"Mellanox ConnectX-{6 + index}", class_code=0x0200,
                                     link=link))
    return machine


def test_narrow_links_one_and_several() -> None:
    [one] = _titles(_narrow(1), "pcie-link-width-limited-by-hop")
    assert one.startswith("1 PCIe link runs narrower than its device can: "), one
    [two] = _titles(_narrow(2), "pcie-link-width-limited-by-hop")
    assert two.startswith("2 PCIe links run narrower than their device can: "), two


def _fixture(name: str) -> Machine:
    return build_machine([Evidence(name=name, path=PCIE / name)])


def test_slow_links_one_and_several() -> None:
    assert _titles(_fixture("lspci-vv-rtx4090-riser-spaces.txt"), "pcie-link-speed-below-capability")[0].startswith(
        "1 PCIe link runs below its device's top speed: ")
    assert _titles(_fixture("lspci-vvv-dell-root-ports-acs-gpud.txt"), "pcie-link-speed-below-capability") == [
        "2 PCIe links run below their device's top speed: 0000:00:0c.0, 0000:00:0e.0"]


def test_acs_redirect_bridges_one_and_several() -> None:
    assert _titles(_fixture("lspci-vvv-plx-pex8725-acs-spaces.txt"), "acs-redirect-enabled") == [
        "ACS P2P redirect (ReqRedir+/CmpltRedir+) is on at 1 bridge"]
    assert _titles(_fixture("grep-acsctl-spaces-nccl-523.txt"), "acs-redirect-enabled") == [
        "ACS P2P redirect (ReqRedir+/CmpltRedir+) is on at 7 bridges"]
