"""Rules about the collection itself read what the evidence records (its command, that it failed, that it
was stopped at its own time limit), not the words of a warning: a bundle written by another collector, or
by an older k3diag, words its failures its own way.

The bundles here are folders with a `manifest.json` in the `k3diag.bundle/1` layout (docs/bundle.md), the
messages what the tools print: nvidia-smi's own sentence when the driver is not loaded (exit code 9).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
             "latest NVIDIA driver is installed and running.")


def _bundle(root: Path, entries: list[dict]) -> Path:
    """A bundle folder: each entry's `text` written as its member, the rest as its manifest record."""
    (root / "evidence").mkdir(parents=True)
    records = []
    for entry in entries:
        text = entry.pop("text", "")
        member = f"evidence/{entry['name']}"
        (root / member).write_text(text)
        records.append({"member": member, "kind": "command", "exit_code": 0, "duration_s": 1.0, "stderr": "",
                        "timed_out": False, "error": None, "format_hint": None, "meta": {}, **entry})
    manifest = {"schema": "k3diag.bundle/1", "k3diag_version": "0.1.0", "created": "2026-12-02T00:00:00+00:00",
                "host": {"hostname": "gpu-node-07"}, "evidence": records}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def _report(bundle: Path) -> dict:
    result = runner.invoke(app, ["analyze", str(bundle), "--json"])
    return json.loads(result.stdout)


def test_a_gpu_tool_that_failed_in_its_own_words_means_no_gpu_was_found(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b", [
        {"name": "nvidia-smi-q.txt", "command": "sudo nvidia-smi -q", "exit_code": 9, "error": NO_DRIVER},
        {"name": "uname.txt", "command": "uname -a", "text": "Linux gpu-node-07 6.8.0-45-generic x86_64 GNU/Linux\n"},
    ])
    report = _report(bundle)
    found = [f for f in report["findings"] if f["id"] == "no-gpu-found"]
    assert len(found) == 1, [f["id"] for f in report["findings"]]
    # the reason is the tool's own sentence, quoted once
    assert found[0]["explanation"] == f"No NVIDIA or AMD GPU was found on this host: {NO_DRIVER}."
    assert found[0]["data"]["reasons"] == [f"b:evidence/nvidia-smi-q.txt: {NO_DRIVER}"]
    by_path = {record["path"].rsplit("/", 1)[-1]: record for record in report["inputs"]}
    assert by_path["nvidia-smi-q.txt"]["collection_failed"] is True
    assert "collection_failed" not in by_path["uname.txt"]  # ran, printed what it prints


def test_a_gpu_tool_that_ran_is_not_one_that_failed(tmp_path: Path) -> None:
    # plain `nvidia-smi` printed its status table (exit 0): the GPUs are there, only not in a format that
    # shows links; no "No GPU found" for it, whatever the warning says about the tool
    table = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia" / "nvidia-smi-390-2x-m40-table-nvidia-docker-759.txt"
    bundle = _bundle(tmp_path / "b", [{"name": "nvidia-smi.txt", "command": "nvidia-smi", "text": table.read_text()}])
    report = _report(bundle)
    assert "no-gpu-found" not in [f["id"] for f in report["findings"]]
    record = next(r for r in report["inputs"] if r["path"].endswith("nvidia-smi.txt"))
    assert "collection_failed" not in record


def test_a_command_stopped_at_its_own_limit_hung_and_one_stopped_at_the_deadline_did_not(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b", [
        # another collector's wording of a hang (no "did not finish within"): the record says it timed out
        {"name": "nvidia-smi-topo-m.txt", "command": "nvidia-smi topo -m", "exit_code": None, "timed_out": True,
         "error": "nvidia-smi topo -m: killed after 30 s without output"},
        # stopped because the whole collection's deadline came, not because it hung
        {"name": "lspci-vv.txt", "command": "lspci -vv", "exit_code": None, "timed_out": True,
         "meta": {"stopped_at_deadline": True},
         "error": "`lspci -vv` was stopped after 2.0 s, when the collection's deadline of 10 s was reached; run it "
                  "by hand or give a longer --deadline"},
    ])
    report = _report(bundle)
    hung = [f for f in report["findings"] if f["id"] == "command-timed-out"]
    assert [f["subjects"] for f in hung] == [["b:evidence/nvidia-smi-topo-m.txt"]]
    assert hung[0]["explanation"] == "nvidia-smi topo -m: killed after 30 s without output"
    notes = {note["subject"]: note for note in report["notes"]}
    assert notes["b:evidence/nvidia-smi-topo-m.txt"]["timed_out"] is True
    assert "timed_out" not in notes["b:evidence/lspci-vv.txt"]


def test_a_gpu_tool_that_printed_only_a_blank_line_was_tried_and_failed(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b", [{"name": "nvidia-smi-topo-m.txt", "command": "nvidia-smi topo -m", "text": "\n"}])
    report = _report(bundle)
    assert "no-gpu-found" in [f["id"] for f in report["findings"]]
    record = next(r for r in report["inputs"] if r["path"].endswith("nvidia-smi-topo-m.txt"))
    assert record["collection_failed"] is True
    assert record["warnings"] == ["`nvidia-smi topo -m` printed nothing"]
