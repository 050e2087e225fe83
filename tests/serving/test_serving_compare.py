"""The matched-load check and the verdict: rank only what can be compared, and say why not."""

from __future__ import annotations

from pathlib import Path

from k3diag.analyze.serving.compare import Slo, compare
from k3diag.inputs_serving import load_serving
from k3diag.model.serving import Latency, RunLayout, ServingRun
from k3diag.model.source import SourceRef

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
SEED = FIXTURES / "seed-4x4090"


def _run(tp: int, gpus: list[int], concurrency: float, out_tps: float, tpot_p99: float, *, model: str = "m",
         input_len: float = 1024, output_len: float = 512) -> ServingRun:
    return ServingRun(tool="vllm-bench-serve", input=f"tp{tp}-{concurrency}.json",
                      source=SourceRef("x.json", 1, "{"), model=model, requests=100, failed=0,
                      concurrency=concurrency, input_len=input_len, output_len=output_len,
                      output_tok_per_s=out_tps, tpot=Latency(p50=tpot_p99 * 0.9, p99=tpot_p99),
                      layout=RunLayout(tp=tp, gpus=gpus, source="file"))


def test_seed_box_two_tp2_replicas_beat_tp4_per_gpu_at_the_latency_target() -> None:
    loaded = load_serving([SEED / "results"])
    assert len(loaded.runs) == 9
    result = compare(loaded.runs, Slo(tpot_ms=42))
    assert result.comparable
    best = result.best
    assert best.label == "2x TP2 on GPUs 0,1 | 2,3"
    assert result.ranking[1].label == "TP4 GPUs 0,1,2,3"
    # each layout's best run within P99 TPOT 42 ms: TP2 at concurrency 16, TP4 at 8
    assert best.run.concurrency == 16 and result.ranking[1].run.concurrency == 8
    assert round(best.per_gpu / result.ranking[1].per_gpu, 2) == 4.18
    assert "2x TP2 on GPUs 0,1 | 2,3 serves the most output tokens/s per GPU at P99 TPOT <= 42 ms" in result.verdict


def test_without_a_target_the_layouts_are_ranked_at_the_highest_shared_load() -> None:
    result = compare(load_serving([SEED / "results"]).runs)
    assert result.comparable and result.load == "concurrency 16 per replica"
    assert result.best.label.startswith("2x TP2") and "no latency target given" in result.verdict


def test_different_output_lengths_are_refused_with_the_numbers() -> None:
    runs = [_run(2, [0, 1], 16, 430, 38), _run(4, [0, 1, 2, 3], 16, 370, 45, output_len=256)]
    result = compare(runs)
    assert not result.comparable and result.best is None
    assert "mean output lengths differ: 256 tokens (TP4 GPUs 0,1,2,3" in result.reasons[0]
    assert "--random-output-len" in result.reasons[0] and result.verdict.startswith("Not ranked:")


def test_different_models_are_refused() -> None:
    runs = [_run(2, [0, 1], 16, 430, 38, model="Qwen/Qwen2.5-14B"), _run(4, [0, 1, 2, 3], 16, 370, 45, model="x/Llama-8B")]
    result = compare(runs)
    assert not result.comparable and "served different models" in result.reasons[0]


def test_same_model_under_different_paths_is_one_model() -> None:
    runs = [_run(2, [0, 1], 16, 430, 38, model="/models/Qwen2.5-14B"), _run(4, [0, 1, 2, 3], 16, 370, 45, model="Qwen/Qwen2.5-14B")]
    assert compare(runs).comparable


def test_no_shared_concurrency_per_replica_is_refused_and_suggests_a_target() -> None:
    runs = [_run(2, [0, 1], 16, 430, 38), _run(4, [0, 1, 2, 3], 32, 370, 45)]
    result = compare(runs)
    assert not result.comparable
    assert "TP2 GPUs 0,1 at concurrency 16 per replica; TP4 GPUs 0,1,2,3 at concurrency 32 per replica" in result.reasons[0]
    assert "--slo-tpot-ms" in result.reasons[0]
    assert compare(runs, Slo(tpot_ms=50)).comparable


def test_concurrency_per_replica_divides_by_dp() -> None:
    two_replicas = _run(2, [0, 1, 2, 3], 32, 860, 38)
    two_replicas.layout.dp = 2
    tp4 = _run(4, [0, 1, 2, 3], 16, 370, 45)
    result = compare([two_replicas, tp4])
    assert result.comparable and result.load == "concurrency 16 per replica"
    assert result.best.per_gpu == 215.0


def test_unknown_layout_is_left_out_with_what_to_do() -> None:
    unknown = _run(2, [0, 1], 16, 430, 38)
    unknown.layout = RunLayout()
    result = compare([unknown, _run(4, [0, 1, 2, 3], 16, 370, 45)])
    assert not result.comparable
    assert "--metadata tp=N gpus=" in result.excluded[0][1]


