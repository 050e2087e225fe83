"""`ibstat` and `ibstatus` (and `ibv_devinfo`) pasted one after the other without the prompt lines: each
output is its own section, read by its own parser. Before, the paste was one section: the ibstat parser
read ibstatus's `rate:` into the last ibstat port, or ibstatus's blocks were dropped. Real outputs of one
machine: fixtures/fabric/ibstat-then-ibstatus-cx6-roce-down-no-prompts.txt."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.evidence import Evidence
from k3diag.join.build import parse_evidence

FABRIC = Path(__file__).resolve().parents[2] / "fixtures" / "fabric"
PASTE = (FABRIC / "ibstat-then-ibstatus-cx6-roce-down-no-prompts.txt").read_text()
runner = CliRunner()


def _analyze(path: Path, *options: str) -> str:
    result = runner.invoke(app, ["analyze", str(path), *options])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.stdout


def _ports(text: str) -> list[tuple]:
    parsed = list(parse_evidence(Evidence(name="paste.txt", data=text.encode())))
    return [(p.record.format, port.device, port.port, port.state, port.rate_text, port.link_layer, port.source.line)
            for p in parsed for device in p.result.devices for port in device.ports]


def test_ibstat_then_ibstatus_each_read_by_its_own_parser(tmp_path: Path) -> None:
    assert _ports(PASTE) == [
        ("ibstat", "mlx5_0", 1, "down", "200", "Ethernet", 9),  # each port's `State:` line
        ("ibstat", "mlx5_1", 1, "down", "200", "Ethernet", 30),
        ("ibstatus", "mlx5_0", 1, "down", "200 Gb/sec (4X HDR)", "Ethernet", 43),
        ("ibstatus", "mlx5_1", 1, "down", "200 Gb/sec (4X HDR)", "Ethernet", 52),
    ]
    paste = tmp_path / "paste.txt"
    paste.write_text(PASTE)
    report = json.loads(_analyze(paste, "--json"))
    assert [record["format"] for record in report["inputs"]] == ["ibstat", "ibstatus"]
    assert {(p["device"], p["rate_text"]) for p in report["fabric"]["ib_ports"]} == {("mlx5_0", "200"), ("mlx5_1", "200")}
    assert "Inputs:\n  {0}: ibstat\n  {0}: ibstatus".format(paste) in _analyze(paste, "--details")


def test_ibstatus_then_ibstat_keeps_the_ibstat_blocks(tmp_path: Path) -> None:
    cut = PASTE.index("Infiniband device 'mlx5_0'")
    paste = tmp_path / "paste.txt"
    paste.write_text(PASTE[cut:] + PASTE[:cut])
    report = json.loads(_analyze(paste, "--json"))
    assert [record["format"] for record in report["inputs"]] == ["ibstatus", "ibstat"]
    assert [(f, d, line) for f, d, _, _, _, _, line in _ports(paste.read_text())] == [
        ("ibstatus", "mlx5_0", 5), ("ibstatus", "mlx5_1", 14), ("ibstat", "mlx5_0", 26), ("ibstat", "mlx5_1", 47)]


def test_one_ibstat_output_stays_one_section() -> None:
    """The next `CA '...'` block of an ibstat output continues it (the registry's `repeats`)."""
    for name in ("ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt", "ibstat-mlx4-tabs-ibwarn-two-ports-rdma-core847.txt",
                 "ibstatus-4x-edr-ib-tabs-ucx-guide.txt"):
        parsed = list(parse_evidence(Evidence(name=name, data=(FABRIC / name).read_bytes())))
        assert len([p for p in parsed if p.spec is not None]) == 1, name
