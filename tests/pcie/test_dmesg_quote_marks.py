"""A kernel log quoted in a reply, or in a reply to a reply (`> > [74785.660380] pcieport ...`), reads as the
log itself: the quote marks are the ones `text.unquote_reply` takes (one spelling, `text.QUOTE_MARKS`), so
dmesg and the topo/lspci readers agree on what a mark is. Before, dmesg took one `>` only (and a tab after
it, which the others leave as the quoted output's column separator)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.parse import dmesg
from k3diag.parse.text import Section, unquote_reply

PCIE = Path(__file__).resolve().parents[2] / "fixtures" / "pcie"
LOG = (PCIE / "dmesg-aer-surprise-down-xid79-gpu-burn.txt").read_text()
runner = CliRunner()


def _events(path: Path) -> list[tuple]:
    result = runner.invoke(app, ["analyze", str(path), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    report = json.loads(result.stdout)
    return [(e["kind"], e["bdf"], e["severity"], e["code"], e["timestamp"], e["source"]["line"])
            for e in report["platform"]["events"]]


def test_a_log_quoted_in_a_reply_to_a_reply_keeps_its_timestamps(tmp_path: Path) -> None:
    plain, nested = tmp_path / "dmesg.txt", tmp_path / "reply.txt"
    plain.write_text(LOG)
    nested.write_text("".join("> > " + line + "\n" for line in LOG.split("\n")))
    assert _events(nested) == _events(plain)
    assert [event[4] for event in _events(nested)] == [74785.66038, 74889.542044, 74889.644138]


def test_dmesg_reads_a_quote_mark_as_unquote_reply_does() -> None:
    line = "[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."
    for mark in ("> ", ">", "> > ", ">> ", "  > ", ">\t"):
        unquoted, quoted = unquote_reply([mark + line] * 3)
        assert quoted
        events = dmesg.parse(Section(text=mark + line, first_line=1), "q").events
        # the stamp is read exactly where unquoting leaves the kernel line itself
        assert (events[0].timestamp is not None) == (unquoted[0] == line), repr(mark)
        assert (events[0].code, events[0].bdf) == (79, "0000:02:00.0")
