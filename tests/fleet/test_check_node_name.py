"""`k3diag check --from FILE` names the node as an SRE would: the host name the evidence holds, else the
file's name (not the folders it was saved under), and says when the name is only the file's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from k3diag.cli import app

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "nvidia" / "topo-m-2gpu-nv2-numa-na.txt"
BUNDLE = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"
SCHEMA = json.loads((REPO / "k3diag" / "data" / "schema" / "report.schema.json").read_text())


def _check(*args: str) -> str:
    result = CliRunner().invoke(app, ["check", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.stdout


def test_a_file_without_a_host_name_is_named_by_its_file_name_and_says_so(tmp_path: Path) -> None:
    saved = tmp_path / "shared" / "k3diag" / "2026-12-01"
    saved.mkdir(parents=True)
    topo = saved / "node7-topo.txt"
    shutil.copy(TOPO, topo)
    lines = _check("--from", str(topo)).splitlines()
    assert lines[0] == "k3diag check node7-topo.txt: OK: no failure or warning (0 failures, 0 warnings)", lines
    assert lines[1] == (f"  node: node7-topo.txt is the name of the input file {topo}, not a host name: the evidence "
                        "names no host; give --node NAME to name the node")
    assert str(tmp_path) not in _check("--from", str(topo), "--format", "nagios").split(" | ")[0]
    report = json.loads(_check("--from", str(topo), "--format", "json"))
    jsonschema.validate(report, SCHEMA)
    shape = report["shape"]
    assert (shape["node"], shape["node_from"], shape["source"]) == ("node7-topo.txt", "input-name", str(topo))
    assert {"subject": "node", "level": "info", "message": lines[1][len("  node: "):]} in report["notes"]


def test_a_bundle_is_named_by_its_host_and_a_bundle_file_without_one_by_its_name(tmp_path: Path) -> None:
    lines = _check("--from", str(BUNDLE)).splitlines()
    assert lines[0].startswith("k3diag check host-1: OK: ") and not lines[1].startswith("  node:"), lines
    report = json.loads(_check("--from", str(BUNDLE), "--format", "json"))
    assert (report["shape"]["node"], report["shape"]["node_from"]) == ("host-1", "hostname")
    assert not [n for n in report["notes"] if n["subject"] == "node"]
    named = tmp_path / "gpu007.json"
    named.write_text(TOPO.read_text())  # a saved output with a misleading suffix still gets a short name
    assert _check("--from", str(named)).startswith("k3diag check gpu007: ")


def test_node_option_names_the_node_and_says_nothing_more() -> None:
    lines = _check("--from", str(TOPO), "--node", "gpu042").splitlines()
    assert lines[0].startswith("k3diag check gpu042: OK") and not lines[1].startswith("  node:"), lines
    report = json.loads(_check("--from", str(TOPO), "--node", "gpu042", "--format", "json"))
    assert (report["shape"]["node"], report["shape"]["node_from"]) == ("gpu042", "node-option")
