"""NCCL / RCCL debug logs (`NCCL_DEBUG=INFO`, any `NCCL_DEBUG_SUBSYS`), NCCL 2.4 to current.

The log can be gigabytes, interleaved from thousands of ranks, wrapped in launcher prefixes
(`[1,0]<stdout>:`, `[rank3]:`, ` 0: `, `[0] `, timestamps, pdsh `host: `) and mixed with
other program output, so the parser streams and keeps bounded state: one entry per communicator
instance, each (src, dst, via, direction) once with the channels it covered, counts and first
examples of the rest; it never holds the lines.

A record is `host:pid:tid [cudaDev] NCCL INFO <body>` or
`host:pid:tid [cudaDev] <file>:<line> NCCL WARN <body>`; the version line
(`NCCL version 2.18.5+cuda12.0`) has no prefix before NCCL 2.2x. Connection bodies by era:

    Ring 00 : 26[2] -> 24[0] via P2P/IPC                         2.4-2.6 (bracket: cudaDev)
    Channel 00 : 0[4000] -> 1[5000] via direct shared memory     2.7-2.8 (bracket: busId)
    Channel 00/0 : 4[26000] -> 0[26000] [receive] via NET/IB/0/GDRDMA          2.9-2.12
    Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read               2.13+  (bracket: nvmlDev)
    Channel 09 : 6[6] -> 7[7] via SHM/direct/direct              2.13+  SHM has no /connIndex
    ... via P2P/IPC comm 0x10a5a9f0 nRanks 08                    RCCL appends the comm

Communicators are told apart by `commId` when NCCL prints it (2.13+), otherwise by size; a
connection line is attributed to the communicator its thread is initializing (the comm line
at init start in 2.4-2.6 and 2.13+, the `Init COMPLETE` line at the end in 2.7-2.12).

Modules: `patterns` (line shapes, bounds), `state` (threads, instances, folded connections),
`lines` (the exact per-line path), `handlers` (one per kind of line; `facts` for log-wide facts),
`fast` (bytes in bulk),
`pool` (a big file split across processes), `runs` (communicators built after the last line).
"""

from __future__ import annotations

import os
import stat
from typing import Iterable

from k3diag.gcpause import collector_paused
from k3diag.parse.nccl import init_state
from k3diag.parse.nccl.parser import NcclLogParser
from k3diag.parse.nccl.patterns import DETAIL_RUNS, TESTS_RANK_RE
from k3diag.parse.nccl.runs import NcclLogResult
from k3diag.parse.nccl.sniff import bus_id_from_tests_header, sniff

__all__ = [
    "DETAIL_RUNS", "NcclLogResult", "TESTS_RANK_RE", "bus_id_from_tests_header", "parse", "parse_evidence",
    "parse_bytes", "parse_path", "parse_stream", "sniff",
]


def parse_stream(lines: Iterable[str], input_name: str, first_line: int = 1,
                 command: str | None = None, excerpt: str = "") -> NcclLogResult:
    """Parse a log given as lines (with or without line endings) in bounded memory; never raises.
    This is the exact path: every line goes through the per-line classifier. `command` is the command
    line pasted before the output (`$ NCCL_P2P_DISABLE=1 torchrun ...`), when a splitter took it off.
    `excerpt`: why the caller knows the text is only part of a log (a document's code block), if it does.
    Lines given as a list are searched again for what a rank stuck in init printed last (`init_state.settle`)."""
    result = _parse_lines(lines, input_name, first_line, command)
    init_state.settle(result, lines if isinstance(lines, list) else None, first_line=first_line, excerpt=excerpt)
    return result


def _parse_lines(lines: Iterable[str], input_name: str, first_line: int, command: str | None) -> NcclLogResult:
    parser = NcclLogParser(input_name)
    if command and "NCCL_" in command:
        parser._cmdline_env(command, None)  # the prompt's own line number is not known here
    with collector_paused():
        try:
            parser.feed(lines, first_line)
        except (UnicodeError, MemoryError) as exc:  # a broken reader must cost the rest, not the report
            parser.skipped += 1
            result = parser.finish()
            result.warnings.append(f"reading stopped early ({type(exc).__name__}); the lines before were parsed")
            return result
        return parser.finish()


def parse(section, input_name: str) -> NcclLogResult:
    return parse_stream(section.text.split("\n"), input_name, first_line=section.first_line,
                        command=getattr(section, "command", None), excerpt=getattr(section, "excerpt", ""))


def parse_path(path, input_name: str | None = None, workers: int | None = None) -> NcclLogResult:
    """Parse a UTF-8 log file through the fast path, split across processes when it is big."""
    from k3diag.parse.nccl.pool import parse_file

    return parse_file(path, input_name or str(path), workers=workers)


def parse_bytes(data: bytes, input_name: str) -> NcclLogResult:
    """Parse a UTF-8 log held in memory (a bundle member) through the fast path, in one process."""
    from io import BytesIO

    from k3diag.parse.nccl.chunks import whole_line_chunks

    parser = NcclLogParser(input_name)
    with collector_paused():
        lineno = 1
        for chunk in whole_line_chunks(BytesIO(data).read, len(data)):
            lineno = parser.feed_bytes(chunk, lineno)
        result = parser.finish()
    init_state.settle(result, data=data)
    return result


def parse_evidence(item, input_name: str) -> NcclLogResult:
    """What `k3diag analyze` calls: the bytes fast path (split across cores when big) for UTF-8 text in
    a regular file or in memory; the line reader of `Evidence` for anything else (UTF-16, pipes)."""
    try:
        if item.encoding == "utf-8":
            if item.data is not None:
                return parse_bytes(item.data, input_name)
            if item.path is not None and stat.S_ISREG(os.stat(item.path).st_mode):
                return parse_path(item.path, input_name)
    except OSError:
        pass
    return parse_stream(item.iter_lines(), input_name)  # read once: a stuck rank's start line is its evidence
