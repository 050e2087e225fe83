"""`k3diag fleet` over a small fleet built from the real fixture bundles, and over check reports."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from k3diag.cli import app
REPO = Path(__file__).resolve().parents[2]
GOOD = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"
SCHEMA = json.loads((REPO / "k3diag" / "data" / "schema" / "fleet.schema.json").read_text())


def fleet(*args: str):
    return CliRunner().invoke(app, ["fleet", *args])


def test_terminal_names_the_outliers_what_differs_and_the_drain_list(fleet_dir: Path) -> None:
    result = fleet(str(fleet_dir))
    assert result.exit_code == 2, result.output
    out = result.stdout
    assert out.splitlines()[0] == "k3diag fleet: 7 nodes in 2 groups: 2 fail, 5 ok; 2 outliers"
    assert "drain (2): gpu004,l40s-01" in out
    assert "outliers: gpu[004,006]" in out
    assert "group 8x NVIDIA H100 80GB HBM3, 0 NICs: 6 nodes (1 fail, 5 ok): gpu[001-006]" in out
    assert "GPU3 PCIe width: x8 of x16 (majority x16 of x16 on 5 of 6)" in out
    assert "evidence: gpu004:evidence/nvml-readings.json: GPU3 nvmlDeviceGetCurrPcieLinkGeneration=5" in out
    assert "driver version: 550.54.15 (majority 535.129.03 on 5 of 6)" in out
    assert "FAIL pcie-width-below-max: 2 nodes: gpu004,l40s-01" in out
    assert "one node: nothing to compare it with" in out
    assert "None" not in out


def test_json_follows_the_documented_schema(fleet_dir: Path) -> None:
    result = fleet(str(fleet_dir), "--json")
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["drain"] == {"hosts": "gpu004,l40s-01", "nodes": 2}
    group = report["groups"][0]
    assert group["hosts"] == "gpu[001-006]" and group["majority"]["topology"]["nodes"] == 6
    outliers = {o["node"]: o["differences"] for o in group["outliers"]}
    assert set(outliers) == {"gpu004", "gpu006"}
    width = next(d for d in outliers["gpu004"] if d["feature"] == "GPU3 PCIe width")
    assert width["value"] == "x8 of x16" and width["majority"] == "x16 of x16" and width["majority_nodes"] == 5
    assert "nvmlDeviceGetCurrPcieLinkWidth=8" in width["evidence"]


def test_check_reports_and_bundles_mix_and_a_bad_file_is_named(tmp_path: Path, fleet_dir: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in ("gpu001", "gpu002", "gpu003", "gpu004"):
        bundle = fleet_dir / name
        result = CliRunner().invoke(app, ["check", "--from", str(bundle), "--node", name, "--format", "json"])
        (reports / f"{name}.json").write_text(result.stdout)
    (reports / "broken.json").write_text("{not json")
    result = fleet(str(reports), "--json")
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["totals"]["nodes"] == 4 and report["drain"]["hosts"] == "gpu004"
    assert any("broken.json is not JSON" in item["problem"] for item in report["unreadable"])
    diff = next(d for g in report["groups"] for o in g["outliers"] if o["node"] == "gpu004" for d in o["differences"]
                if d["feature"] == "GPU3 PCIe width")
    assert "nvmlDeviceGetCurrPcieLinkWidth=8" in diff["evidence"]  # the evidence line survived the JSON report


def test_markdown_and_html_are_written(tmp_path: Path, fleet_dir: Path) -> None:
    md, html = tmp_path / "fleet.md", tmp_path / "fleet.html"
    result = fleet(str(fleet_dir), "--md", str(md), "--html", str(html))
    assert result.exit_code == 2
    text = md.read_text()
    assert "**Drain (2):** `gpu004,l40s-01`" in text
    assert "| gpu004 | GPU3 PCIe width | x8 of x16 | x16 of x16 |" in text
    page = html.read_text()
    assert page.count('class="node') == 7 and "<script" not in page
    assert 'data-state="fail"' in page and ">gpu004</th>" in page


def test_no_majority_blames_nobody(tmp_path: Path, node_maker) -> None:
    folder = tmp_path / "pair"
    folder.mkdir()
    node_maker(folder, "a1")
    node_maker(folder, "a2", driver="550.54.15")
    report = json.loads(fleet(str(folder), "--json").stdout)
    group = report["groups"][0]
    assert group["outliers"] == []
    split = next(s for s in group["split"] if s["feature"] == "driver version")
    assert {v["value"] for v in split["values"]} == {"535.129.03", "550.54.15"}


def test_nothing_readable_exits_3_with_a_sentence(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    result = fleet(str(tmp_path / "notes.txt"))
    assert result.exit_code == 3
    assert f"{tmp_path / 'notes.txt'} is not JSON" in result.stdout
    assert "no node report could be read" in result.stderr


def test_a_path_that_does_not_exist_is_a_usage_error(tmp_path: Path, fleet_dir: Path) -> None:
    result = fleet(str(fleet_dir), str(tmp_path / "missing"))
    assert result.exit_code == 64
    assert result.stderr == f"k3diag fleet: {tmp_path / 'missing'} does not exist; check the path\n"


def test_many_reports_through_the_process_pool(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check", "--from", str(GOOD), "--node", "x", "--format", "json"])
    report = json.loads(result.stdout)
    folder = tmp_path / "many"
    folder.mkdir()
    for number in range(1, 101):
        report["shape"]["node"] = f"n{number:03d}"
        if number == 77:
            report["shape"]["features"]["GPU5 PCIe width"] = "x4 of x16"
            report["shape"]["evidence"]["GPU5 PCIe width"] = "n077:nvml-readings.json: GPU5 width x4"
        (folder / f"n{number:03d}.json").write_text(json.dumps(report))
        if number == 77:
            report["shape"]["features"]["GPU5 PCIe width"] = "x16 of x16"
    result = fleet(str(folder), "--workers", "2", "--json")
    out = json.loads(result.stdout)
    assert out["totals"]["nodes"] == 100 and out["outlier_hosts"] == "n077"
    assert out["groups"][0]["hosts"] == "n[001-100]"


def test_a_report_of_several_machines_counts_each_machine(tmp_path: Path, fleet_dir: Path) -> None:
    """`analyze --json` over inputs of several machines holds one report per machine in machines[]."""
    analyzed = CliRunner().invoke(app, ["analyze", str(fleet_dir / "gpu001"), str(fleet_dir / "l40s-01"), "--json"])
    combined = json.loads(analyzed.stdout)
    machines = combined.get("machines") or []
    assert len(machines) >= 2
    path = tmp_path / "several.json"
    path.write_text(analyzed.stdout)
    report = json.loads(fleet(str(path), "--json").stdout)
    jsonschema.validate(report, SCHEMA)
    names = sorted(node["node"] for node in report["nodes"])
    assert report["totals"]["nodes"] == len(machines)
    expected = sorted((m.get("identity") or {}).get("hostname") or m["host"].get("hostname") or f"several#{n}"
                      for n, m in enumerate(machines, 1))
    assert names == expected


def test_a_report_that_cannot_be_read_keeps_the_fleet_from_passing(tmp_path: Path) -> None:
    """Two healthy nodes and one report cut short: the broken node was judged by nobody, so the fleet
    exits 1 (as for an unknown node), not 0, and says which input it could not read."""
    topo = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia" / "topo-m-h100-nv18-narrow.txt"
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in ("gpu001", "gpu002"):
        result = CliRunner().invoke(app, ["check", "--from", str(topo), "--node", name, "--format", "json"])
        assert result.exit_code == 0, result.stdout
        (reports / f"{name}.json").write_text(result.stdout)
    (reports / "gpu003.json").write_text('{"schema": "k3diag.report/1", "findings": [')
    result = fleet(str(reports))
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == "k3diag fleet: 2 nodes in 1 group: 2 ok; 0 outliers; 1 input not read"
    assert "gpu003.json is not JSON" in result.stdout
    report = json.loads(fleet(str(reports), "--json").stdout)
    assert report["exit_code"] == 1 and report["totals"]["unreadable"] == 1


def test_json_nested_past_the_decoder_is_a_sentence_not_an_exception_name(tmp_path) -> None:
    import subprocess
    import sys

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    result = subprocess.run([sys.executable, "-m", "k3diag", "fleet", str(deep)], capture_output=True, text=True,
                            timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    text = result.stdout + result.stderr
    assert f"{deep} nests its JSON deeper than a k3diag report does" in text, text
    assert "RecursionError" not in text and "Traceback" not in text


def test_a_damaged_stored_shape_is_read_in_part_and_the_other_nodes_still_summed(tmp_path: Path, node_maker) -> None:
    # `check --format json` stores the node's shape in its report; one finding whose severity was a number
    # ended `k3diag fleet` for every node (AttributeError: 'int' object has no attribute 'upper')
    bundles, reports = tmp_path / "bundles", tmp_path / "reports"
    bundles.mkdir()
    reports.mkdir()
    for name in ("gpu001", "gpu002"):
        node = node_maker(bundles, name, width_gpu3=8 if name == "gpu002" else 16)
        done = CliRunner().invoke(app, ["check", "--from", str(node), "--format", "json", "--node", name,
                                        "--fail-on", "never"])
        report = json.loads(done.stdout)
        if name == "gpu002":
            assert report["shape"]["findings"][0]["severity"] == "fail"
            report["shape"]["findings"][0]["severity"] = 10**30
            report["shape"]["state"] = ["fail"]
        (reports / f"{name}.json").write_text(json.dumps(report))
    result = fleet(str(reports))
    out = result.stdout
    assert out.splitlines()[0] == "k3diag fleet: 2 nodes in 1 group: 1 unknown, 1 ok; 0 outliers; 1 read in part"
    assert f"gpu002: the shape stored in {reports / 'gpu002.json'} has fields k3diag does not write (state, " \
           "findings); they were left out, the rest compared" in out
    assert "GPU3 PCIe width: x8 of x16" in out or "no majority for GPU3 PCIe width" in out
    assert result.exit_code == 1
    report = json.loads(fleet(str(reports), "--json").stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["damaged"] == [{"node": "gpu002", "source": str(reports / "gpu002.json"),
                                  "fields": ["state", "findings"]}]
    assert report["totals"]["damaged"] == 1


def test_a_report_body_with_a_value_of_another_type_names_what_to_give_instead(tmp_path: Path, node_maker) -> None:
    # an `analyze --json` report (no stored shape) whose `topology` is a list: the node cannot be compared,
    # and the sentence says why and what would do, not only the exception ("could not be analyzed (...)")
    bundles, reports = tmp_path / "bundles", tmp_path / "reports"
    bundles.mkdir()
    reports.mkdir()
    for name in ("gpu001", "gpu002"):
        node = node_maker(bundles, name)
        report = json.loads(CliRunner().invoke(app, ["analyze", str(node), "--json"]).stdout)
        if name == "gpu002":
            report["topology"] = ["not", "an", "object"]
        (reports / f"{name}.json").write_text(json.dumps(report))
    result = fleet(str(reports))
    assert result.stdout.splitlines()[0] == "k3diag fleet: 1 node in 1 group: 1 ok; 0 outliers; 1 input not read"
    assert (f"  {reports / 'gpu002.json'} holds a value of a type k3diag does not write (AttributeError: 'list' "
            "object has no attribute 'get'), so its node was not compared; give its bundle, or the node's "
            "`k3diag check --format json` output") in result.stdout.splitlines()


def test_a_node_name_with_a_newline_puts_no_line_of_its_own_in_the_drain_list(tmp_path: Path, node_maker) -> None:
    # a report's node (stored shape) or host name (report body) is the file's to choose: with a newline in it,
    # `drain (1): gpu002` was followed by a line of the file's choosing
    bundles, reports = tmp_path / "bundles", tmp_path / "reports"
    bundles.mkdir()
    reports.mkdir()
    node = node_maker(bundles, "gpu002", width_gpu3=8)
    stored = json.loads(CliRunner().invoke(app, ["check", "--from", str(node), "--format", "json", "--node", "gpu002",
                                                 "--fail-on", "never"]).stdout)
    stored["shape"]["node"] = "gpu002\nscontrol update nodename=ALL state=down"
    (reports / "stored.json").write_text(json.dumps(stored))
    body = json.loads(CliRunner().invoke(app, ["analyze", str(node), "--json"]).stdout)
    body["host"]["hostname"] = "gpu003\nscontrol update nodename=ALL state=down"
    (reports / "body.json").write_text(json.dumps(body))
    out = fleet(str(reports)).stdout
    assert "scontrol" not in out
    # the stored shape's name left out, the report's own host name names it; the body's, its file
    assert "drain (2): body,gpu002\n" in out
    assert "read in part:\n  gpu002: the shape stored in" in out and "(node); they were left out" in out
