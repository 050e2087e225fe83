"""The audit on a terminal: rich tables with colour on a TTY, plain text when piped or NO_COLOR."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, AuditReport
from k3diag.render.escape import escape_terminal as _t
from k3diag.model.words import counted

_STYLE = {PASS: "bold green", WARN: "bold yellow", FAIL: "bold red", UNKNOWN: "bold bright_black"}


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def render_terminal(report: AuditReport, stream: TextIO | None = None, verbose: bool = True) -> None:
    stream = stream or sys.stdout
    if not use_colour(stream):
        stream.write(render_plain(report, verbose=verbose))
        return
    from rich.markup import escape as _markup
    from rich.table import Table

    def escape(text: object) -> str:
        # Bundle text never reaches the terminal as an escape sequence, nor as rich markup.
        return _markup(_t(text))

    from k3diag.render.escape import safe_console

    console = safe_console(file=stream, highlight=False, soft_wrap=False)
    console.print(f"[bold]Vendor audit:[/bold] {escape(report.source)}")
    machine_lines = report.machines_lines()
    if machine_lines:
        console.print(f"[bold yellow]{escape(machine_lines[0])}[/]")
        for line in machine_lines[1:] if verbose else []:
            console.print(f"  {escape(line)}")
    console.print(f"[{_STYLE[report.verdict]}]{escape(report.verdict_sentence())}[/]")
    table = Table(show_lines=False, expand=True)
    table.add_column("#", justify="right", width=3)
    table.add_column("verdict", width=8)
    table.add_column("question", ratio=2)
    table.add_column("answer", ratio=4)
    for number, answer in enumerate(report.answers, start=1):
        table.add_row(str(number), f"[{_STYLE[answer.verdict]}]{answer.verdict}[/]", escape(answer.question),
                      escape(answer.summary))
    console.print(table)
    if verbose:
        for number, answer in enumerate(report.answers, start=1):
            if answer.verdict == PASS and not answer.evidence:
                continue
            console.print(f"\n[{_STYLE[answer.verdict]}]{number}. {answer.verdict}[/] [bold]{escape(answer.question)}[/]")
            for line in answer.details[:12]:
                console.print(f"   {escape(line)}")
            for ref in answer.evidence[:4]:
                console.print(f"   [dim]> {escape(ref.cite())}[/dim]")
            if answer.request:
                console.print(f"   [cyan]run:[/cyan] {escape(answer.request)}")
    if report.spec:
        spec = Table(title=f"purchase spec ({escape(report.spec_path or '')})", expand=True)
        for column in ("verdict", "item", "expected", "delivered"):
            spec.add_column(column)
        for check in report.spec:
            spec.add_row(f"[{_STYLE[check.verdict]}]{check.verdict}[/]", escape(check.item), escape(check.expected),
                         escape(check.actual))
        console.print(spec)
    if report.warnings:
        console.print(f"\n[yellow]{counted(len(report.warnings), 'warning')}[/yellow]")
        for warning in report.warnings[:20]:
            console.print(f"  [yellow]-[/yellow] {escape(warning)}")


def render_plain(report: AuditReport, verbose: bool = True) -> str:
    # Every string that can carry bundle text is shown with its control characters escaped (`\x1b`):
    # piped output is still read on a terminal, by `less -R` or `cat`.
    lines = [f"Vendor audit: {_t(report.source)}"]
    machine_lines = report.machines_lines()
    if machine_lines:
        lines.append(_t(machine_lines[0]))
        lines += [f"  {_t(line)}" for line in (machine_lines[1:] if verbose else [])]
    lines += [_t(report.verdict_sentence()), ""]
    for number, answer in enumerate(report.answers, start=1):
        lines.append(f"{number:>2}. [{answer.verdict}] {_t(answer.question)}")
        lines.append(f"    {_t(answer.summary)}")
        if verbose:
            for line in answer.details[:12]:
                lines.append(f"      {_t(line)}")
            for ref in answer.evidence[:4]:
                lines.append(f"      > {_t(ref.cite())}")
        if answer.request:
            lines.append(f"    run: {_t(answer.request)}")
    if report.spec:
        lines += ["", f"Purchase spec ({_t(report.spec_path)}):"]
        for check in report.spec:
            lines.append(f"  [{check.verdict}] {_t(check.item)}: expected {_t(check.expected)}; delivered "
                         f"{_t(check.actual)}")
            if check.request:
                lines.append(f"      run: {_t(check.request)}")
    if report.warnings:
        lines += ["", f"{counted(len(report.warnings), 'warning')}:"] + [f"  - {_t(w)}" for w in report.warnings[:50]]
    return "\n".join(lines) + "\n"
