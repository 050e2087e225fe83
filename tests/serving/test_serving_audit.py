"""The audit's 'TP2 against TP4, measured' question, from serving results in the bundle."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from k3diag.audit.answer import PASS, UNKNOWN, WARN
from k3diag.audit.context import AuditContext
from k3diag.audit.q_serving import answer_tp2_tp4_measured
from k3diag.cli import app
from k3diag.inputs import load_machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
SEED = FIXTURES / "seed-4x4090"


def _answer(*paths: Path, model: str | None = None):
    machine, _ = load_machine(list(paths))
    return answer_tp2_tp4_measured(AuditContext(machine=machine, findings=[], model=model, source="box"))


def test_no_results_asks_for_the_exact_runs_on_the_planned_groups() -> None:
    answer = _answer(SEED / "bundle", model="Qwen/Qwen2.5-14B-Instruct")
    assert answer.verdict == UNKNOWN and "were not measured" in answer.summary
    request = answer.request
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen2.5-14B-Instruct --tensor-parallel-size 2" in request
    assert "CUDA_VISIBLE_DEVICES=2,3" in request and "CUDA_VISIBLE_DEVICES=0,1,2,3" in request
    assert "--metadata tp=2 gpus=0,1" in request and "--metadata tp=4 gpus=0,1,2,3" in request
    assert request.count("--metric-percentiles 50,95,99") == 3


def test_measured_and_comparable_passes_with_the_verdict() -> None:
    answer = _answer(SEED / "bundle", SEED / "results")
    assert answer.verdict == PASS
    assert answer.summary.startswith("Measured: 2x TP2 on GPUs 0,1 | 2,3 serves the most output tokens/s per GPU")
    assert answer.data["measured_tp"] == [2, 4] and answer.data["best"]["tp"] == 2
    assert any(line.startswith("TP4 GPUs 0,1,2,3 at concurrency 16 per replica: 93.0 output tok/s per GPU")
               for line in answer.details)
    assert answer.evidence


def test_only_tp2_measured_warns(tmp_path: Path) -> None:
    shutil.copy(SEED / "results" / "tp2-gpus01.jsonl", tmp_path)
    answer = _answer(SEED / "bundle", tmp_path)
    assert answer.verdict == WARN and "not for TP4" in answer.summary and "--metadata tp=4" in answer.request


def test_measured_at_different_loads_warns_with_the_reason(tmp_path: Path) -> None:
    lines = (SEED / "results" / "tp2-gpus01.jsonl").read_text().splitlines()
    (tmp_path / "tp2.jsonl").write_text(lines[0] + "\n")  # concurrency 1
    tp4 = (SEED / "results" / "tp4-gpus0123.jsonl").read_text().splitlines()
    (tmp_path / "tp4.jsonl").write_text(tp4[2] + "\n")  # concurrency 16
    answer = _answer(SEED / "bundle", tmp_path)
    assert answer.verdict == WARN and "cannot be compared: no two layouts were measured at the same load" in answer.summary


def test_audit_of_a_bundle_with_results(tmp_path: Path) -> None:
    bundle = tmp_path / "box"
    shutil.copytree(SEED / "bundle", bundle / "evidence")
    for path in (SEED / "results").iterdir():
        shutil.copy(path, bundle / "evidence" / path.name)
    (bundle / "manifest.json").write_text('{"format": "k3diag-bundle/1", "host": "box4090"}')
    result = CliRunner().invoke(app, ["audit", str(bundle), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    import json

    answers = {a["id"]: a for a in json.loads(result.stdout)["answers"]}
    assert answers["tp2-tp4-measured"]["verdict"] == "PASS", answers["tp2-tp4-measured"]


def test_the_runs_asked_for_serve_the_model_by_its_hugging_face_id() -> None:
    # `vllm serve k3` resolves to nothing: the catalog's short name becomes its Hugging Face id
    request = _answer(SEED / "bundle", model="k3").request
    assert "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 2" in request
    assert "vllm bench serve --model moonshotai/Kimi-K3 " in request
    assert "vllm serve k3 " not in request and "--model k3 " not in request
