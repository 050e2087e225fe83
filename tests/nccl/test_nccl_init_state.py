"""How far NCCL init got, as a user sees it: ranks that started and never completed (a fault in a whole log,
"not seen to complete in this excerpt" in a cut one), and an init that took unusually long (`Init timings`)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.parse.nccl import parse_bytes, parse_path, parse_stream

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
HANG = FIXTURES / "nccl-2.23.4-collnet-sharp-4nodes-hang.log"
runner = CliRunner()


def _report(*paths: Path) -> dict:
    result = runner.invoke(app, ["analyze", *map(str, paths), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return json.loads(result.stdout)


def _text(*paths: Path) -> str:
    result = runner.invoke(app, ["analyze", *map(str, paths), "--details"])
    return result.stdout


def _findings(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["id"] == rule]


def test_a_whole_log_whose_ranks_never_complete_init_is_a_hang_with_each_ranks_last_line() -> None:
    report = _report(HANG)
    [finding] = _findings(report, "nccl-init-incomplete")
    assert finding["severity"] == "warn"  # no rank completed and no error trace: a hang, maybe still starting
    assert finding["title"] == ("8 ranks (0-7) of communicator 0x45701cda3f259923 started NCCL init and never "
                                "completed it")
    assert "8 ranks of 8 started init and none completed" in finding["explanation"]
    assert "rank 0 last printed line 165" in finding["explanation"]
    assert "bootstrap" in finding["explanation"]
    # the evidence is each stuck rank's last line, not its start line
    assert finding["evidence"][0] == {"input": str(HANG), "line": 165,
                                      "text": "gpu34:23654:23702 [0] NCCL INFO SHARP rank 0/4 initialized on mlx5_0:1"}
    assert len(finding["evidence"]) == 8
    assert "NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,NET" in finding["confirm_with"]
    assert "gpu34" in finding["confirm_with"]
    init = report["nccl_runs"][0]["init"]
    assert (init["nranks"], init["started"], init["completed"], init["stuck_total"], init["excerpt"]) == (8, 8, 0, 8, False)
    assert init["stuck"][0]["start"]["line"] == 78 and init["stuck"][0]["last"]["line"] == 165
    details = _text(HANG)
    assert "started NCCL init and never completed it" in details
    assert "init: 8 ranks of 8 started, 0 completed, 8 never completed" in details


def test_the_same_log_marked_as_cut_is_only_not_seen_to_complete(tmp_path: Path) -> None:
    lines = HANG.read_text().split("\n")
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(lines[:120] + ["[... truncated ...]"] + lines[120:]))
    report = _report(cut)
    [finding] = _findings(report, "nccl-init-incomplete")
    assert finding["severity"] == "info" and finding["kind"] == "missing-evidence"
    assert finding["title"].startswith("NCCL init not seen to complete in this excerpt for 8 ranks (0-7)")
    assert "line 121 (`[... truncated ...]`) marks the text as cut" in finding["explanation"]
    assert "not judged a hang" in finding["explanation"]
    assert not [f for f in report["findings"] if f["id"] == "nccl-init-incomplete" and f["severity"] != "info"]


def test_a_few_quoted_lines_are_an_excerpt_and_ranks_never_seen_are_named() -> None:
    path = FIXTURES / "nccl-2.2x-2nodes-init-start.log"
    report = _report(path)
    [finding] = _findings(report, "nccl-init-incomplete")
    assert finding["severity"] == "info"
    assert "the text holds only 10 NCCL lines" in finding["explanation"]
    assert "2 ranks (2-3) never appear in this log" in finding["explanation"]
    assert report["nccl_runs"][0]["init"]["missing"] == [2, 3]


def test_a_short_code_block_of_a_markdown_document_is_an_excerpt(tmp_path: Path) -> None:
    lines = HANG.read_text().split("\n")[:90]
    doc = tmp_path / "notes.md"
    doc.write_text("# CollNet hang\n\nThe job hangs; the log:\n\n```\n" + "\n".join(lines) + "\n```\n")
    [finding] = _findings(_report(doc), "nccl-init-incomplete")
    assert finding["severity"] == "info"
    assert "it is a code block of 90 lines in a Markdown document" in finding["explanation"]


def test_completed_logs_say_nothing_of_init() -> None:
    for name in ("nccl-2.29.2-efa-rank-prefix-init-start-cuda-failure.log", "nccl-2.2x-initall-2gpus-init-complete.log",
                 "nccl-2.19-64ranks-init-complete.log"):
        report = _report(FIXTURES / name)
        assert not _findings(report, "nccl-init-incomplete"), name
    init = _report(FIXTURES / "nccl-2.29.2-efa-rank-prefix-init-start-cuda-failure.log")["nccl_runs"][0]["init"]
    assert (init["started"], init["completed"], init["stuck"]) == (2, 2, [])


def test_a_destroyed_communicator_is_not_stuck() -> None:
    text = ("h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Destroy COMPLETE\n" * 30)
    result = parse_stream(text.split("\n"), "x.log")
    assert all(run.init is None or not run.init.stuck_total for run in result.runs)


def test_every_path_finds_the_same_last_lines() -> None:
    data = HANG.read_bytes()
    lines = data.decode().split("\n")
    if lines[-1] == "":
        lines.pop()
    expect = [s.to_json() for s in parse_stream(lines, "hang.log").runs[0].init.stuck]
    assert [s.to_json() for s in parse_bytes(data, "hang.log").runs[0].init.stuck] == expect
    assert [s.to_json() for s in parse_path(HANG, "hang.log", workers=2).runs[0].init.stuck] == expect
    assert expect[1]["last"]["line"] > expect[1]["start"]["line"]


# -- Init timings ------------------------------------------------------------------------------


def test_init_timings_are_kept_per_communicator_and_a_slow_init_names_its_phase() -> None:
    path = FIXTURES / "nccl-2.27.3-commsplit-16ranks-efa-lazy-connect-threads.log"
    report = _report(path)
    [finding] = _findings(report, "nccl-init-slow")
    assert finding["title"] == "NCCL init of 16-rank communicator took 24.4 s (rank 1), mostly in rest"
    assert "24.38 s of it in rest (init work outside the timed phases)" in finding["explanation"]
    assert "over 10 s for 16 ranks" in finding["explanation"]
    assert finding["evidence"][0]["line"] == 80
    timings = next(run["init_timings"] for run in report["nccl_runs"] if run["init_timings"])
    assert timings["ranks_timed"] == 4
    assert timings["dominant_phase"] == "rest"
    assert [t["total_s"] for t in timings["slowest"]] == sorted((t["total_s"] for t in timings["slowest"]), reverse=True)
    assert timings["slowest"][0]["phases_s"]["rest"] == 24.38
    assert ("init: 4 ranks of 16 started, 4 completed, 12 never seen; slowest init rank 1 24.41 s, mostly rest "
            "(4 ranks timed)") in _text(path)


def test_a_bootstrap_wait_points_at_the_network() -> None:
    text = ("h:1:2 [0] NCCL INFO ncclCommInitRankConfig comm 0x5 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 "
            "commId 0xab - Init COMPLETE\n"
            "h:1:2 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 4 total 59.98 (kernels 0.13, "
            "alloc 0.01, bootstrap 59.83, allgathers 0.01, topo 0.00, graphs 0.00, connections 0.00, rest 0.00)\n")
    [run] = parse_stream(text.split("\n"), "x.log").runs
    assert run.init_timings.slowest[0].dominant == "bootstrap"
    assert run.init_timings.to_json()["slowest"][0]["total_s"] == 59.98


def test_fast_inits_are_not_reported() -> None:
    for name in ("nccl-2.28.9-dgx-spark-2nodes-initrankconfig-roce.log",
                 "nccl-2.29.2-efa-rank-prefix-init-start-cuda-failure.log"):
        report = _report(FIXTURES / name)
        assert not _findings(report, "nccl-init-slow"), name
        assert any(run["init_timings"] for run in report["nccl_runs"]), name


def test_a_2_29_rank_prefixed_start_whose_complete_line_is_gone_is_stuck_while_its_peer_completed(tmp_path: Path) -> None:
    """NCCL 2.29's `[Rank 0] ncclCommInitRank ... - Init START` (a real log), with rank 0's `Init COMPLETE` line
    taken out: rank 1 completed, rank 0 did not, and the log holds error traces: a fault, severity fail."""
    real = (FIXTURES / "nccl-2.29.2-efa-rank-prefix-init-start-cuda-failure.log").read_text().split("\n")
    kept = [line for line in real if not ("Init COMPLETE" in line and "rank 0 " in line)]
    log = tmp_path / "rank0-stuck.log"
    log.write_text("\n".join(kept))
    report = _report(log)
    [finding] = _findings(report, "nccl-init-incomplete")
    assert finding["severity"] == "fail"
    assert finding["title"] == ("1 rank (0) of communicator 0xc3d9a10350effd4f started NCCL init and never "
                                "completed it")
    assert "2 ranks of 2 started init, 1 completed" in finding["explanation"]
    assert "error traces" in finding["explanation"]
    [stuck] = report["nccl_runs"][0]["init"]["stuck"]
    assert stuck["start"]["line"] == 67 and "[Rank 0] ncclCommInitRank" in stuck["start"]["text"]
    assert stuck["last"]["line"] > 67 and stuck["last"]["text"].startswith("gpu-st-ml-1:50292:")


def test_a_big_file_is_searched_again_only_in_its_tail_with_the_same_line_numbers(monkeypatch) -> None:
    """Past `MAX_REREAD_BYTES` only the file's tail is read again (memory stays bounded): a stuck rank whose
    last line lies in the tail gets the same line as a whole read; one whose last line is before it keeps
    its start line."""
    from k3diag.parse.nccl import init_state

    whole = [s.to_json() for s in parse_path(HANG, "hang.log").runs[0].init.stuck]
    size = HANG.stat().st_size
    last_lines = sorted(s["last"]["line"] for s in whole)
    data = HANG.read_bytes()
    # a tail starting mid-line, holding the latest of the last lines but not the earliest
    offsets = [i for i, b in enumerate(data) if b == 10]
    start = offsets[last_lines[0] - 1] + 5  # 5 bytes into the line after the earliest last line
    monkeypatch.setattr(init_state, "MAX_REREAD_BYTES", size - start)
    tail = [s.to_json() for s in parse_path(HANG, "hang.log").runs[0].init.stuck]
    for before, after in zip(whole, tail):
        if before["last"]["line"] > last_lines[0] + 1:
            assert after["last"] == before["last"]  # same line number and text through the tail
        else:
            # not in the tail: its start line stays the evidence
            assert after["last"] is None and after["start"] == before["start"]


def test_of_many_ranks_the_three_slowest_are_kept_ties_in_line_order_and_every_rank_counted() -> None:
    # totals in an order where slower lines come after the first three are kept, ties among them, one bad line
    totals = ["1.50", "2.00", "1.50", "3.25", "2.00", "0.75", "3.25", "1.2.3", "2.00", "0.50"]
    lines = ["h:1:2 [0] NCCL INFO ncclCommInitRank comm 0x5 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 1000 "
             "commId 0xab - Init COMPLETE"]
    for rank, total in enumerate(totals):
        lines.append(f"h:1:2 [0] NCCL INFO Init timings - ncclCommInitRank: rank {rank} nranks 16 total {total} "
                     "(kernels 0.10, alloc 0.01, bootstrap 0.20, allgathers 0.01, topo 0.30, graphs 0.01, "
                     "connections 0.40, rest 0.02)")
    [run] = parse_stream(lines, "x.log").runs
    timings = run.init_timings
    # slowest first; of equal totals the earlier line: rank 3 (line 5) before rank 6 (line 8), rank 1 before 4, 8
    assert [(t.rank, t.total, t.source.line) for t in timings.slowest] == [(3, 3.25, 5), (6, 3.25, 8), (1, 2.0, 3)]
    assert timings.ranks_timed == 9  # the line whose total does not parse is skipped, not timed
    assert timings.fastest_total == 0.5
    assert timings.slowest[0].phases == {"kernels": 0.1, "alloc": 0.01, "bootstrap": 0.2, "allgathers": 0.01,
                                         "topo": 0.3, "graphs": 0.01, "connections": 0.4, "rest": 0.02}
    assert timings.slowest[0].phases is not timings.slowest[1].phases  # each record its own
