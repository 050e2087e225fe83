"""CollNet asked for (`NCCL_COLLNET_ENABLE=1`) and given up: NCCL's `Cannot initialize CollNet, using
point-to-point network instead`, with the SHARP plugin's reason, is one finding of its own (real log of
NVIDIA/nccl-tests issue #311), not two lines among "NCCL printed N warnings"."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

NCCL = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
FALLBACK = NCCL / "nccl-2.23.4-collnet-sharp-no-resource-fallback-excerpt.log"
HANG = NCCL / "nccl-2.23.4-collnet-sharp-4nodes-hang.log"


def _findings(path: Path) -> dict[str, dict]:
    report = json.loads(CliRunner().invoke(app, ["analyze", str(path), "--json"]).stdout)
    return {finding["id"]: finding for finding in report["findings"]}


def test_the_fallback_is_its_own_finding_with_the_request_and_the_plugins_reason_quoted() -> None:
    findings = _findings(FALLBACK)
    collnet = findings["nccl-collnet-fallback"]
    assert collnet["severity"] == "warn"
    assert collnet["title"] == ("CollNet (SHARP in-network reduction) could not start: NCCL uses the point-to-point "
                                "network instead")
    assert collnet["explanation"].startswith(
        "The job asks for CollNet (`NCCL_COLLNET_ENABLE set by environment to 1.`), and NCCL printed `Cannot "
        "initialize CollNet, using point-to-point network instead` 4 times. The network plugin says why: `NET/IB : "
        "SHARP coll init error: Cannot create SHARP job(-11)`.")
    assert [(ref["line"], ref["text"].split(" NCCL WARN ")[1]) for ref in collnet["evidence"]] == [
        (81, "Cannot initialize CollNet, using point-to-point network instead"),
        (77, "NET/IB : SHARP coll init error: Cannot create SHARP job(-11)")]
    assert "NCCL_COLLNET_ENABLE=0" in collnet["remedy"]


def test_the_plain_warnings_no_longer_list_what_the_finding_explains_and_count_traces_as_traces() -> None:
    warnings = _findings(FALLBACK)["nccl-warnings"]
    assert warnings["title"] == "NCCL printed 1 error trace"  # transport.cc:356 -> 2, not CollNet's own traces
    listed = json.dumps(warnings["data"]["messages"])
    assert "CollNet" not in listed and "SHARP" not in listed and "coll_net.cc" not in listed


def test_a_collnet_job_that_hangs_in_init_is_not_called_a_fallback() -> None:
    findings = _findings(HANG)
    assert "nccl-collnet-fallback" not in findings
    assert "nccl-init-incomplete" in findings


def test_the_collnet_connection_lines_reach_the_model_and_the_nccl_line() -> None:
    report = json.loads(CliRunner().invoke(app, ["analyze", str(FALLBACK), "--json"]).stdout)
    assert sorted((c["host"], c["rank"], c["direction"], c["via"], c["gdr"]) for c in report["nccl"]["collnet"]) == [
        ("gpu34", 0, "receive", "COLLNET/SHARP/1/GDRDMA", True), ("gpu36", 2, "receive", "COLLNET/SHARP/5/GDRDMA", True),
        ("gpu40", 4, "receive", "COLLNET/SHARP/0/GDRDMA", True), ("gpu41", 6, "receive", "COLLNET/SHARP/1/GDRDMA", True)]
    text = CliRunner().invoke(app, ["analyze", str(FALLBACK)]).stdout
    assert ("NCCL: NCCL 2.23.4+cuda12.4; 1 communicator, up to 8 ranks; connection lines: 6 NET, 4 P2P; CollNet lines "
            "from 4 ranks (COLLNET/SHARP)") in text


def test_a_log_cut_before_the_fallback_keeps_the_plugins_error_among_the_warnings(tmp_path: Path) -> None:
    lines = FALLBACK.read_text().splitlines()
    cut = tmp_path / "cut.log"  # the real log up to its first SHARP error, before NCCL says it gave CollNet up
    cut.write_text("\n".join(lines[:next(i for i, line in enumerate(lines) if "SHARP coll init error" in line) + 1]) + "\n")
    findings = _findings(cut)
    assert "nccl-collnet-fallback" not in findings
    listed = json.dumps(findings["nccl-warnings"]["data"]["messages"])
    assert "SHARP coll init error: Cannot create SHARP job(-11)" in listed
