"""The warnings of an NCCL log's result: every line not read and every record counted but not kept, in words."""

from __future__ import annotations

from k3diag.model.words import counted
from k3diag.parse.nccl import patterns as P


def log_warnings(parser, result) -> None:
    """The sentences a reader needs about what the log held and what was not kept: lines that could not be
    read, bounds reached (with how many were counted), communicators summarized, conflicting settings."""
    warnings = result.warnings
    if getattr(parser, "read_error", None):
        warnings.append(parser.read_error)
    if parser.skipped:
        warnings.append(f"{counted(parser.skipped, 'NCCL line')} could not be read (cut or interleaved with other "
                        f"output); first at {_lines_at(result.skipped_lines)}")
    if parser.junk:
        junk_lines = sorted(parser.junk_lines)[: P.MAX_EXAMPLES]
        warnings.append(f"{counted(parser.junk, 'line')} of binary or undecodable data {_were(parser.junk)} skipped; "
                        f"first at {_lines_at(junk_lines)}")
    if parser.unknown_conn:
        warnings.append(f"{counted(parser.unknown_conn, 'connection line')} "
                        f"{'names' if parser.unknown_conn == 1 else 'name'} a transport k3diag does not know; "
                        "not counted")
    for kind, number in sorted(parser.not_kept.items()):
        one, many, bound = P.NOT_KEPT[kind]
        if kind == "cut_threads":
            warnings.append(P.CUT_THREADS_SENTENCE.format_map({**vars(P), "threads": counted(number, one, many)}))
            continue
        floor = "at least " if kind in parser.not_kept_more else ""
        warnings.append(f"{floor}{counted(number, one, many)} {'were' if floor else _were(number)} "
                        "counted but not kept "
                        f"({bound.format_map(vars(P))}; a bound that keeps memory fixed; "
                        "`nccl_summary.not_kept` in --json)")
    trees_not_kept = sum(run.trees_not_kept for run in result.runs)
    if trees_not_kept:
        warnings.append(f"{counted(trees_not_kept, 'tree entry', 'tree entries')} of the communicators reported in "
                        f"full {_were(trees_not_kept)} counted but not kept: at most "
                        f"{P.MAX_TREES_PER_RUN:,} per communicator (`trees_not_kept` of each run in --json)")
    summary = result.summary
    if summary.runs_summarized:
        warnings.append(f"{summary.runs_total} communicators in this log: {summary.runs_detailed} reported in full "
                        f"(those that show a problem, then the largest), {summary.runs_summarized} summarized with "
                        "exact counters (`nccl_summary` in --json)")
    for name, values in sorted(parser.env_conflicts.items()):
        warnings.append(f"{name} has different values in this log ({', '.join(sorted(values))}); "
                        "the first one is reported")
    if not result.runs and not parser.lines_nccl:
        warnings.append("no NCCL/RCCL log lines found; run the job with NCCL_DEBUG=INFO "
                        "NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET and give its output")


def _were(number: int) -> str:
    return "was" if number == 1 else "were"


def _lines_at(numbers: list[int]) -> str:
    """`line 5` or `lines 5, 9, 12`: where the first examples are."""
    return ("line " if len(numbers) == 1 else "lines ") + ", ".join(str(n) for n in numbers)
