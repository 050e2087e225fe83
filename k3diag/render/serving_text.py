"""`k3diag serving` on a terminal (rich tables, colour) or piped (plain aligned text, no box drawing).

A percentile the tool did not record prints as `n/r`, and a legend line says so once.
"""

from __future__ import annotations

import os
from typing import IO

from k3diag.analyze.serving.compare import load_key, load_text
from k3diag.analyze.serving.report import ServingReport
from k3diag.model.serving import ServingRun

NOT_RECORDED = "n/r"
_METRIC_HEAD = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}  # as the latency table heads them
STATE_MARK = {"good": "ok", "bad": "BAD", "unknown": "unknown"}


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return NOT_RECORDED
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _lat(run: ServingRun, metric: str) -> str:
    latency = run.latency(metric)
    if all(latency.value(stat) is None for stat in ("p50", "p95", "p99")):
        return NOT_RECORDED
    return "/".join(_num(latency.value(stat)) for stat in ("p50", "p95", "p99"))


def throughput_rows(report: ServingReport) -> list[list[str]]:
    rows = []
    best = report.comparison.best.runs if report.comparison.best else []
    for run in report.sorted_runs():
        check = report.comparison.check_of(run)
        mark = "BEST" if any(run is b for b in best) else ""
        if check is not None and check.meets is False:
            mark = mark or "over target"
        elif check is not None and check.meets is None:
            mark = mark or "target unknown"
        rows.append([
            run.layout.label(),
            run.layout.source,
            load_text(load_key(run)).replace(" per replica", "/replica"),
            _num(run.request_per_s, 2),
            _num(run.request_per_s_per_gpu, 2),
            _num(run.output_tok_per_s),
            _num(run.output_tok_per_s_per_gpu),
            _num(run.output_tok_per_s_per_request),
            mark,
        ])
    return rows


def latency_rows(report: ServingReport) -> list[list[str]]:
    return [[run.layout.label(), load_text(load_key(run)).replace(" per replica", "/replica"),
             _lat(run, "ttft"), _lat(run, "tpot"), _lat(run, "itl"), _lat(run, "e2el")]
            for run in report.sorted_runs()]


# The most runs a table shows on a terminal or in plain text: a log of a benchmark run in a loop holds thousands
# (15,174 rows of the same run were 30,000 lines). The first ones in the table's order are shown, then the best
# layout's that fall after them (up to MAX_SHOWN_BEST_AFTER); `--json` and `--html` list every run.
MAX_SHOWN_RUNS = 60
MAX_SHOWN_BEST_AFTER = 20


def shown(rows: list[list[str]]) -> tuple[list[int], int]:
    """The indices of the throughput rows a text view shows, and how many it leaves out."""
    if len(rows) <= MAX_SHOWN_RUNS:
        return list(range(len(rows))), 0
    best_after = [i for i in range(MAX_SHOWN_RUNS, len(rows)) if rows[i][-1] == "BEST"][:MAX_SHOWN_BEST_AFTER]
    kept = list(range(MAX_SHOWN_RUNS)) + best_after
    return kept, len(rows) - len(kept)


def shown_tables(report: ServingReport) -> tuple[list[list[str]], list[list[str]], int]:
    """The throughput and latency rows a text view shows (the same runs in both), and how many it leaves out."""
    rows = throughput_rows(report)
    kept, hidden = shown(rows)
    latency = latency_rows(report)
    return [rows[i] for i in kept], [latency[i] for i in kept], hidden


def left_out_line(count: int) -> str:
    return (f"... and {count:,} more run{'s' if count != 1 else ''} not shown here; `--json` or `--html PATH` "
            "lists every run")


THROUGHPUT_HEAD = ["layout", "layout from", "load", "req/s", "req/s/GPU", "out tok/s", "out tok/s/GPU",
                   "tok/s/user", ""]
LATENCY_HEAD = ["layout", "load", "TTFT ms p50/p95/p99", "TPOT ms p50/p95/p99", "ITL ms p50/p95/p99",
                "E2E ms p50/p95/p99"]


def _plain_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def summary_lines(report: ServingReport) -> list[str]:
    comparison = report.comparison
    lines = [("Verdict: " if comparison.comparable else "") + comparison.verdict]
    if not comparison.comparable and len(comparison.reasons) > 1:
        lines.extend(f"  - {reason}" for reason in comparison.reasons)
    grouped: dict[tuple[str, str, str], int] = {}
    for run, why in comparison.excluded:
        key = (run.layout.label(), run.input, why)
        grouped[key] = grouped.get(key, 0) + 1
    for (label, name, why), count in grouped.items():
        runs = f"{count:,} runs in " if count > 1 else ""
        lines.append(f"Left out: {label} ({runs}{name}): {why}.")
    for note in comparison.notes:
        lines.append(f"Note: {note}.")
    return lines


