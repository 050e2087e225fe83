"""`ibstatus` as people paste it: tabs (a UCX setup guide, InfiniBand EDR) or spaces after a conda prompt
(RoCE HDR ports down). Read into the same ports as ibstat, so the port rules judge them."""

from __future__ import annotations

from k3diag.analyze.engine import run_rules
from k3diag.parse import ibstat, ibstatus
from k3diag.parse.text import Section
from tests.fabric.conftest import FIXTURES, machine_from

TABS = "fabric/ibstatus-4x-edr-ib-tabs-ucx-guide.txt"
DOWN = "fabric/ibstatus-roce-hdr-down-spaces-after-ibstat-prompt.txt"


def test_tabbed_infiniband_ports() -> None:
    text = (FIXTURES / TABS).read_text()
    assert ibstatus.sniff(text) >= 0.9 and ibstat.sniff(text) == 0.0
    result = ibstatus.parse(Section(text, 1), "ibstatus.txt")
    assert result.warnings == []
    assert [(p.device, p.port, p.state, p.physical_state, p.rate_gbps, p.link_layer)
            for d in result.devices for p in d.ports] == [
        (f"mlx5_{i}", 1, "active", "LinkUp", 100.0, "InfiniBand") for i in range(3)]
    assert result.devices[1].ports[0].rate_text == "100 Gb/sec (4X EDR)"
    assert result.devices[1].ports[0].source.line == 14


def test_roce_ports_down_are_found_down() -> None:
    machine = machine_from(DOWN)
    [record] = machine.inputs
    assert record.format == "ibstatus" and record.warnings == []
    down = [f for f in run_rules(machine) if f.id == "ib-port-down"]
    assert down and down[0].title.startswith("RDMA port mlx5_0:1 is down (Disabled)")
    assert down[0].evidence[0].text.strip() == "state:           1: DOWN"


def test_no_block_is_said() -> None:
    result = ibstatus.parse(Section("ibstatus\nibstatus: command not found\n", 1), "x")
    assert result.devices == [] and "no `Infiniband device" in result.warnings[0]
