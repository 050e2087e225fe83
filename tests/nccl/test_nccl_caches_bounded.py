"""Untrusted logs of long odd lines: the parser's caches (per distinct prefix, line text, connection text,
stretch of `Channel` lines) keep what recurs, so such lines must not make them hold the log; the record
header before a long run of junk is found in linear time. Such a log reads as the exact path reads it."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from nccl_equivalence import canon, exact

from k3diag.parse.nccl import parse_bytes, parse_stream
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl.parser import NcclLogParser

LONG = 6000  # characters of odd text in each line: far past any cache's key limit


def _odd_log(count: int) -> str:
    lines = []
    for index in range(count):
        pre = f"{'x' * LONG}{index} h1:1:2 [0] NCCL INFO "  # junk glued before the record header
        lines += [
            pre + f"Channel {index % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC",
            f"h1:1:2 [0] NCCL INFO Channel {index % 32:02d}/0 : 0[0] -> 1[1] via P2P/{'y' * LONG}{index}",
            f"h1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_{index}:1/IB {'z' * LONG}",
            f"h1:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 {'[1] -1/-1/-1->0->1 ' * (LONG // 20)}{index}",
            f"h1:1:2 [0] NCCL INFO Channel {index % 32:02d} :    0   1 {'  2' * (LONG // 3)} {index}",
            f"h1:1:2 [0] NCCL INFO Setting affinity for GPU 0 to {'f' * LONG}{index}",
        ]
    # the same thread's ordinary lines around them, so that the bulk path's runs take them too
    block = [f"h1:1:2 [0] NCCL INFO Channel {ch:02d}/0 : 0[0] -> 1[1] via P2P/IPC" for ch in range(16)]
    return "\n".join(block + lines + block) + "\n"


def _held_text(parser: NcclLogParser) -> int:
    """Characters (or bytes) of text the parser's caches hold as keys."""
    total = 0
    for value in vars(parser).values():
        if isinstance(value, (dict, set)) and len(value) < 1_000_000:
            for key in value:
                for part in key if isinstance(key, tuple) else (key,):
                    if isinstance(part, (str, bytes)):
                        total += len(part)
    return total


def test_long_lines_that_never_recur_are_not_kept() -> None:
    text = _odd_log(150)
    data = text.encode()
    assert len(data) > 5_000_000
    parser = NcclLogParser("odd.log")
    parser.feed_bytes(data, 1)
    assert _held_text(parser) < 200_000, _held_text(parser)
    parser = NcclLogParser("odd.log")
    parser.feed(text.split("\n")[:-1], 1)
    assert _held_text(parser) < 200_000, _held_text(parser)
    # and nothing read differs from reading every line from its own text
    assert canon(parse_bytes(data, "odd.log")) == exact(text, "odd.log")


def test_the_odd_log_is_read_not_skipped() -> None:
    """What the user sees of it: every line counted, the ring of plain lines in full, each odd transport
    text its own connection."""
    result = parse_bytes(_odd_log(20).encode(), "odd.log")
    assert (result.lines_total, result.lines_skipped) == (16 * 2 + 20 * 6, 0)
    by_via = {conn.via: conn for run in result.runs for conn in run.connections}
    assert by_via["P2P/IPC"].to_json()["channel_count"] == 20  # channels 00-15, then 16-19 of the glued lines
    assert sum(via.startswith("P2P/yyy") for via in by_via) == 20


# The record-header patterns as first written, tried at every character: the reference for what the
# anchored ones (tried only where a run of host characters starts, linear in the junk before a header) find.
_PLAIN_HEADER = re.compile(
    r"(?P<host>[^\s:\x00\ufffd]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\](?: (?P<file>\S+?):(?P<fline>\d+))?\s*$")
_PLAIN_NOPID = re.compile(r"(?P<host>[^\s:\[\]\x00\ufffd]+) \[(?P<dev>\d+)\](?: (?P<file>\S+?):(?P<fline>\d+))?\s*$")
_PIECES = ["a", "1", ":", " ", "[", "]", "x", "\x00", "\ufffd", "0", "\t", "h1:1:2 [0]", "host [3]",
           " misc/socket.cc:49", "<c>:5:6 [1] ", "[1,0]<stdout>:"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=14))
def test_record_headers_are_found_as_a_search_from_every_character_finds_them(pieces: list[str]) -> None:
    text = "".join(pieces)
    for anchored, plain in ((P.PREFIX_RE, _PLAIN_HEADER), (P.PREFIX_NOPID_RE, _PLAIN_NOPID)):
        found, expected = anchored.search(text), plain.search(text)
        assert (found and (found.span(), found.groupdict())) == (expected and (expected.span(), expected.groupdict()))


def _job(job: int, transport: str) -> list[str]:
    """One 2-rank job on one host: init, a tree and a ring per rank, complete."""
    lines = []
    for rank in range(2):
        pre = f"h1:{100 + 2 * job + rank}:{200 + 2 * job + rank} [{rank}] NCCL INFO "
        ptr = f"0x{0x5500 + 16 * job + rank:x}"
        common = f"rank {rank} nranks 2 cudaDev {rank} nvmlDev {rank} busId {rank + 1}b000 commId 0x{job + 1:x}"
        lines += [pre + f"ncclCommInitRank comm {ptr} {common} - Init START",
                  pre + f"comm {ptr} rank {rank} nRanks 2 nNodes 1 localRanks 2 localRank {rank} MNNVL 0",
                  pre + f"Trees [0] {1 - rank if rank == 0 else -1}/-1/-1->{rank}->{-1 if rank == 0 else 0}",
                  pre + f"Channel 00/0 : {rank}[{rank}] -> {1 - rank}[{1 - rank}] via {transport}",
                  pre + f"ncclCommInitRank comm {ptr} {common} - Init COMPLETE"]
    return lines


def test_a_late_run_reported_in_full_keeps_its_trees(monkeypatch) -> None:
    """The bound on trees held while reading counts the trees of communicators not yet built: a run built
    (in full or summarized) gives its back. It counted every tree ever read, so past it the trees of
    every later run were dropped, silently, and the run that matters most, a late job that fell back to
    shared memory between GPUs of one host, came out in full but without its trees."""
    monkeypatch.setattr(P, "MAX_TREES", 12)
    lines = [line for job in range(30) for line in _job(job, "P2P/CUMEM/read")] + _job(30, "SHM/direct/direct")
    text = "\n".join(lines) + "\n"
    for result in (parse_bytes(text.encode(), "jobs.log"), parse_stream(text.split("\n")[:-1], "jobs.log")):
        late = [run for run in result.runs if run.comm_id == "0x1f"]
        assert len(late) == 1 and {c.via for c in late[0].connections} == {"SHM/direct/direct"}
        assert len(late[0].trees) == 2, late[0].trees
