"""The terminal's NCCL line counts every communicator of a long log, not only the runs kept in full, and
says plainly when the log holds no connection lines (never `?` for a missing version or rank count)."""

from __future__ import annotations

import importlib.util
import io
import re
from pathlib import Path

from k3diag.analyze.pipeline import analyze_machine
from k3diag.inputs import load_machine
from k3diag.render.json_report import build_report
from k3diag.render.plain import Out
from k3diag.render.terminal import render

REPO = Path(__file__).resolve().parents[2]


def _terminal(paths: list[Path]) -> tuple[str, dict]:
    machine, _ = load_machine(paths)
    analysis = analyze_machine(machine)
    buffer = io.StringIO()
    render(analysis, Out(buffer, color=False), "k3diag analyze")
    report = build_report(machine, analysis.findings, analysis.recommendation, analysis.verdict.to_json(), 0)
    return buffer.getvalue(), report


def test_a_long_log_counts_the_summarized_communicators_too(tmp_path: Path, monkeypatch) -> None:
    from k3diag.parse.nccl import patterns

    monkeypatch.setattr(patterns, "DETAIL_RUNS", 4)
    spec = importlib.util.spec_from_file_location("bench_nccl_log", REPO / "benchmarks" / "bench_nccl_log.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    log = tmp_path / "many.log"
    bench.generate(log, 6, nodes=2, interleave=False)
    out, report = _terminal([log])
    summary = report["nccl_summary"]
    assert summary["runs_summarized"] > 0 and len(report["nccl_runs"]) == 4
    line = next(text for text in out.splitlines() if text.startswith("NCCL: "))
    assert f"; {summary['runs_total']} communicators" in line, line
    # The connection counts include the summarized runs' lines as well.
    p2p = int(re.search(r"([\d,]+) P2P", line).group(1).replace(",", ""))
    kept = sum(run["transport_counts"].get("P2P", 0) for run in report["nccl_runs"])
    assert p2p == kept + summary["summarized_transport_counts"]["P2P"] > kept, line


def test_a_run_without_version_or_rank_count_reads_as_words() -> None:
    out, _ = _terminal([REPO / "fixtures" / "nccl" / "nccl-2.2x-8x4090-graph-gpu-paths-two-sockets.log"])
    line = next(text for text in out.splitlines() if text.startswith("NCCL: "))
    assert line == "NCCL: NCCL (version not in the log); 1 communicator; no connection lines in the log"
    assert "?" not in out and " None" not in out
