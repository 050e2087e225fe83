"""What the NCCL equivalence tests compare: everything a user sees of a result (evidence lines
included), and the reference every other path is held to: the exact path over the lines of a text,
optionally reading every log-wide fact line again (`patterns.read_once` off)."""

from __future__ import annotations

import dataclasses
import json

from k3diag.model.source import SourceRef
from k3diag.parse.nccl import parse_stream
from k3diag.parse.nccl import patterns as P


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


def exact(text: str, input_name: str, every_line: bool = False) -> str:
    """`canon` of the exact path over `text`'s lines; `every_line`: each log-wide fact line is read
    again, not once per host and text (what the once-per-host rule must not change)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not every_line:
        return canon(parse_stream(lines, input_name))
    read_once = P.read_once
    P.read_once = lambda body: False
    try:
        return canon(parse_stream(lines, input_name))
    finally:
        P.read_once = read_once
