"""A Markdown document given to `k3diag analyze` (a README, notes, an issue body saved as .md): its code
blocks are read as outputs, its prose is not, and a few NCCL lines quoted in a code block are not judged
as a run. Real documents: fixtures/nccl/SOURCES.md and the two `markdown-notes-*` fixtures."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

NCCL = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
runner = CliRunner()


def _analyze(path: Path, *options: str) -> tuple[int, str]:
    result = runner.invoke(app, ["analyze", str(path), *options])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout


def test_a_table_of_sources_quoting_nccl_warnings_is_not_an_nccl_run() -> None:
    """SOURCES.md cites `NCCL WARN Missing "iommu=pt"` and `NCCL_P2P_LEVEL=LOC` in table cells: it was
    read as one NCCL run with three WARN findings about a machine nobody ran."""
    code, text = _analyze(NCCL / "SOURCES.md")
    assert "[WARN]" not in text and "Problems" not in text
    assert "NCCL:" not in text
    assert "SOURCES.md is a Markdown document: only its code blocks are read as outputs; its prose (outside code " \
           "blocks) quotes nccl-log lines, which were not read" in " ".join(text.split())
    _, out = _analyze(NCCL / "SOURCES.md", "--json")
    report = json.loads(out)
    assert report["nccl_runs"] == [] and report["findings"] == []
    assert [record["format"] for record in report["inputs"]] == ["unknown"]


def test_three_nccl_lines_quoted_in_a_readme_code_block_are_not_judged() -> None:
    """A project's notes show `NCCL INFO Using network Socket` in a ```text block: an example, not a log;
    the report says which lines it left and why."""
    _, out = _analyze(NCCL / "markdown-notes-quotes-3-nccl-lines-socket.md", "--json")
    report = json.loads(out)
    assert report["nccl_runs"] == [] and report["findings"] == []
    (record,) = report["inputs"]
    assert record["format"] == "unknown"
    assert record["warnings"][0].endswith(
        "markdown-notes-quotes-3-nccl-lines-socket.md: lines 100-102 of this Markdown document quote 3 nccl-log "
        "lines in a code block: too few to be a run's log (a document needs 10 across its code blocks), so they "
        "were not judged; give the log itself as a file to have it read")


def test_a_log_pasted_in_a_code_block_is_read_and_the_prose_advice_is_not_taken_for_its_settings() -> None:
    """Notes with a real NCCL 2.27 log in a ``` block, then tuning advice in bullets (`* NCCL_IB_DISABLE=1:
    ...`, `* NCCL INFO Using network AWS Libfabric`): the log is judged, the advice was read as the run's
    environment (NCCL_IB_DISABLE '1:' from the 'command-line') before."""
    _, out = _analyze(NCCL / "markdown-notes-nccl-2.27-efa-log-in-code-block-socket.md", "--json")
    report = json.loads(out)
    assert report["nccl"]["version"] == "2.27.3+cuda12.9"
    assert report["nccl"]["net"]["network"] == "Socket"
    assert report["nccl"]["env"] == {"NCCL_SOCKET_IFNAME": "^docker0,lo"}
    assert {finding["id"] for finding in report["findings"]} == {"nccl-multinode-socket", "nccl-warnings",
                                                                  "nccl-init-slow"}
    # its `Init timings` line: 59.83 s of the 59.98 s init waiting in bootstrap
    [slow] = [finding for finding in report["findings"] if finding["id"] == "nccl-init-slow"]
    assert slow["title"].endswith("took 60.0 s (rank 0), mostly in bootstrap")
    assert "59.83 s of it in bootstrap" in slow["explanation"]
    assert report["inputs"][0]["warnings"] == []  # the advice is about the log the document holds
    _, text = _analyze(NCCL / "markdown-notes-nccl-2.27-efa-log-in-code-block-socket.md")
    assert "NCCL: NCCL 2.27.3+cuda12.9; 3 communicators, up to 4 ranks; connection lines: 7 NET" in text
    assert "[WARN] traffic between nodes uses NET/Socket (TCP)" in text


def test_an_issue_body_with_the_log_after_the_fence_on_one_line_and_an_unclosed_block(tmp_path: Path) -> None:
    """How issue comments are typed: `` ```ai:480850:... NCCL INFO ...`` (the first log line glued to the
    fence, github.com/NVIDIA/nccl/issues/857) and a block never closed: every log line is still read."""
    log = (NCCL / "nccl-2.12-2nodes-ipc-read-ib-gdrdma.log").read_text().split("\n")
    body = tmp_path / "issue.md"
    body.write_text("Sure~ My NCCL INFO log is shown below.\n```" + "\n".join(log))
    plain = tmp_path / "plain.log"
    plain.write_text("\n".join(log))
    _, from_issue = _analyze(body, "--json")
    _, from_log = _analyze(plain, "--json")
    issue, alone = json.loads(from_issue), json.loads(from_log)
    def seen(report: dict) -> list[tuple]:  # each connection and the line it was read from
        return [(c["via"], c["src_rank"], c["dst_rank"], c["channels"], c["first"]["line"], c["first"]["text"])
                for c in report["nccl"]["connections"]]

    assert seen(issue) == [(*row[:4], row[4] + 1, row[5]) for row in seen(alone)]  # one prose line above
    assert len(seen(issue)) == 5
    assert [f["id"] for f in issue["findings"]] == [f["id"] for f in alone["findings"]]
    assert issue["inputs"][0]["format"] == "nccl-log" and issue["inputs"][0]["warnings"] == []


FIXTURES = NCCL.parent


def test_tables_tools_draw_with_pipes_and_dashes_are_not_documents() -> None:
    """A delimiter-like line alone made a text a document: PyTorch's memory_summary() box (`|=====|`, a title
    row, `|-----|`) in a job log hid the NCCL lines after it as 'prose'. dcgmi and nvidia-smi frames stay
    outputs too; a README's table (a header row, then a delimiter of as many cells) stays a document."""
    from k3diag.parse.markdown import is_markdown

    for path in (NCCL / "torch-memory-summary-then-nccl-shm-attach-log.txt",
                 FIXTURES / "nvidia" / "dcgmi-diag-r3-deployment-pass-cut-dcgm-55.txt",
                 FIXTURES / "nvidia" / "nvidia-smi-390-2x-m40-table-nvidia-docker-759.txt"):
        assert not is_markdown(path.read_text()), path.name
    assert is_markdown((NCCL / "SOURCES.md").read_text())
    assert is_markdown("notes\n\n| GPU | link |\n| --- | :---: |\n| 0 | NV18 |\n")
    assert is_markdown("| GPU | link |\r\n|-----|------|\r\n")  # saved with CRLF
    assert not is_markdown("| GPU | link | NUMA |\n| --- | --- |\n")  # 3 header cells, 2 delimiter cells
    assert not is_markdown("|---|---|\n| GPU | link |\n")  # a rule above, no header: a box, not a table
    assert is_markdown("```\n|=====|\n| PyTorch CUDA memory summary |\n|-----|\n```\n")  # quoted in a fence


def test_the_nccl_lines_after_a_memory_summary_are_read() -> None:
    _, out = _analyze(NCCL / "torch-memory-summary-then-nccl-shm-attach-log.txt", "--json")
    report = json.loads(out)
    assert [record["format"] for record in report["inputs"]] == ["nccl-log"]
    assert "nccl-shm-attach-failed" in {f["id"] for f in report["findings"]}
    assert not any("Markdown document" in w for record in report["inputs"] for w in record["warnings"])
