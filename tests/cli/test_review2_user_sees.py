"""A second SRE's review of the commands run on saved evidence: each test is a defect that made the first
line (or the JSON beside it) say more than the evidence does, run as a user runs it, asserting what they read."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"


def _text(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout


def _json(*args: str) -> tuple[int, dict]:
    code, out = _text(*args, "--json")
    return code, json.loads(out)


def _finding(report: dict, finding_id: str) -> dict:
    return next(f for f in report["findings"] if f["id"] == finding_id)


def test_peer_access_cut_short_counts_only_the_pairs_it_shows() -> None:
    # The output stops after `Device=1 CANNOT Access Peer Device=0`: it shows the access of the 7 pairs with
    # GPU0 and nothing of the other 21. "7 of 28 GPU pairs" told the reader the 21 others can reach each other.
    path = FIXTURES / "bench" / "p2pbw-8x2080ti-cannot-access-head.txt"
    _, out = _text("analyze", str(path))
    verdict = out.splitlines()[1]
    assert "7 of 28 GPU pair(s)" not in verdict
    assert verdict.startswith("Verdict [WARN]: CUDA refuses peer access for 7 GPU pairs: 0-1, 0-2, 0-3, 0-4, 0-5, "
                              "0-6, 0-7 (the output shows no other pair: 21 of 28 unknown).")
    _, report = _json("analyze", str(path))
    finding = _finding(report, "p2p-cannot-access-peer")
    assert finding["data"]["pairs_unknown"] == 21
    # A complete list still counts every pair.
    _, mixed = _json("analyze", str(FIXTURES / "bench" / "p2pbw-6x50xx-mixed-cannot-access-head.txt"))
    title = _finding(mixed, "p2p-cannot-access-peer")["title"]
    assert "(the output shows no other pair: 3 of 15 unknown)" in title  # 3-4, 3-5 and 4-5 were cut off


def test_a_reader_that_stops_early_does_not_change_the_exit_code() -> None:
    # `k3diag analyze BUNDLE | head -1` under `set -o pipefail`: click turned the broken pipe into exit 1,
    # which reads as "warnings" for a machine whose verdict is FAIL (2) or OK (0).
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1")
    for path, verdict_code in ((EXAMPLE, 2), (FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt", 0)):
        process = subprocess.Popen([sys.executable, "-m", "k3diag", "analyze", str(path), "--details"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        process.stdout.close()  # the reader is gone before k3diag writes its first line
        _, stderr = process.communicate(timeout=60)
        assert (process.returncode, stderr) == (verdict_code, b"")


def test_advise_counts_one_pipeline_hand_off_in_the_singular() -> None:
    code, out = _text("advise", "--model", "k3", "--gpu", "mi355x", "--count", "8")
    assert code == 0
    assert ("- PP2: 1 hand-off of the hidden state and 8 AttnRes block summaries (129,024 B) over 54 GB/s"
            in out.splitlines())
    _, four = _text("advise", "--model", "k3", "--gpu", "mi355x", "--count", "8", "--tp", "2", "--pp", "4")
    assert "- PP4: 3 hand-offs of the hidden state" in four


def test_check_from_a_bundle_names_the_node_its_manifest_names() -> None:
    # The example bundle's manifest names its host and no file in it does: `check --from` named the node
    # after the path given, so `fleet` over such reports drained "/path/to/dual-socket-8gpu-pcie".
    code, out = _text("check", "--from", str(EXAMPLE), "--format", "nagios")
    assert code == 2
    assert out.startswith("K3DIAG CRITICAL - dual-socket-8gpu: pcie-width-below-max GPU2: GPU2 link runs at x8 of x16 |")
    _, report = _json("analyze", str(EXAMPLE))
    assert report["host"]["hostname"] == "dual-socket-8gpu"
    # A bundle mixing four machines: the node is the machine the audit answers for, under the manifest's name.
    _, out = _text("check", "--from", str(FIXTURES / "bundles" / "bad-8x-pcie-dual-socket"), "--format", "nagios")
    assert out.startswith("K3DIAG CRITICAL - host-2: pcie-width-below-max GPU2:")


def test_fleet_never_counts_another_machines_findings_in_a_mixed_bundle(tmp_path: Path) -> None:
    # bad-8x-pcie-dual-socket holds an L40S box's NVML readings plus an NCCL log of host sh9-machine-...,
    # a p2pBandwidthLatencyTest of host 2080ti-R01 and a key-less lspci. `analyze` and `audit` keep them
    # apart; `fleet` merged them all into host-2 and listed their warnings as host-2's.
    bundle = FIXTURES / "bundles" / "bad-8x-pcie-dual-socket"
    _, fleet = _json("fleet", str(bundle))
    counts = {c["id"]: c["hosts"] for c in fleet["finding_counts"]}
    assert counts == {"pcie-width-below-max": "host-2", "inputs-several-machines": "host-2"}
    _, out = _text("fleet", str(bundle))
    assert "p2p-cannot-access-peer" not in out and "nccl-same-host-pair-not-p2p" not in out
    # The same node replayed through `check --from ... --format json` and then `fleet`: the same answer.
    _, check_report = _text("check", "--from", str(bundle), "--format", "json")
    (tmp_path / "host-2.json").write_text(check_report)
    _, replayed = _json("fleet", str(tmp_path / "host-2.json"))
    assert replayed["drain"] == fleet["drain"] == {"hosts": "host-2", "nodes": 1}
    assert {c["id"]: c["hosts"] for c in replayed["finding_counts"]} == counts


def test_a_socket_run_seen_from_one_host_does_not_span_1_nodes() -> None:
    # The log holds the ranks of one (redacted) host; its NET/Socket connections reach rank 6 elsewhere.
    # "spans 1 nodes and NCCL sends inter-node data over TCP" contradicted itself.
    _, report = _json("analyze", str(FIXTURES / "nccl" / "nccl-2.1x-redacted-host-socket-2nodes.log"))
    explanation = _finding(report, "nccl-multinode-socket")["explanation"]
    assert "spans 1 nodes" not in explanation
    assert "spans more than one node (this log shows the ranks of 1 host; its NET connections reach ranks on " \
           "another) and NCCL sends inter-node data over TCP sockets" in explanation


def test_p2p_between_two_gpus_is_not_all_1_pairs() -> None:
    _, out = _text("analyze", str(FIXTURES / "amd" / "amd-smi-topology-json-links-doc-trailing-commas-ellipsis.txt"),
                   "--details")
    assert "all 1 pairs" not in out
    assert "P2P (capability not named in the paste): OK between the 2 GPUs" in out.splitlines()


def test_every_verdict_level_a_report_gives_is_documented_and_in_the_schema() -> None:
    # docs/report-schema.md promised `level: good|usable|poor|none`; reports said "faulty" and "unknown" too,
    # and "status" (what `Verdict [OK]` prints) was not documented at all: a script switching on the
    # documented values met values it was never told of, and the JSON Schema did not check the field.
    import jsonschema

    row = next(line for line in (REPO / "docs" / "report-schema.md").read_text().splitlines()
               if line.startswith("| `verdict` |"))
    schema = json.loads((REPO / "k3diag" / "data" / "schema" / "report.schema.json").read_text())
    cases = {
        "faulty": EXAMPLE,
        "unknown": FIXTURES / "nvidia" / "csv-l40s-8x-idle-gen1.txt",
        "good": FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt",
        "poor": FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt",
        "usable": FIXTURES / "nvidia" / "topo-m-4x4090-phb-trailing-prompt.txt",
    }
    for level, path in cases.items():
        _, report = _json("analyze", str(path))
        assert report["verdict"]["level"] == level, path
        assert f"`{level}`" in row
        assert f"`{report['verdict']['status']}`" in row
        jsonschema.validate(report, schema)
    report["verdict"]["level"] = "great"
    try:
        jsonschema.validate(report, schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the schema let an undocumented verdict level through")


def test_serving_load_of_one_request_per_second_is_singular() -> None:
    code, out = _text("serving", str(FIXTURES / "serving" / "vllm-bench-serve-qwen3vl-8b-1qps.json"))
    assert code == 3  # one run of unknown layout: nothing to rank
    assert "1 requests" not in out
    assert "layout unknown  1 request/s/replica  95.7/n/r/143.3" in out


def test_inputs_skipped_unread_are_not_called_unrecognized(tmp_path: Path) -> None:
    # A folder with one topo -m and a dangling link: the link is skipped unread, and "1 not recognized"
    # said k3diag had read it and found no format it knows.
    import shutil

    folder = tmp_path / "node"
    folder.mkdir()
    shutil.copy(FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt", folder)
    (folder / "dangling").symlink_to(tmp_path / "nowhere")
    _, out = _text("analyze", str(folder))
    assert "not recognized" not in out
    assert "Inputs: 1 read, 1 not used" in out.splitlines()
    assert f"  {folder}/dangling is a symbolic link and was not followed" in out.splitlines()


def test_check_of_unreadable_evidence_says_why_not_see_inputs(tmp_path: Path) -> None:
    # `check --from` a bundle cut short: "UNKNOWN: Nothing could be analyzed: ... (see Inputs)." pointed at an
    # Inputs section the check formats do not print, and the reason (the archive ends early) was nowhere.
    import io
    import tarfile

    archive = tmp_path / "node7.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(EXAMPLE, arcname="node7")
    archive.write_bytes(buffer.getvalue()[:2000])
    code, nagios = _text("check", "--from", str(archive), "--format", "nagios")
    assert code == 3
    assert "see Inputs" not in nagios
    assert nagios.startswith(f"K3DIAG UNKNOWN - node7: Nothing could be analyzed: {archive.name} ends early or "
                             "is corrupt (")
    _, text = _text("check", "--from", str(archive))
    assert "see Inputs" not in text
    assert "ends early or is corrupt" in text.splitlines()[0]
    empty = tmp_path / "topo.txt"
    empty.write_text("")
    _, npd = _text("check", "--from", str(empty), "--format", "npd")
    assert npd.startswith("UNKNOWN Nothing could be analyzed: /") and "see" not in npd and len(npd) <= 80
    _, text = _text("check", "--from", str(empty))
    # named by the file, not its folders (an empty file names no host), and the text says it is no host name
    assert text.startswith(f"k3diag check topo.txt: UNKNOWN: Nothing could be analyzed: {empty}: the file is empty\n"
                           f"  node: topo.txt is the name of the input file {empty}, not a host name: ")


def test_a_cut_matrix_row_does_not_call_its_own_diagonal_unknown(tmp_path: Path) -> None:
    # `GPU4  NV18  NV18 ` (a paste cut after two cells): the warning listed GPU4 itself among the unknown cells.
    lines = (FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt").read_text().splitlines()
    cut = tmp_path / "topo-cut.txt"
    cut.write_text("\n".join(lines[:6] + [lines[6][:16]]) + "\n")
    _, report = _json("analyze", str(cut))
    (warning,) = [w for w in report["inputs"][0]["warnings"] if "row has" in w]
    assert warning == "line 7: the GPU4 row has 2 of 8 cells (the line looks cut); GPU2, GPU3, GPU5, GPU6, GPU7 unknown"


def test_a_gpu_in_a_slot_wired_x8_is_not_told_to_reseat_the_card() -> None:
    # vm-flattened's lspci shows GPU2 (capable of x16) below a root port whose LnkCap is x8: the slot is
    # wired x8. The FAIL said "because: ... the root port above it is wired x8" and then "Fix: Reseat the card".
    _, out = _text("analyze", str(FIXTURES / "scenarios" / "vm-flattened"))
    lines = out.splitlines()
    start = lines.index("  [FAIL] GPU2 link runs at x8 of x16  (pcie-width-below-max)")
    fix = next(line for line in lines[start:] if line.strip().startswith("Fix:"))
    assert "Reseat the card" not in fix
    assert fix.strip().startswith("Fix: Move the GPU to a slot whose lanes are all wired (x16)")
    # A GPU whose link trained below both ends' capability is still told to reseat it.
    _, example = _text("analyze", str(EXAMPLE))
    assert "      Fix: Reseat the card (and its riser), check the slot is wired x16" in example


def test_audit_says_how_much_memory_is_short_not_a_negative_free() -> None:
    # Kimi K3 on 8x L40S: "DP8 x TP1 x PP1 x EP1: does not load, weights 1452.8 GiB/GPU, -1413.1 GiB free".
    _, out = _text("audit", str(FIXTURES / "bundles" / "bad-8x-pcie-dual-socket"), "--model", "k3")
    assert "      DP8 x TP1 x PP1 x EP1: does not load, weights 1452.8 GiB/GPU, 1413.1 GiB short per GPU, decode " \
           ">= 176.4 ms/token + 0.0 ms communication" in out.splitlines()
    assert not any("-1" in line and "GiB free" in line for line in out.splitlines())


def test_the_first_line_names_the_input_or_counts_them() -> None:
    """The first line said 'k3diag analyze: 1 input path(s)': now the input itself, or how many."""
    topo = FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"
    _, out = _text("analyze", str(topo))
    assert out.splitlines()[0] == f"k3diag analyze: {topo}"
    _, out = _text("analyze", str(topo), str(FIXTURES / "nccl" / "SOURCES.md"))
    assert out.splitlines()[0] == "k3diag analyze: 2 inputs"
