"""`k3diag check --format ...` over the real fixture bundles: what each fleet tool would read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"
GOOD = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"
SERIES = re.compile(r'^(?P<name>[a-z0-9_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$')


def run(*args: str):
    return CliRunner().invoke(app, ["check", *args])


def test_text_names_the_failure_and_its_evidence() -> None:
    result = run("--from", str(BAD), "--node", "gpu004")
    assert result.exit_code == 2
    first = result.stdout.splitlines()[0]
    assert first == "k3diag check gpu004: FAIL: pcie-width-below-max GPU2: GPU2 link runs at x8 of x16"
    assert "nvmlDeviceGetCurrPcieLinkWidth=8" in result.stdout
    assert "None" not in result.stdout


def test_nagios_line_and_perfdata() -> None:
    result = run("--from", str(BAD), "--node", "gpu004", "--format", "nagios")
    assert result.exit_code == 2
    line = result.stdout.strip()
    assert line.startswith("K3DIAG CRITICAL - gpu004: pcie-width-below-max GPU2")
    assert re.search(r"\| failures=1;;;0 warnings=\d+;;;0 duration=[\d.]+s;;;0;30$", line)
    ok = run("--from", str(GOOD), "--node", "gpu001", "--format", "nagios")
    assert ok.exit_code == 0 and ok.stdout.startswith("K3DIAG OK - gpu001: no failure or warning")


def test_npd_maps_to_zero_one_two_with_a_short_first_line(tmp_path: Path) -> None:
    bad = run("--from", str(BAD), "--format", "npd")
    assert bad.exit_code == 1  # NonOK
    assert bad.stdout.splitlines() == ["FAIL pcie-width-below-max GPU2: GPU2 link runs at x8 of x16"]
    assert len(bad.stdout.splitlines()[0]) < 80
    good = run("--from", str(GOOD), "--format", "npd")
    assert good.exit_code == 0 and good.stdout.startswith("OK ")
    empty = tmp_path / "empty.txt"
    empty.write_text("nothing a tool printed\n")
    unknown = run("--from", str(empty), "--format", "npd")
    assert unknown.exit_code == 2  # Unknown
    assert unknown.stdout.startswith("UNKNOWN ") and len(unknown.stdout.splitlines()[0]) < 80


def test_nhc_prints_one_error_line_on_failure_and_nothing_on_success() -> None:
    bad = run("--from", str(BAD), "--format", "nhc", "--fail-on", "fail")
    assert bad.exit_code == 2
    assert bad.stdout == "ERROR: k3diag: pcie-width-below-max GPU2: GPU2 link runs at x8 of x16\n"
    good = run("--from", str(GOOD), "--format", "nhc", "--fail-on", "fail")
    assert good.exit_code == 0 and good.stdout == ""


def _series(text: str) -> list[tuple[str, dict[str, str], str]]:
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SERIES.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group("labels") or ""))
        out.append((match.group("name"), labels, match.group("value")))
    return out


def test_prom_file_is_written_atomically_with_the_metrics_the_issue_names(tmp_path: Path) -> None:
    target = tmp_path / "k3diag.prom"
    result = run("--from", str(BAD), "--format", "prom", "--prom-file", str(target))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert [p.name for p in tmp_path.iterdir()] == ["k3diag.prom"]  # no temporary file left behind
    samples = _series(target.read_text())
    names = {name for name, _, _ in samples}
    for wanted in ("k3diag_check_success", "k3diag_findings", "k3diag_finding", "k3diag_gpu_pcie_link_width",
                   "k3diag_gpu_pcie_link_width_max", "k3diag_gpu_pair_path_rank", "k3diag_last_run_timestamp_seconds",
                   "k3diag_build_info"):
        assert wanted in names, wanted
    keys = [(name, tuple(sorted(labels.items()))) for name, labels, _ in samples]
    assert len(keys) == len(set(keys)), "duplicate series"
    width = {labels["gpu"]: value for name, labels, value in samples if name == "k3diag_gpu_pcie_link_width"}
    assert width["2"] == "8" and width["0"] == "16"
    assert ("k3diag_check_success", {}, "0") in samples
    assert sum(1 for name, _, _ in samples if name == "k3diag_finding") <= 20
    assert any(labels == {"id": "pcie-width-below-max", "severity": "fail", "subject": "GPU2"}
               for name, labels, _ in samples if name == "k3diag_finding")
    pairs = {(labels["a"], labels["b"]): (labels["path"], value) for name, labels, value in samples
             if name == "k3diag_gpu_pair_path_rank"}
    assert len(pairs) == 28 and pairs[("GPU0", "GPU4")] == ("SYS", "5")


def test_json_carries_the_shape_fleet_reads() -> None:
    import jsonschema

    result = run("--from", str(BAD), "--node", "gpu004", "--format", "json")
    report = json.loads(result.stdout)
    jsonschema.validate(report, json.loads((REPO / "k3diag" / "data" / "schema" / "report.schema.json").read_text()))
    assert report["schema"] == "k3diag.report/1" and report["exit_code"] == 2
    shape = report["shape"]
    assert shape["node"] == "gpu004" and shape["state"] == "fail"
    assert shape["features"]["GPU2 PCIe width"] == "x8 of x16"
    assert "nvmlDeviceGetCurrPcieLinkWidth=8" in shape["evidence"]["GPU2 PCIe width"]
    assert report["check"]["deadline_s"] == 30.0 and report["check"]["timed_out"] is False


@pytest.mark.parametrize("args, message", [
    (["--format", "xml"], "--format must be one of text, json, nagios, npd, nhc, prom"),
    (["--expect", "/nonexistent/spec.toml"], "the spec /nonexistent/spec.toml does not exist"),
    (["--prom-file", "/nonexistent/dir/k3diag.prom"], "the folder /nonexistent/dir for --prom-file does not exist"),
])
def test_usage_errors_exit_64_with_a_sentence(args: list[str], message: str) -> None:
    result = run("--from", str(BAD), *args)
    assert result.exit_code == 64
    assert message in result.stderr


def test_expect_turns_a_spec_mismatch_into_a_failure(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text('[gpu]\ncount = 8\nmodel = "H100"\npcie_width = 16\n')
    result = run("--from", str(GOOD), "--expect", str(spec), "--format", "nhc")
    assert result.exit_code == 0 and result.stdout == ""
    spec.write_text('[gpu]\ncount = 16\n')
    result = run("--from", str(GOOD), "--expect", str(spec), "--format", "nhc")
    assert result.exit_code == 2
    assert result.stdout == "ERROR: k3diag: spec-mismatch gpu.count: gpu.count: expected 16, found 8\n"
    spec.write_text('[gpu]\ncolour = "green"\n')
    result = run("--from", str(GOOD), "--expect", str(spec))
    assert result.exit_code == 64 and "unknown key gpu.colour" in result.stderr


def test_a_wrong_command_line_under_nagios_is_an_unknown_status_line(tmp_path) -> None:
    # Nagios shows "(No output returned from plugin)" for an empty answer; its plugins answer UNKNOWN (3)
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    missing = tmp_path / "missing.tar.gz"
    nagios = subprocess.run([sys.executable, "-m", "k3diag", "check", "--from", str(missing), "--format", "nagios"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert nagios.returncode == 3
    assert nagios.stdout == f"K3DIAG UNKNOWN - k3diag check: {missing} does not exist; check the path given to --from\n"
    npd = subprocess.run([sys.executable, "-m", "k3diag", "check", "--from", str(missing), "--format", "npd"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert npd.returncode == 2 and npd.stdout.startswith("UNKNOWN ") and len(npd.stdout.rstrip("\n")) < 80
    text = subprocess.run([sys.executable, "-m", "k3diag", "check", "--from", str(missing)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert text.returncode == 64 and text.stdout == ""  # other formats keep the usage error


def test_a_failure_that_fail_on_never_lets_pass_says_why_it_passes() -> None:
    from k3diag.render.check_formats import render_nagios

    report = {"findings": [{"id": "pcie-width-below-max", "severity": "fail", "subjects": ["GPU2"],
                            "title": "GPU2 link runs at x8 of x16"}], "shape": {"node": "gpu004"}}
    line = render_nagios(report, 0, {"elapsed_s": 0.4, "deadline_s": 30})
    assert line.startswith("K3DIAG OK - gpu004: pcie-width-below-max GPU2: GPU2 link runs at x8 of x16 "
                           "(passes: --fail-on does not count it) | failures=1"), line


def test_an_option_click_refuses_under_nagios_is_an_unknown_status_line_too() -> None:
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for args, code, head in ((["--format", "nagios", "--bogus"], 3, "K3DIAG UNKNOWN - k3diag check: "),
                             (["--format=npd", "--deadline", "abc"], 2, "UNKNOWN k3diag check: ")):
        done = subprocess.run([sys.executable, "-m", "k3diag", "check", *args], capture_output=True, text=True,
                              timeout=120, env=env)
        assert done.returncode == code and done.stdout.startswith(head), (args, done.stdout, done.stderr)
        assert "Error" in done.stderr  # click's sentence stays on standard error
