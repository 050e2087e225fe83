"""What the join says about inputs and virtual machines counts GPUs in words: '1 GPU bus id in common',
'2 GPUs seen', 'link_width 0 for 1 GPU', never 'GPU(s)'."""

from __future__ import annotations

from types import SimpleNamespace

from k3diag.join.grouping import describe, matches_between
from k3diag.join.merge_nccl import _xml_virtual_signs
from k3diag.model.identity import IdentityFact, InputIdentity
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef


def _buses(*buses: str) -> InputIdentity:
    return InputIdentity(gpu_bus_ids=[IdentityFact(bus) for bus in buses])


def test_bus_ids_in_common_one_and_several() -> None:
    assert "1 GPU bus id in common" in matches_between(_buses("0000:18:00.0"), _buses("0000:18:00.0"))[1]
    assert "2 GPU bus ids in common" in matches_between(_buses("0000:18:00.0", "0000:2a:00.0"),
                                                        _buses("0000:18:00.0", "0000:2a:00.0"))[1]


def test_gpus_seen_one_and_several() -> None:
    assert describe(InputIdentity(gpus_seen=1)) == "1 GPU seen"
    assert describe(InputIdentity(gpus_seen=8)) == "8 GPUs seen"


def test_gpus_the_hypervisor_hides_one_and_several() -> None:
    ref = SourceRef("topo.xml", 3, '<pci busid="0001:00:00.0" link_width="0"/>')
    for count, noun in ((1, "1 GPU"), (4, "4 GPUs")):
        machine = Machine()
        gpus = [SimpleNamespace(hidden_link=True, numa_unknown=True, source=ref, link_source=ref)] * count
        _xml_virtual_signs(SimpleNamespace(gpus=gpus), machine)
        said = [sign.what for sign in machine.extras["virtual_signs"]]
        assert said == [f"link_width 0 for {noun} in NCCL's topology XML (the hypervisor hides the PCIe link)",
                        f"numaid -1 above {noun} in NCCL's topology XML (no NUMA placement is visible)"], said