def explanation_lines(report: ServingReport) -> list[str]:
    lines: list[str] = []
    for item in report.explanations:
        lines.append(f"{item.label}:")
        for fact in item.facts:
            text = f"  [{STATE_MARK.get(fact.state, fact.state)}] {fact.text}"
            if fact.state == "unknown" and fact.command:
                text += f"; to find out: {fact.command}"
            lines.append(text)
            for ref in fact.evidence[:2]:
                lines.append(f"      {ref.cite()}")
    if report.predictions:
        lines.append("Against what advise predicted:")
        for prediction in report.predictions:
            text = f"  {prediction.label}: [{STATE_MARK.get(prediction.state, prediction.state)}] {prediction.text}"
            if prediction.state == "unknown" and prediction.command:
                text += f"; to find out: {prediction.command}"
            lines.append(text)
    return lines


def missing_legend(report: ServingReport) -> str | None:
    missing = set()
    for run in report.runs:
        for metric in ("ttft", "tpot", "itl", "e2el"):
            if _lat(run, metric) == NOT_RECORDED:
                # a whole column of n/r (vLLM leaves out E2E by default) needs the legend as much as one cell
                missing.add(_METRIC_HEAD[metric])
                continue
            latency = run.latency(metric)
            missing.update(f"{stat.upper()} {_METRIC_HEAD[metric]}" for stat in latency.missing_percentiles())
    if not missing:
        return None
    return (f"{NOT_RECORDED} = not recorded by the tool (e.g. {', '.join(sorted(missing)[:3])}); vLLM records median "
            "and P99 only, unless run with --metric-percentiles 50,95,99, and E2E only with --percentile-metrics ttft,tpot,itl,e2el")


def render_plain(report: ServingReport) -> str:
    out: list[str] = ["Serving benchmarks by layout", ""]
    if report.runs:
        throughput, latency, hidden = shown_tables(report)
        out.append(_plain_table(THROUGHPUT_HEAD, throughput))
        if hidden:
            out.append(left_out_line(hidden))
        out.append("")
        out.append(_plain_table(LATENCY_HEAD, latency))
        if hidden:
            out.append(left_out_line(hidden))
        legend = missing_legend(report)
        if legend:
            out.append(legend)
        out.append("")
    else:
        out.append("No serving benchmark result was found in the inputs.")
        out.append("")
    out.extend(summary_lines(report))
    explanation = explanation_lines(report)
    if explanation:
        out.append("")
        out.append("Why (from the machine's evidence):" if report.machine_source else "Why:")
        out.extend(explanation)
    if report.warnings:
        out.append("")
        out.append("Warnings:")
        out.extend(f"  {w}" for w in report.warnings)
    return "\n".join(out) + "\n"


def render_terminal(report: ServingReport, stream: IO[str]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    is_terminal = hasattr(stream, "isatty") and stream.isatty()
    console = Console(file=stream, no_color=bool(os.environ.get("NO_COLOR")), highlight=False,
                      width=None if is_terminal else 200)
    if report.runs:
        table = Table(title="Serving benchmarks by layout", title_justify="left")
        for head in THROUGHPUT_HEAD:
            table.add_column(head, justify="right" if head.startswith(("req", "out", "tok")) else "left")
        throughput, latency_shown, hidden = shown_tables(report)
        for row in throughput:
            style = "bold green" if row[-1] == "BEST" else ("yellow" if row[-1] else "")
            table.add_row(*[Text(c) for c in row], style=style)
        console.print(table)
        if hidden:
            console.print(Text(left_out_line(hidden), style="dim"))
        latency = Table()
        for head in LATENCY_HEAD:
            latency.add_column(head, justify="left" if head in ("layout", "load") else "right")
        for row in latency_shown:
            latency.add_row(*[Text(c) for c in row])
        console.print(latency)
        if hidden:
            console.print(Text(left_out_line(hidden), style="dim"))
        legend = missing_legend(report)
        if legend:
            console.print(Text(legend, style="dim"))
    else:
        console.print(Text("No serving benchmark result was found in the inputs."))
    for line in summary_lines(report):
        style = "bold green" if line.startswith("Verdict:") else ("bold yellow" if line.startswith("Not ranked") else "")
        console.print(Text(line, style=style))
    explanation = explanation_lines(report)
    if explanation:
        console.print(Text("Why (from the machine's evidence):" if report.machine_source else "Why:", style="bold"))
        for line in explanation:
            style = "red" if "[BAD]" in line else ("dim" if "[unknown]" in line else "")
            console.print(Text(line, style=style))
    for warning in report.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
