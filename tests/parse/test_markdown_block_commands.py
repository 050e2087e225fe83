"""A Markdown document's code block gets the command that printed it from the document, as a user wrote it:
a prompt line in the block, a bare command on its first line, a block before it that holds only the command,
or an inline-code command in the sentence right before it. The command is what tells k3diag which tool and
options produced the output (`topo -p2p w` is a write-capability matrix); prose is never read as output."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.parse.markdown import read_document

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"
ISSUE_1617 = NVIDIA / "markdown-4xh100-nv6-topo-m-command-in-inline-code-excerpt.md"
P2P_5090 = NVIDIA / "topo-p2p-2x5090-gns-tabs.txt"
runner = CliRunner()


def _report(path: Path) -> dict:
    result = runner.invoke(app, ["analyze", str(path), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return json.loads(result.stdout)


def _matrix() -> str:
    """The output block of NVIDIA/nccl#1617, as the issue has it."""
    return ISSUE_1617.read_text().split("```\n")[1]


def test_an_inline_code_command_in_the_sentence_before_the_block_is_its_command() -> None:
    report = _report(ISSUE_1617)
    [record] = report["inputs"]
    assert (record["format"], record["command"]) == ("nvidia-smi-topo-matrix", "nvidia-smi topo -m")
    assert len(report["topology"]["gpus"]) == 4
    # the earlier sentence's `nvidia-smi nvlink -R` is not the block's command, nor read as output
    assert all(i["format"] != "nvidia-smi-nvlink-remote" for i in report["inputs"])


def test_a_block_holding_only_the_command_names_the_next_blocks_command() -> None:
    for command_block in ("nvidia-smi topo -m", "$ nvidia-smi topo -m", "user@node1:~$ nvidia-smi topo -m"):
        document = f"Topology:\n\n```\n{command_block}\n```\n\nOutput:\n\n```\n{_matrix()}```\n"
        [(section, spec)] = read_document(document, "notes.md").sections
        assert (spec.name, section.command) == ("nvidia-smi-topo-matrix", "nvidia-smi topo -m"), command_block
        assert section.first_line == 10  # the output's first line in the document


def test_a_bare_command_on_the_blocks_first_line_is_its_command() -> None:
    document = f"```\nnvidia-smi topo -m\n{_matrix()}```\n"
    [(section, spec)] = read_document(document, "notes.md").sections
    assert (spec.name, section.command, section.first_line) == ("nvidia-smi-topo-matrix", "nvidia-smi topo -m", 2)


def test_the_command_decides_what_the_output_means(tmp_path: Path) -> None:
    """The GNS matrix of noonghunna/club-3090#1229: without a command its capability is unknown; the sentence
    before it (`nvidia-smi topo -p2p w`) makes it the write matrix."""
    doc = tmp_path / "p2p.md"
    doc.write_text(f"The peer matrix, from `nvidia-smi topo -p2p w`:\n\n```\n{P2P_5090.read_text()}\n```\n")
    report = _report(doc)
    assert report["inputs"][0]["command"] == "nvidia-smi topo -p2p w"
    assert {p["capability"] for p in report["topology"]["p2p"]} == {"write"}
    doc.write_text(f"The peer matrix:\n\n```\n{P2P_5090.read_text()}\n```\n")
    assert {p["capability"] for p in _report(doc)["topology"]["p2p"]} != {"write"}


def test_commands_do_not_reach_across_prose_and_prose_is_never_output() -> None:
    # three sentences between the command block and the output: they are about something else
    document = f"```\nnvidia-smi topo -m\n```\n\nOne.\nTwo.\nThree.\n\n```\n{_matrix()}```\n"
    [(section, _)] = read_document(document, "notes.md").sections
    assert section.command is None
    # a sentence naming a command, with the output pasted as prose (no block): nothing is read
    prose = "The `nvidia-smi topo -m` gives:\n\n" + _matrix()
    assert read_document(prose, "notes.md").sections == []
    # a tool's first line that begins with its own name is output, not a command
    document = "```\nnvbandwidth Version: v0.5\n```\n"
    assert read_document(document, "notes.md").sections == [] or \
        all(section.command is None for section, _ in read_document(document, "notes.md").sections)