def test_a_target_on_a_percentile_the_file_lacks_is_said_not_guessed() -> None:
    a, b = _run(2, [0, 1], 16, 430, 38), _run(4, [0, 1, 2, 3], 16, 370, 45)
    b.tpot = Latency(mean=40.0, p50=39.0)
    result = compare([a, b], Slo(tpot_ms=50))
    check = result.check_of(b)
    assert check.meets is None and "P99 TPOT was not recorded (the file has mean, p50)" in check.detail
    assert any("--metric-percentiles 50,95,99" in note for note in result.notes)


def test_nothing_meets_the_target() -> None:
    result = compare([_run(2, [0, 1], 16, 430, 38), _run(4, [0, 1, 2, 3], 16, 370, 45)], Slo(tpot_ms=10))
    assert not result.comparable and result.verdict == "Not ranked: no run meets P99 TPOT <= 10 ms."


def test_layout_from_sidecar_and_file_name() -> None:
    loaded = load_serving([FIXTURES / "h100-llama70b"])
    by_input = {Path(run.input).name: run for run in loaded.runs}
    sidecar = by_input["replica-a.json"].layout
    assert (sidecar.tp, sidecar.gpus, sidecar.source) == (4, [0, 1, 2, 3], "sidecar")
    named = by_input["llama70b-tp8.json"].layout
    assert (named.tp, named.source, named.detail) == (8, "filename", "file name llama70b-tp8.json")
    assert all(record["format"] != "unknown" for record in loaded.inputs)


def test_layout_from_the_engine_log_beside_the_result(tmp_path: Path) -> None:
    text = (FIXTURES / "vllm-bench-serve-qwen3vl-8b-1qps.json").read_text()
    (tmp_path / "result.json").write_text(text)
    (tmp_path / "server.log").write_text((FIXTURES / "vllm-engine-internvl3-78b-tp4-l40s.log").read_text())
    (run,) = load_serving([tmp_path]).runs
    assert (run.layout.tp, run.layout.source) == (4, "engine-log") and "server.log" in run.layout.detail


def test_a_broken_sidecar_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text((FIXTURES / "vllm-bench-serve-qwen3vl-8b-1qps.json").read_text())
    (tmp_path / "k3diag-run.toml").write_text("tp = [\n")
    loaded = load_serving([tmp_path])
    assert loaded.runs[0].layout.source == "unknown"
    assert any("is not valid TOML" in w for w in loaded.warnings)


def test_explanation_joins_the_machine_evidence() -> None:
    from k3diag.analyze.serving.report import build_report
    from k3diag.inputs import load_machine

    loaded = load_serving([SEED / "results"])
    machine, _ = load_machine([SEED / "bundle"])
    machine.extras.update({k: v for k, v in loaded.machine.extras.items() if k != "serving_runs"})
    machine.nccl.extend(loaded.machine.nccl)
    from k3diag.advise.serving import estimate_allreduce

    report = build_report(loaded.runs, machine, Slo(tpot_ms=42), machine_source="bundle", estimate=estimate_allreduce)
    tp4 = next(item for item in report.explanations if item.tp == 4)
    facts = {fact.name: fact for fact in tp4.facts}
    assert facts["worst_link"].state == "bad" and facts["worst_link"].value == "SYS"
    assert "GPU0-GPU2 SYS" in facts["worst_link"].text
    assert facts["p2p"].state == "bad" and "0-2, 0-3, 1-2, 1-3" in facts["p2p"].text
    assert facts["nccl_transport"].value == {"P2P": 0, "SHM": 8, "NET": 0}
    assert facts["custom_allreduce"].value == "disabled" and "P2P test failed" in facts["custom_allreduce"].text
    assert facts["allreduce_per_token"].state == "unknown" and "--model NAME" in facts["allreduce_per_token"].command
    tp2 = next(item for item in report.explanations if item.gpus == [0, 1])
    assert tp2.fact("worst_link").value == "PIX" and tp2.fact("p2p").state == "good"
    assert "against it, TP4 GPUs 0,1,2,3: worst link inside the group: GPU0-GPU2 SYS" in report.comparison.verdict


def test_allreduce_estimate_and_advise_prediction_for_a_catalog_model() -> None:
    from k3diag.analyze.serving.report import build_report
    from k3diag.inputs import load_machine

    machine, _ = load_machine([FIXTURES.parent / "bundles" / "good-8x-h100-nvlink"])
    from k3diag.advise.serving import estimate_allreduce, predict_layouts

    report = build_report(load_serving([FIXTURES / "h100-llama70b"]).runs, machine, machine_source="bundle",
                          estimate=estimate_allreduce, predictor=predict_layouts)
    tp4 = next(item for item in report.explanations if item.tp == 4)
    estimate = tp4.fact("allreduce_per_token")
    assert estimate.state == "good" and estimate.value["batch"] == 32
    assert estimate.value["allreduce_ms_per_token"] == 1.31 and estimate.value["share_of_tpot"] == 0.066
    tp8 = next(item for item in report.explanations if item.tp == 8)
    assert tp8.gpus is None and tp8.fact("worst_link").value == "NV18"  # TP8 on an 8-GPU box: every GPU
    predictions = {p.label: p for p in report.predictions}
    assert predictions["TP4 GPUs 0,1,2,3"].fits is True
    assert "measured TPOT 19.8 ms = 1.5x the estimate" in predictions["TP4 GPUs 0,1,2,3"].text
