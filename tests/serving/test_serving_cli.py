"""`k3diag serving` end to end: the table, the verdict, the JSON contract, exit codes."""

from __future__ import annotations

import io
import json
from importlib import resources
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from k3diag.cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
SEED = FIXTURES / "seed-4x4090"
runner = CliRunner()
BOX_DRAWING = set("─│┌┐└┘├┤┬┴┼━┃┏┓┗┛╭╮╯╰")


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["serving", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def schema() -> dict:
    return json.loads(resources.files("k3diag").joinpath("data/schema/serving.schema.json").read_text())


def test_piped_table_is_plain_text_with_the_verdict_and_why() -> None:
    code, out, _ = run(str(SEED / "results"), "--from", str(SEED / "bundle"), "--slo-tpot-ms", "42")
    assert code == 0
    assert not (set(out) & BOX_DRAWING) and "\x1b[" not in out
    lines = out.splitlines()
    tp4 = next(line for line in lines if line.startswith("TP4 GPUs 0,1,2,3") and "concurrency 16/replica" in line
               and "tok" not in line and "372" in line)
    assert "93.0" in tp4  # 372 output tok/s over 4 GPUs
    assert any(line.startswith("TP2 GPUs 0,1") and line.rstrip().endswith("BEST") for line in lines)
    assert "Verdict: 2x TP2 on GPUs 0,1 | 2,3 serves the most output tokens/s per GPU at P99 TPOT <= 42 ms" in out
    assert "4.18x TP4 GPUs 0,1,2,3" in out
    assert "[BAD] worst link inside the group: GPU0-GPU2 SYS" in out
    assert "vllm-tp4.log:6: (VllmWorker rank=0 pid=2121) WARNING" in out  # the log line quoted as evidence
    assert "None" not in out and "?" not in out.replace("?", "")  # no placeholder leaks into prose


def test_not_recorded_percentiles_are_said_once() -> None:
    code, out, _ = run(str(FIXTURES / "vllm-benchmark-serving-llmd-qps-sweep.jsonl"))
    assert code == 3
    assert "53.0/n/r/89.8" in out  # TTFT p50/p95/p99 at 10 req/s: P95 not recorded
    assert "n/r = not recorded by the tool" in out and "--metric-percentiles 50,95,99" in out
    assert "Left out: layout unknown (3 runs in" in out


def test_json_follows_the_schema_and_the_contract_names() -> None:
    code, out, _ = run(str(SEED / "results"), "--from", str(SEED / "bundle"), "--slo-tpot-ms", "42", "--json")
    assert code == 0
    data = json.loads(out)
    jsonschema.validate(data, schema())
    layout = next(item for item in data["layouts"] if item["tp"] == 4 and item["concurrency"] == 16)
    assert layout["gpus"] == [0, 1, 2, 3] and layout["source"] == "file"
    assert layout["throughput"]["output_tok_per_s_per_gpu"] == 93.0
    assert set(layout["tpot_ms"]) >= {"mean", "p50", "p95", "p99"} and layout["tpot_ms"]["p99"] == 45.8
    assert layout["slo"]["meets"] is False and data["comparable"] is True
    assert data["best"]["label"] == "2x TP2 on GPUs 0,1 | 2,3" and data["best"]["ratio_to_runner_up"] == 4.18
    names = {fact["name"] for item in data["explanation"] for fact in item["facts"]}
    assert {"worst_link", "p2p", "nccl_transport", "custom_allreduce", "allreduce_per_token"} <= names


def test_every_fixture_report_validates(tmp_path: Path) -> None:
    for target in (FIXTURES, FIXTURES / "h100-llama70b"):
        code, out, _ = run(str(target), "--json")
        assert code in (0, 3)
        jsonschema.validate(json.loads(out), schema())


def test_usage_errors_exit_64_with_one_sentence() -> None:
    code, _, err = run(str(SEED / "results"), "--slo-tpot-ms", "-5")
    assert code == 64 and "--slo-tpot-ms must be a positive number" in err
    code, _, err = run(str(SEED / "nope.json"))
    assert code == 64 and "does not exist" in err
    code, _, err = run(str(SEED / "results"), "--model", "not-a-model")
    assert code == 64 and "Traceback" not in err


def test_nothing_readable_exits_3(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    code, out, err = run(str(tmp_path))
    assert code == 3 and "no serving benchmark result was found" in err
    assert "No serving benchmark result was found in the inputs." in out


def test_terminal_rendering_uses_tables() -> None:
    from k3diag.analyze.serving.compare import Slo
    from k3diag.analyze.serving.report import build_report
    from k3diag.inputs_serving import load_serving
    from k3diag.render.serving_text import render_terminal

    report = build_report(load_serving([SEED / "results"]).runs, None, Slo(tpot_ms=42))
    stream = io.StringIO()
    render_terminal(report, stream)
    text = stream.getvalue()
    assert "Serving benchmarks by layout" in text and "out tok/s/GPU" in text and "Verdict:" in text


def test_results_pasted_with_prompts_crlf_ansi_and_utf16(tmp_path: Path) -> None:
    tp2 = (SEED / "results" / "tp2-gpus01.jsonl").read_text().splitlines()
    tp4 = (SEED / "results" / "tp4-gpus0123.jsonl").read_text().splitlines()
    pasted = ("\x1b[1;32muser@box:~/bench$\x1b[0m cat tp2.jsonl\r\n" + "\r\n".join(tp2) + "\r\nuser@box:~/bench$ \r\n")
    (tmp_path / "tp2-paste.txt").write_text(pasted, newline="")
    (tmp_path / "tp4-powershell.txt").write_bytes(("PS C:\\bench> type tp4.jsonl\r\n" + "\r\n".join(tp4) + "\r\n")
                                                   .encode("utf-16"))
    code, out, _ = run(str(tmp_path), "--json")
    data = json.loads(out)
    assert code == 0, data["reasons"]
    assert sorted(item["tp"] for item in data["layouts"]) == [2, 2, 2, 4, 4, 4]
    assert data["best"]["tp"] == 2 and data["ranked_at"] == "concurrency 16 per replica"
    assert {item["line"] for item in data["layouts"] if item["tp"] == 2} == {2, 3, 4}


def test_a_huge_broken_result_is_read_in_bounded_time(tmp_path: Path) -> None:
    line = json.loads((FIXTURES / "vllm-bench-serve-qwen3vl-8b-1qps.json").read_text())
    line["ttfts"] = [0.1] * 50_000
    text = json.dumps(line, indent=2)
    (tmp_path / "detailed.json").write_text(text[: len(text) // 2])  # cut in the middle of the per-request list
    code, out, _ = run(str(tmp_path / "detailed.json"), "--json")
    data = json.loads(out)
    assert code == 3 and len(data["layouts"]) == 1
    assert any("cut off" in w for w in data["inputs"][0]["warnings"])


def test_a_replica_whose_requests_all_failed_is_left_out_not_ranked_best(tmp_path: Path) -> None:
    # vLLM writes `completed: 0`, every throughput 0 and 0 ms for every percentile when the server refused
    # every request: that layout served nothing, and must neither win nor pull down its twin's average.
    import shutil

    results = tmp_path / "results"
    shutil.copytree(SEED / "results", results)
    dead = results / "tp2-gpus01.jsonl"
    lines = []
    for line in dead.read_text().splitlines():
        doc = json.loads(line)
        doc["failed"], doc["completed"] = doc["num_prompts"], 0
        for key in list(doc):
            if key.endswith("_ms") or key.endswith("throughput") or key.startswith("total_"):
                doc[key] = 0.0
        lines.append(json.dumps(doc))
    dead.write_text("\n".join(lines) + "\n")
    code, out, _ = run(str(results), "--from", str(SEED / "bundle"))
    assert code == 0
    verdict = next(line for line in out.splitlines() if line.startswith("Verdict: "))
    assert verdict.startswith("Verdict: TP2 GPUs 2,3 serves the most output tokens/s per GPU"), verdict
    assert "GPUs 0,1 |" not in verdict and "TP2 GPUs 0,1 " not in verdict and "TPOT 0.0 ms" not in verdict
    assert f"Left out: TP2 GPUs 0,1 (3 runs in {dead}): every request failed (none completed)" in out
    best = [line for line in out.splitlines() if line.rstrip().endswith("BEST")]
    assert best and all(not line.startswith("TP2 GPUs 0,1") for line in best), best
    latency_rows = [line for line in out.splitlines() if line.startswith("TP2 GPUs 0,1") and "TTFT" not in line
                    and "file" not in line]
    assert latency_rows and all("0.0/0.0/0.0" not in line for line in latency_rows), latency_rows


def test_a_run_with_failures_and_no_completed_count_is_not_called_all_failed() -> None:
    from k3diag.analyze.serving.compare import compare
    from k3diag.model.serving import RunLayout, ServingRun
    from k3diag.model.source import SourceRef

    def run(tp: int, requests, failed) -> ServingRun:
        return ServingRun(tool="serving-result-text", input=f"tp{tp}.txt", source=SourceRef(f"tp{tp}.txt", 1, "x"),
                          model="m", requests=requests, failed=failed, concurrency=8, output_tok_per_s=100.0 * tp,
                          layout=RunLayout(tp=tp, gpus=list(range(tp)), source="file"))

    result = compare([run(1, None, 12), run(2, 100, 0)])  # a pasted block without its "Successful requests"
    assert not any("every request failed" in why for _, why in result.excluded), result.excluded
    result = compare([run(1, 0, 12), run(2, 100, 0)])
    assert any("every request failed" in why for _, why in result.excluded)


def test_thousands_of_runs_show_the_first_and_the_best_on_a_terminal(tmp_path: Path) -> None:
    # A benchmark run in a loop: 15,174 rows of one run were 30,000 lines of table. The text views show the first
    # 60 runs in the table's order and up to 20 of the best layout's after them; --json keeps every run.
    lines = (SEED / "results" / "tp2-gpus01.jsonl").read_text().splitlines()
    (tmp_path / "tp2-gpus01.jsonl").write_text("\n".join(lines * 40) + "\n")  # 120 runs of TP2 GPUs 0,1
    (tmp_path / "tp4-gpus0123.jsonl").write_text((SEED / "results" / "tp4-gpus0123.jsonl").read_text())
    code, out, _ = run(str(tmp_path))
    throughput = [line for line in out.splitlines() if line.startswith(("TP2 GPUs", "TP4 GPUs")) and "/replica  " in line
                  and line.count("/") < 4]
    # sorted by load, the best run (concurrency 16) comes after the first 60, and is shown after them
    assert [line.rstrip().endswith("BEST") for line in throughput] == [False] * 60 + [True]
    assert "concurrency 16/replica" in throughput[-1]
    assert not any(line.startswith("TP4") for line in throughput)
    assert out.count("... and 62 more runs not shown here; `--json` or `--html PATH` lists every run") == 2
    assert "Verdict: TP2 GPUs 0,1 serves the most output tokens/s per GPU at concurrency 16 per replica" in out
    code, out, _ = run(str(tmp_path), "--json")
    assert len(json.loads(out)["layouts"]) == 123  # one entry per run
