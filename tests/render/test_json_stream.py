"""The JSON report is written as it is encoded: compact by default, indented on request, same document."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from k3diag.analyze.pipeline import analyze_machine
from k3diag.exit_codes import EXIT_USAGE
from k3diag.inputs import load_machine
from k3diag.model.pci import PciDevice
from k3diag.render import json_report

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"


def _report(paths: list[Path]) -> dict:
    machine, _ = load_machine(paths)
    analysis = analyze_machine(machine)
    return json_report.build_report(machine, analysis.findings, analysis.recommendation,
                                    analysis.verdict.to_json(), 1)


def test_streamed_compact_report_is_the_same_document_as_the_indented_one() -> None:
    report = _report([EXAMPLE])
    out = io.StringIO()
    json_report.write(report, out)
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1  # one line
    assert json.loads(text) == json.loads(json_report.dumps(report))
    assert json.loads(text)["schema"] == "k3diag.report/1"
    assert '", "' not in text[:200] and '": ' not in text[:200]  # no padding spaces


def test_long_lists_and_odd_values_stream_element_by_element_to_the_same_values() -> None:
    report = {"schema": "x", "pci": [PciDevice(bdf=f"0000:{i // 256:02x}:{i % 32:02x}.{i % 8}") for i in range(600)],
              "nested": {"runs": [{"n": i, "tags": {"b", "a"} if i == 3 else (1, 2)} for i in range(700)]},
              "exactly": list(range(512)), "one_more": list(range(257)),
              "numbers": {1: "int key", "nan": float("inf")}, "text": "ü\u2028"}
    out = io.StringIO()
    json_report.write(report, out)
    assert json.loads(out.getvalue()) == json.loads(json_report.dumps(report))
    assert json.loads(out.getvalue())["pci"][599]["bdf"] == "0000:02:17.7"


def test_indent_option_writes_the_report_for_people() -> None:
    report = _report([EXAMPLE])
    out = io.StringIO()
    json_report.write(report, out, indent=2)
    assert out.getvalue().startswith('{\n  "schema": "k3diag.report/1"')
    assert json.loads(out.getvalue()) == json.loads(json_report.dumps(report))


@pytest.mark.parametrize("flags, lines", [(["--json"], 1), (["--json-indent", "2"], None)])
def test_cli_json_is_compact_unless_indent_is_asked(flags: list[str], lines: int | None) -> None:
    done = subprocess.run([sys.executable, "-m", "k3diag", "analyze", str(EXAMPLE), *flags, "--fail-on", "never"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema"] == "k3diag.report/1" and report["topology"]["gpus"]
    if lines is not None:
        assert done.stdout.count("\n") == lines
    else:
        assert done.stdout.count("\n") > 100 and '\n  "tool": {' in done.stdout


def test_cli_refuses_an_absurd_indent() -> None:
    done = subprocess.run([sys.executable, "-m", "k3diag", "analyze", str(EXAMPLE), "--json-indent", "99"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == EXIT_USAGE and "between 0 and 8" in done.stderr


class _WriteSizes(io.StringIO):
    """A stream that notes its largest single write: the most text the encoder held at once."""

    largest = 0

    def write(self, text: str) -> int:
        self.largest = max(self.largest, len(text))
        return super().write(text)


def test_a_few_big_runs_are_written_in_pieces_not_as_one_encoded_list() -> None:
    # `nccl_runs[]`: 16 communicators at most, but each of an 8,192-rank job holds ~22,000 connections. The
    # short list used to be encoded in one call: 21.6 MB of text at once, 42 MiB over the command's peak.
    connection = {"channel": 0, "src_rank": 1, "dst_rank": 2, "via": "P2P/CUMEM/read", "transport": "P2P",
                  "first": {"input": "job.log", "line": 7, "text": "x" * 60}}
    runs = [{"nranks": 8192, "connections": [dict(connection, src_rank=i) for i in range(5000)],
             "rings": [{"channel": c, "order": list(range(300))} for c in range(4)]} for _ in range(3)]
    report = {"schema": "k3diag.report/1", "nccl": runs[0], "nccl_runs": runs, "gpus": [[1, 2], {"a": []}]}
    out = _WriteSizes()
    json_report.write(report, out)
    assert json.loads(out.getvalue()) == json.loads(json_report.dumps(report))
    whole_run = len(json_report.dumps(runs[0], indent=None))
    assert whole_run > 500_000
    assert out.largest < 100_000, f"one write of {out.largest:,} characters (a run is {whole_run:,})"


@pytest.mark.parametrize("indent", [None, 2, 0])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_machines_are_made_one_at_a_time_as_they_are_written(indent: int | None, count: int) -> None:
    # `machines[]` of a fleet: 5,000 full reports held at once were ~200 MiB over the command's peak
    made: list[int] = []
    out = _WriteSizes()

    def entries():
        for number in range(count):
            made.append(len(out.getvalue()))  # how much was written when this one was made
            yield {"machine": number, "gpus": [{"index": i, "name": "H200"} for i in range(8)], "nan": float("nan")}

    report = {"schema": "k3diag.report/1", "machines": json_report.StreamedList(entries), "after": [1]}
    json_report.write(report, out, indent=indent)
    whole = {"schema": "k3diag.report/1", "machines": list(entries()), "after": [1]}
    assert out.getvalue() == (json_report.dumps(whole, indent=indent) if indent is not None
                              else json_report.dumps(whole, indent=None).replace(", ", ",").replace(": ", ":")) + "\n"
    assert json.loads(out.getvalue())["machines"][count - 1:] == ([] if not count else
                                                                  [json.loads(json_report.dumps(whole))["machines"][-1]])
    assert made[:count] == sorted(set(made[:count]))  # each made after the one before was written


def test_a_machine_entry_is_streamed_as_deep_as_a_whole_report() -> None:
    # each `machines[]` entry is a full report: its `nccl_runs[]` was two levels too deep to be streamed
    connection = {"channel": 0, "src_rank": 1, "dst_rank": 2, "via": "NET/IB/0/GDRDMA", "first": {"text": "y" * 60}}
    run = {"nranks": 8192, "connections": [dict(connection, src_rank=i) for i in range(5000)]}
    report = {"schema": "k3diag.report/1",
              "machines": json_report.StreamedList(lambda: ({"nccl": run, "nccl_runs": [run]} for _ in range(2)))}
    out = _WriteSizes()
    json_report.write(report, out)
    assert json.loads(out.getvalue())["machines"][1]["nccl_runs"][0]["connections"][4999]["src_rank"] == 4999
    assert out.largest < 100_000, f"one write of {out.largest:,} characters"


@pytest.mark.parametrize("indent", [0, 2, 4])
def test_indented_output_is_streamed_too_and_byte_for_byte_what_dumps_gives(indent: int) -> None:
    # `--json-indent` encoded each top-level member whole: `nccl_runs[]` of an 8,192-rank job at once
    connection = {"channel": 0, "src_rank": 1, "dst_rank": 2, "via": "P2P/CUMEM/read", "first": {"text": "z" * 60}}
    runs = [{"nranks": 8192, "connections": [dict(connection, src_rank=i) for i in range(3000)], "empty": {},
             "none": [], "keys": {1: "int key"}, "odd": [float("inf"), (1, 2)]} for _ in range(3)]
    report = {"schema": "k3diag.report/1", "nccl_runs": runs, "pci": [PciDevice(bdf=f"0000:00:{i % 32:02x}.0")
                                                                      for i in range(300)], "flat": list(range(600))}
    for value in (report, _report([EXAMPLE])):
        out = _WriteSizes()
        json_report.write(value, out, indent=indent)
        assert out.getvalue() == json_report.dumps(value, indent=indent) + "\n"
    out = _WriteSizes()
    json_report.write(report, out, indent=indent)
    assert out.largest < 200_000, f"one write of {out.largest:,} characters"
