"""Every report k3diag prints validates against the shipped JSON Schema."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from k3diag.analyze.pipeline import analyze_machine
from k3diag.collect.host import collect_host
from k3diag.inputs import load_machine
from k3diag.join.build import build_machine
from k3diag.render.json_report import build_report, dumps

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# Folders that are trees to collect from, not saved outputs.
NOT_OUTPUTS = {"hostroot", "sysfs", "bundles", "nvml", "amdsmi"}


def _schema() -> dict:
    text = resources.files("k3diag").joinpath("data/schema/report.schema.json").read_text()
    return json.loads(text)


def _saved_outputs() -> list[Path]:
    files = []
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.name.startswith(".") or path.name == "SOURCES.md":
            continue
        if set(path.relative_to(FIXTURES).parts) & NOT_OUTPUTS:
            continue
        if path.suffix in (".py",):
            continue
        files.append(path)
    return files


def _report_for(machine) -> dict:
    analysis = analyze_machine(machine)
    report = build_report(machine, analysis.findings, analysis.recommendation, analysis.verdict.to_json(), 0)
    return json.loads(dumps(report))


def test_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(_schema())


def test_no_gpu_host_report_validates(fixtures_dir: Path) -> None:
    machine = build_machine([collect_host(fixtures_dir / "hostroot" / "dual_socket")])
    jsonschema.validate(_report_for(machine), _schema())


@pytest.mark.parametrize("path", _saved_outputs(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_report_validates(path: Path) -> None:
    machine, _ = load_machine([path])
    report = _report_for(machine)
    jsonschema.validate(report, _schema())
    # no input may be silently dropped
    assert report["inputs"], path


def test_schema_rejects_a_broken_report(fixtures_dir: Path) -> None:
    machine = build_machine([collect_host(fixtures_dir / "hostroot" / "dual_socket")])
    report = _report_for(machine)
    report["findings"] = [{"id": "x", "severity": "fatal"}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, _schema())


def test_terminal_prints_input_text_with_brackets_literally() -> None:
    import io

    from k3diag.model.machine import Machine
    from k3diag.model.topology import Link
    from k3diag.render.terminal import make_console, render

    machine = Machine()
    machine.gpu(0).name = "[bold]evil[/x]"
    machine.gpu(1).bus_id = "[/]"
    machine.add_link(Link("GPU0", "GPU1", "PIX"))
    buffer = io.StringIO()
    render(analyze_machine(machine), make_console(buffer), "title [/]")
    out = buffer.getvalue()
    assert "[bold]evil[/x]" in out and "[/]" in out


def test_a_log_with_many_communicators_stays_readable(tmp_path: Path) -> None:
    import io

    from k3diag.render.terminal import MAX_NCCL_RUNS_SHOWN, make_console, render

    lines = []
    # ten jobs on ten hosts, each one 2-rank communicator (line format of NCCL 2.19+ Init COMPLETE)
    for job in range(10):
        host = f"node-{job:02d}"
        for rank in range(2):
            lines.append(f"{host}:{100 + job}:{200 + rank} [{rank}] NCCL INFO comm 0x55{job}0{rank}aa rank {rank} "
                         f"nranks 2 cudaDev {rank} nvmlDev {rank} busId {rank + 1}8000 commId 0x{job + 1:016x} "
                         "- Init COMPLETE")
        lines.append(f"{host}:{100 + job}:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM")
    log = tmp_path / "many.log"
    log.write_text("node-00:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n" + "\n".join(lines) + "\n")
    machine, _ = load_machine([log])
    assert len(machine.nccl) > MAX_NCCL_RUNS_SHOWN
    buffer = io.StringIO()
    render(analyze_machine(machine), make_console(buffer), "t")
    summary = buffer.getvalue()
    assert "NCCL: NCCL 2.21.5+cuda12.4; 10 communicators, up to 2 ranks; connection lines: 10 P2P\n" in summary
    assert "no GPU inventory" in summary
    buffer = io.StringIO()
    render(analyze_machine(machine), make_console(buffer), "t", details=True)
    out = buffer.getvalue()
    assert out.count("NCCL 2.21.5") == MAX_NCCL_RUNS_SHOWN + 1  # the summary line, then the runs listed
    assert f"and {len(machine.nccl) - MAX_NCCL_RUNS_SHOWN} more communicators" in out
    assert "no GPU inventory" in out


def test_no_gpu_host_lists_its_pci_devices() -> None:
    import io

    from k3diag.model.machine import Machine
    from k3diag.model.pci import PciDevice
    from k3diag.render.terminal import make_console, render

    machine = Machine(live=True)
    machine.pci.append(PciDevice(bdf="0000:00:03.0", description="Ethernet controller: [1af4:1041]",
                                 vendor_id="1af4", device_id="1041", driver="virtio-pci"))
    buffer = io.StringIO()
    render(analyze_machine(machine), make_console(buffer), "t")
    out = buffer.getvalue()
    assert "PCI devices (no GPU among them was usable; - = not in the evidence):" in out
    assert "0000:00:03.0" in out and "virtio-pci" in out and "1af4:1041" in out
    # NUMA and link were not in the evidence: the legend's `-`, never `?` or `None`.
    row = next(line for line in out.splitlines() if "0000:00:03.0" in line)
    assert re.search(r"virtio-pci\s+-\s+-\s*$", row), row
    assert "?" not in out and "None" not in out


def test_every_top_level_field_is_in_the_schema_and_the_field_guide(fixtures_dir: Path) -> None:
    """A field a script can see must be declared in the JSON Schema and described in docs/report-schema.md
    (the project's rule for new JSON fields): an undeclared field passes validation unnoticed."""
    machine, _ = load_machine([fixtures_dir / "bundles" / "bad-8x-pcie-dual-socket"])
    report = _report_for(machine)
    joint, _ = load_machine([FIXTURES.parent / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"])
    fields = set(report) | set(_report_for(joint))
    assert {"host", "platform", "pcie_paths", "nccl_runs", "exit_code"} <= fields
    guide = (FIXTURES.parent / "docs" / "report-schema.md").read_text()
    undeclared = sorted(name for name in fields if name not in _schema()["properties"])
    undocumented = sorted(name for name in fields if f"| `{name}" not in guide)
    assert undeclared == [] and undocumented == []


def test_a_report_of_several_machines_has_a_whole_verdict() -> None:
    """`verdict.status` is in every report: with two machines the top-level verdict has no joint level
    but still says the exit status in words (the mix is at least a warning), its lead and the same keys."""
    from typer.testing import CliRunner

    from k3diag.cli import app

    h100 = FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt"
    v100 = FIXTURES / "nvidia" / "smi-q-v100-410-old-layout.txt"
    result = CliRunner().invoke(app, ["analyze", str(h100), str(v100), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    jsonschema.validate(report, _schema())
    verdict = report["verdict"]
    assert len(report["machines"]) == 2 and [m["verdict"]["status"] for m in report["machines"]] == ["ok", "ok"]
    assert set(verdict) == set(report["machines"][0]["verdict"])
    assert (verdict["level"], verdict["status"], verdict["lead"]) == ("unknown", "warn", "inputs-several-machines")
    assert verdict["missing"] == [] and verdict["plan"] is None
