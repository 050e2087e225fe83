"""`--expect spec.toml`: the purchase spec checked line by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.audit.answer import FAIL, PASS, UNKNOWN
from k3diag.audit.spec import SpecError, check_spec, load_spec, parse_spec
from k3diag.model.machine import Machine

SPEC = """
# what purchase order 4711 promised
[gpu]
count = 8
model = "H100 80GB"
pcie_gen = 5
pcie_width = 16
nvlinks = 18
memory_gib = 80

[nic]
count = 2
gpu_nic_path = "PXB"
"""


def _by_item(checks):
    return {check.item: check for check in checks}


def test_good_machine_meets_the_spec(good_machine: Machine) -> None:
    checks = _by_item(check_spec(parse_spec(SPEC), good_machine))
    assert {item: c.verdict for item, c in checks.items()} == {
        "gpu.count": PASS, "gpu.model": PASS, "gpu.pcie_gen": PASS, "gpu.pcie_width": PASS, "gpu.memory_gib": PASS,
        "gpu.nvlinks": PASS, "nic.count": PASS, "nic.gpu_nic_path": FAIL,
    }
    assert checks["gpu.nvlinks"].actual == "at least NV18 on every pair"
    # GPUs 1-3 and 5-7 reach their NIC through the host bridge (NODE), not a switch
    assert checks["nic.gpu_nic_path"].actual.startswith("GPU1 NODE; GPU2 NODE")
    assert checks["gpu.count"].evidence


def test_bad_machine_misses_the_spec(bad_machine: Machine) -> None:
    checks = _by_item(check_spec(parse_spec(SPEC), bad_machine))
    assert checks["gpu.model"].verdict == FAIL and "GPU0: NVIDIA GeForce RTX 4090" in checks["gpu.model"].actual
    assert checks["gpu.pcie_gen"].verdict == FAIL and "GPU0 Gen4" in checks["gpu.pcie_gen"].actual
    assert checks["gpu.pcie_width"].verdict == FAIL and checks["gpu.pcie_width"].actual == "GPU2 x8"
    assert checks["gpu.pcie_width"].evidence[0].text == "Current                   : 8x"
    assert checks["gpu.nvlinks"].verdict == FAIL and "GPU0-GPU1 PIX" in checks["gpu.nvlinks"].actual
    assert checks["gpu.count"].verdict == PASS


def test_unknowns_name_the_command(kit) -> None:
    machine = Machine()
    checks = _by_item(check_spec(parse_spec(SPEC), machine))
    assert all(check.verdict == UNKNOWN for check in checks.values())
    assert checks["gpu.count"].request == "nvidia-smi -L ; nvidia-smi topo -m"
    assert checks["nic.gpu_nic_path"].request == "nvidia-smi topo -m"


@pytest.mark.parametrize("text, message", [
    ("[gpu\ncount = 8", "is not valid TOML"),
    ("[cpu]\ncount = 2", "unknown section [cpu]"),
    ("[gpu]\ncnt = 8", "unknown key gpu.cnt; known keys in [gpu]: count, memory_gib, model, nvlinks"),
    ("[gpu]\ncount = \"eight\"", "gpu.count must be a whole number"),
    ("[gpu]\ncount = true", "gpu.count must be a whole number"),
    ("[nic]\ngpu_nic_path = \"NEAR\"", "nic.gpu_nic_path must be one of PIX, PSB, PXB, PHB, NODE, SYS"),
    ("gpu = 3", "gpu must be a table"),
    # a key above every section is no "unknown section [count]"
    ("count = 8\n[gpu]\nmodel = \"H100\"", "spec.toml: `count = ` stands outside a section; every key goes under "
                                              "[gpu] or [nic]"),
])
def test_bad_specs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_spec(text, "spec.toml")


def test_load_spec_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    spec = load_spec(path)
    assert (spec.gpu_count, spec.gpu_model, spec.nvlinks, spec.gpu_nic_path) == (8, "H100 80GB", 18, "PXB")
    with pytest.raises(SpecError, match="could not read the spec"):
        load_spec(tmp_path / "missing.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(tmp_path / "bin.toml")
