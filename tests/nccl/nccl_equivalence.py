"""What the NCCL equivalence tests compare: everything a user sees of a result (evidence lines
included), and the reference every other path is held to: the exact path over the lines of a text,
optionally reading every log-wide fact line again (`patterns.read_once` off)."""

from __future__ import annotations

import contextlib
import dataclasses
import json

from k3diag.model.source import SourceRef
from k3diag.parse.nccl import parse_stream
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl.parser import NcclLogParser


def sources(value, out: list) -> list:
    """Every evidence line reachable from a record, in field order (the net's, the environment's...)."""
    if isinstance(value, SourceRef):
        out.append(value.to_json())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            sources(getattr(value, item.name), out)
    elif isinstance(value, dict):
        for item in value.values():
            sources(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            sources(item, out)
    return out


def canon(result) -> str:
    """Everything a user sees of a result, evidence lines included."""
    out = {"warnings": result.warnings, "library": result.library, "version": result.version,
           "lines": [result.lines_total, result.lines_nccl, result.lines_skipped, result.skipped_lines],
           "hosts": {h: s.to_json() for h, s in result.hosts_seen.items()}, "summary": result.summary.to_json()}
    runs = []
    for run in result.runs:
        data = run.to_json()
        data["evidence"] = [[c.source.to_json() for c in run.connections],
                            [r.source.to_json() if r.source else None for r in run.ranks],
                            [r.source.to_json() if r.source else None for r in run.rings],
                            [t.source.to_json() if t.source else None for t in run.trees]]
        data["all_evidence"] = sources(run, [])
        runs.append(data)
    out["runs"] = runs
    return json.dumps(out, sort_keys=True, default=str)


class _Forgetful(dict):
    """A cache that never keeps anything: the reference reads every line from its text."""

    def __setitem__(self, key, value) -> None:
        pass


@contextlib.contextmanager
def _line_caches_off():
    """The reference path without the cache of connection-line texts (`NcclLogParser.conn_tails`), which
    the other paths use: what they give must not depend on what was read before."""
    init = NcclLogParser.__init__

    def forgetful_init(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self.conn_tails = _Forgetful()

    NcclLogParser.__init__ = forgetful_init
    try:
        yield
    finally:
        NcclLogParser.__init__ = init


def exact(text: str, input_name: str, every_line: bool = False) -> str:
    """`canon` of the exact path over `text`'s lines, each connection line read from its own text;
    `every_line`: each log-wide fact line is read again, not once per host and text (what the
    once-per-host rule must not change)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    with _line_caches_off():
        if not every_line:
            return canon(parse_stream(lines, input_name))
        read_once = P.read_once
        P.read_once = lambda body: False
        try:
            return canon(parse_stream(lines, input_name))
        finally:
            P.read_once = read_once
