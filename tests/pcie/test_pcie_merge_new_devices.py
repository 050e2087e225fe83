"""`merge_lspci` into a machine without PCI devices appends them in one step (`_add_to_empty`) when
their bus ids are all different: the machine it gives is the one `upsert_device`, one device at a
time, gives, whatever the bus ids (repeated, spelled differently, missing, blank)."""

from __future__ import annotations

import copy
import random

from k3diag.join.merge_pci import merge_lspci, upsert_device
from k3diag.model.machine import InputRecord, Machine
from k3diag.parse import lspci
from k3diag.parse.text import Section

BLOCK = """{bdf} 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)
\tNUMA node: {numa}
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed {speed}GT/s (ok), Width x16 (ok)
\tKernel driver in use: nvidia
"""
SPELLINGS = ["0000:1b:00.0", "1b:00.0", "0000:1B:00.0", "1c:00.0", "0000:3d:00.0", "3d:00.0", "0001:1b:00.0"]


def one_by_one(result: lspci.LspciResult) -> Machine:
    machine = Machine()
    for device in result.devices:
        upsert_device(machine, device)
    return machine


def test_an_empty_machine_gets_what_one_upsert_at_a_time_gives() -> None:
    rng = random.Random(5)
    checked = 0
    for _ in range(300):
        blocks = [BLOCK.format(bdf=rng.choice(SPELLINGS), numa=rng.choice((0, 1)), speed=rng.choice((2.5, 16)))
                  for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.3:
            blocks.append("\t\tLnkSta:\tSpeed 8GT/s, Width x8\n")  # a line without a header: a device without a bus id
        result = lspci.parse(Section("\n".join(blocks), 1), "lspci.txt")
        expected = one_by_one(copy.deepcopy(result))
        machine = Machine()
        merge_lspci(result, machine, InputRecord(path="lspci.txt", format="lspci-vv"))
        assert [d.bdf for d in machine.pci] == [d.bdf for d in expected.pci]
        assert machine.pci == expected.pci
        assert [d.sources for d in machine.pci] == [d.sources for d in expected.pci]
        for device in machine.pci:
            if device.bdf is not None:
                assert machine.pci_device(device.bdf) is machine.pci[[d.bdf for d in machine.pci].index(device.bdf)]
        checked += 1
    assert checked == 300


def test_a_repeated_bus_id_is_still_joined_into_one_device() -> None:
    text = BLOCK.format(bdf="1b:00.0", numa=1, speed=16) + "\n" + BLOCK.format(bdf="0000:1B:00.0", numa=0, speed=2.5)
    machine = Machine()
    merge_lspci(lspci.parse(Section(text, 1), "lspci.txt"), machine, InputRecord(path="lspci.txt", format="lspci-vv"))
    assert [d.bdf for d in machine.pci] == ["0000:1b:00.0"]
    assert machine.pci[0].numa_node == 1  # the first reading stays; the second fills only what is unknown
