"""Every report k3diag prints validates against the shipped JSON Schema."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from k3diag.analyze.pipeline import analyze_machine
from k3diag.collect.host import collect_host
from k3diag.inputs import load_machine
from k3diag.model.build import build_machine
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
