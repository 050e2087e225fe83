"""trtllm-bench reports the average number of requests in flight ("Number of concurrent requests"), not the
--concurrency limit: the report shows it as an average and never ranks it against a client's limit."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.analyze.serving.compare import load_key, load_text
from k3diag.cli import app
from k3diag.model.serving import ServingRun
from k3diag.model.source import SourceRef

TRTLLM = Path(__file__).resolve().parents[2] / "fixtures" / "serving" / "trtllm-bench-report-text-llama31-8b-nvidia-blog.txt"


def test_the_real_report_shows_the_average_in_flight_and_says_so_in_the_json() -> None:
    report = json.loads(CliRunner().invoke(app, ["serving", str(TRTLLM), "--json"]).stdout)
    layout = report["layouts"][0]
    assert (layout["concurrency"], layout["concurrency_is_average"]) == (94.605, True)
    assert layout["load"] == "average 94.605 in flight per replica"
    assert "concurrency 94.605" not in CliRunner().invoke(app, ["serving", str(TRTLLM)]).stdout


def test_an_average_in_flight_is_never_the_same_load_as_a_limit_of_the_same_number() -> None:
    where = SourceRef("x", 1, "")
    limit = ServingRun(tool="vllm-bench-serve", input="a", source=where, concurrency=32.0)
    average = ServingRun(tool="trtllm-bench", input="b", source=where, concurrency=32.0, concurrency_is_average=True)
    assert load_key(limit) == ("concurrency", 32.0) and load_key(average) == ("in_flight", 32.0)
    assert load_text(load_key(limit)) == "concurrency 32 per replica"
    assert load_text(load_key(average)) == "average 32 in flight per replica"
