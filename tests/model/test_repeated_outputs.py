"""A file holding one output many times over (a command run in a loop and saved to a log) must cost
time in proportion to its size: a 50 MB log of repeated `lspci -vv` took 7 minutes when every device
kept every line it was ever read from and every pair kept every identical reading."""

from __future__ import annotations

from pathlib import Path

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.machine import Machine
from k3diag.model.source import MAX_SOURCES_PER_RECORD
from k3diag.model.topology import Link

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"
LSPCI = REPO / "fixtures" / "pcie" / "dual-socket-server" / "lspci-vv.txt"
ROCM = REPO / "fixtures" / "amd" / "rocm-smi-showtoponuma-mi210-8gpu-nps4.txt"


def _machine(path: Path, copies: int) -> Machine:
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    return build_machine([Evidence(name="loop.log", data=(text * copies).encode("utf-8"))])


def test_repeated_topo_matrix_keeps_one_reading_per_pair() -> None:
    once = _machine(TOPO, 1)
    many = _machine(TOPO, 60)
    assert len(many.links) == len(once.links) == 45  # 10 endpoints: 45 pairs
    assert many.link("GPU6", "NIC0").path == "PHB"
    assert many.link("GPU6", "NIC0").source.line == 8  # the first copy's line is the one quoted


def test_a_contradicting_reading_is_still_kept() -> None:
    machine = Machine()
    machine.add_link(Link(a="GPU0", b="GPU1", path="PIX"))
    machine.add_link(Link(a="GPU0", b="GPU1", path="PIX"))
    machine.add_link(Link(a="GPU0", b="GPU1", path="SYS"))
    assert [link.path for link in machine.links_between("GPU0", "GPU1")] == ["PIX", "SYS"]


def test_repeated_lspci_keeps_a_bounded_number_of_lines_per_device() -> None:
    machine = _machine(LSPCI, 60)  # ~10 lines per device per copy: past the bound
    assert machine.pci
    assert max(len(device.sources) for device in machine.pci) <= MAX_SOURCES_PER_RECORD
    once = _machine(LSPCI, 1)
    first = {device.bdf: device.sources[0] for device in once.pci if device.sources}
    for device in machine.pci:
        if device.bdf in first:
            assert device.sources[0] == first[device.bdf]


def test_repeated_rocm_smi_keeps_a_bounded_number_of_lines_per_gpu() -> None:
    machine = _machine(ROCM, MAX_SOURCES_PER_RECORD + 40)
    assert len(machine.gpus) == 8
    assert max(len(gpu.sources) for gpu in machine.gpus.values()) <= MAX_SOURCES_PER_RECORD
