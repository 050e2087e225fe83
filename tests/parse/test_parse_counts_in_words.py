"""What the parsers say about what they could not place counts in words: '1 value after the GPU0 row that no
column names', '2 values ... that no column name'; '1 nccl-log line in a code block ... it was not judged'."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.parse import nvidia_topo_matrix
from k3diag.parse.text import Section

REPO = Path(__file__).resolve().parents[2]
TOPO = (REPO / "fixtures" / "nvidia" / "topo-m-2gpu-nv2-numa-na.txt").read_text()


def _warnings(text: str) -> list[str]:
    return nvidia_topo_matrix.parse(Section(text=text, first_line=1), "topo.txt").warnings


def test_values_no_column_names_one_and_several() -> None:
    lines = TOPO.splitlines()
    one = "\n".join([lines[0], lines[1] + "    7", *lines[2:]]) + "\n"
    assert "line 2: 1 value after the GPU0 row that no column names: '7'" in _warnings(one), _warnings(one)
    two = "\n".join([lines[0], lines[1] + "    7    8", *lines[2:]]) + "\n"
    assert "line 2: 2 values after the GPU0 row that no column name: '7 8'" in _warnings(two), _warnings(two)


def test_nccl_lines_quoted_in_a_markdown_code_block_one_and_several(tmp_path: Path) -> None:
    source = (REPO / "fixtures" / "nccl" / "markdown-notes-quotes-3-nccl-lines-socket.md").read_text()
    one = tmp_path / "notes.md"
    one.write_text(source.replace("NCCL INFO NET/Plugin: Could not find: libnccl-net.so\n", "")
                   .replace("NCCL INFO NET/IB : No device found.\n", ""))
    result = CliRunner().invoke(app, ["analyze", str(one), "--json"])
    assert ("notes.md: line 100 of this Markdown document quote 1 nccl-log line in a code block: too few to be a run's log "
            "(a document needs 10 across its code blocks), so it was not judged; give the log itself as a file to "
            "have it read") in result.stdout, result.stdout[-800:]
