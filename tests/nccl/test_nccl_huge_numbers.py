"""A line with a number no int holds (a run of over 4,300 digits: a damaged or glued line, junk in a merged
log) is one skipped line, named by its number, on both paths; the rest of the log is read as without it.

Before, `int()` raised ValueError ("Exceeds the limit (4300 digits) for integer string conversion") out of the
parser: the whole log was lost ("the nccl-log parser failed on this input"), 10 of 15 line kinds below."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.parse.nccl import parse_bytes, parse_stream

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "nccl" / "nccl-2.12-2nodes-ipc-read-ib-gdrdma.log"
DIGITS = "9" * 5000
BODIES = {
    "ring order": f"Channel 00/02 :    0 {DIGITS}",
    "channel number": f"Channel {DIGITS}/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "connection rank": f"Channel 00/0 : {DIGITS}[0] -> 1[1] via P2P/IPC/read",
    "communicator rank": f"comm 0x55d0 rank {DIGITS} nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
    "init start": f"ncclCommInitRank comm 0x55d0 rank {DIGITS} nranks 2 cudaDev 0 nvmlDev 0 busId 18000 "
                  "commId 0x1 - Init START",
    "trees": f"Trees [0] {DIGITS}/-1/-1->0->-1",
    "ring arrow": f"Ring 00 : 1 -> 0 -> {DIGITS}",
    "init timings": f"Init timings - ncclCommInitRank: rank {DIGITS} nranks 2 total 1.52 (kernels 0.21)",
    "channel counts": f"{DIGITS} coll channels, 0 collnet channels, 0 nvls channels, 16 p2p channels",
}


def _with_line(body: str | None) -> tuple[str, int | None]:
    """The log with `body` after the record header of the line it goes before (the same thread, so the bulk
    path reads it inside that thread's run of lines), and its line number."""
    lines = LOG.read_text().split("\n")
    if body is None:
        return "\n".join(lines), None
    index = next(i for i in range(len(lines) // 2, len(lines)) if " NCCL INFO Channel " in lines[i])
    header = lines[index][: lines[index].index(" NCCL INFO ") + len(" NCCL INFO ")]
    lines.insert(index, header + body)
    return "\n".join(lines), index + 1


def _seen(result) -> tuple:
    return (len(result.runs), sorted(result.hosts_seen), result.version)


@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("path", ["exact", "bulk"])
def test_a_line_with_a_huge_number_is_one_skipped_line(kind: str, path: str) -> None:
    def parse(text: str):
        if path == "exact":
            return parse_stream(text.split("\n"), "run.log")
        return parse_bytes(text.encode(), "run.log")

    plain, _ = _with_line(None)
    damaged, lineno = _with_line(BODIES[kind])
    before, after = parse(plain), parse(damaged)
    assert not any("failed" in warning for warning in after.warnings), after.warnings
    assert after.runs, "the log's communicators are read"
    assert _seen(after)[1:3] == _seen(before)[1:3]  # hosts and version as without the line
    assert after.lines_skipped == before.lines_skipped + 1 and lineno in after.skipped_lines, \
        (after.lines_skipped, after.skipped_lines, lineno)
