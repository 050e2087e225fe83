"""`audit` of a bundle whose `nvidia-smi -q` was filtered (`-i 0`) on an 8-GPU machine: one GPU in the evidence
is not a one-GPU machine, so no question that concerns the other seven passes as "Only one GPU"."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from tests.nvidia_cuts import first_gpu_blocks

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"
runner = CliRunner()


def _bundle(tmp_path: Path, text: str, command: str) -> Path:
    folder = tmp_path / "vendor-box"
    (folder / "evidence").mkdir(parents=True)
    (folder / "evidence" / "nvidia-smi-q.txt").write_text(text)
    manifest = {"host": {"hostname": "vendor-box"}, "created": "2026-12-03T00:00:00+00:00", "schema": "k3diag.bundle/1",
                "k3diag_version": "0.1.0",
                "evidence": [{"name": "nvidia-smi-q.txt", "member": "evidence/nvidia-smi-q.txt", "kind": "command",
                              "command": command, "exit_code": 0, "duration_s": None, "stderr": "", "timed_out": False,
                              "error": None, "format_hint": None, "meta": {}}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _answers(folder: Path) -> dict[str, dict]:
    report = json.loads(runner.invoke(app, ["audit", str(folder), "--json"]).stdout)
    return {answer["id"]: answer for answer in report["answers"]}


def test_one_of_eight_attached_gpus_leaves_the_pair_questions_unknown_with_the_line_quoted(tmp_path: Path) -> None:
    cut = first_gpu_blocks("smi-q-8xh100-565-multi-gpu-fabric.txt", 1, tmp_path)
    answers = _answers(_bundle(tmp_path, cut.read_text(), "nvidia-smi -q -i 0"))
    for key in ("tp2-vs-tp4", "p2p"):
        assert answers[key]["verdict"] == "UNKNOWN", key
        assert answers[key]["summary"].startswith("The evidence holds 1 of the 8 attached GPUs (`Attached GPUs : 8`, "
                                                  "line 7 of vendor-box:evidence/nvidia-smi-q.txt)"), key
        assert answers[key]["request"] == "nvidia-smi -q; nvidia-smi topo -m"
        assert not answers[key]["summary"].startswith("Only one GPU")
    width = next(a for a in answers.values() if a["question"].startswith("Does every GPU run at PCIe x16"))
    assert width["verdict"] == "UNKNOWN"
    assert width["summary"].startswith("GPU0 runs at full link width; the other 7 attached GPUs are not in the evidence")


def test_a_real_one_gpu_machine_still_passes_as_one_gpu(tmp_path: Path) -> None:
    text = (FIXTURES / "smi-q-rtx5090-570-hmm-c2c-fabric-na.txt").read_text()
    answers = _answers(_bundle(tmp_path, text, "nvidia-smi -q"))
    assert answers["p2p"]["verdict"] == "PASS"
    assert answers["p2p"]["summary"] == "Only one GPU: peer-to-peer does not apply."
    assert answers["tp2-vs-tp4"]["summary"] == "Only one GPU: tensor parallelism does not apply."
    width = next(a for a in answers.values() if a["question"].startswith("Does every GPU run at PCIe x16"))
    assert "all 1 GPUs" not in width["summary"]


def test_two_of_eight_attached_gpus_leave_the_pair_questions_unknown_too(tmp_path: Path) -> None:
    cut = first_gpu_blocks("smi-q-8xh100-565-multi-gpu-fabric.txt", 2, tmp_path)
    answers = _answers(_bundle(tmp_path, cut.read_text(), "nvidia-smi -q -i 0,1"))
    for key in ("tp2-vs-tp4", "p2p"):
        assert answers[key]["verdict"] == "UNKNOWN", key
        assert answers[key]["summary"].startswith("The evidence holds 2 of the 8 attached GPUs (`Attached GPUs : 8`"), key
