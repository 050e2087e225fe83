"""The audit as Markdown, for pasting into a ticket or a procurement thread.

The bundle comes from someone else, and a Markdown renderer passes raw HTML through, turns
`[x](url)` into a link, `![x](url)` into a remote image and a bare `https://...` into a link. So
nothing from the bundle is written as Markdown:

- strings quoted as such (the bundle's name, host, times, member names, evidence lines, commands)
  go into code spans or fenced blocks, whose fences are longer than any backtick run inside, with
  newlines shown as `\\n`: a code span shows its text, nothing in it is markup;
- our sentences, which can carry bundle text (a GPU, device or NIC name, a warning quoting a member),
  have every character Markdown gives a meaning to backslash-escaped (`<`, `&`, `[`, `]`, `(`, `)`,
  `!`, `*`, `_`, backtick, `|`, `~`, `:` so no autolink forms), newlines turned into spaces and a
  leading block marker (`#`, `>`, `-`, `1.`) escaped, so they cannot start a heading or forge a line;
- control characters from input are shown escaped (`\\x1b`) everywhere.
"""

from __future__ import annotations

import re

from k3diag.audit.answer import AuditReport
from k3diag.render.escape import escape_terminal

_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()<>&|!~:#])")
_BLOCK_START = re.compile(r"^(\s*)([-+=>]|\d+[.)])")
_BACKTICKS = re.compile(r"`+")


def _prose(text: object) -> str:
    """A sentence that may carry bundle text, as Markdown that renders exactly as the text."""
    value = escape_terminal(text, multiline=True)
    value = " ".join(value.splitlines()) if ("\n" in value or "\r" in value) else value
    value = _MARKDOWN_PUNCTUATION.sub(r"\\\1", value)
    value = re.sub(r"(?i)\bwww\.", lambda m: m.group(0)[:3] + "\\.", value)
    return _BLOCK_START.sub(lambda m: m.group(1) + "\\" + m.group(2), value, count=1)


def _cell(text: object) -> str:
    # Table cells: prose already escapes pipes and has no newlines.
    return _prose(text)


def _code(text: object) -> str:
    """A quoted string as an inline code span: its fence is longer than any backtick run inside, it is
    padded so a leading or trailing backtick stays inside, and newlines are shown as `\\n`."""
    value = escape_terminal(text)  # newlines and controls shown escaped: one line, nothing hidden
    value = value.replace("|", "\\|")  # a table would split the span; GFM removes the backslash
    longest = max((len(run) for run in _BACKTICKS.findall(value)), default=0)
    fence = "`" * (longest + 1)
    if value.startswith("`") or value.endswith("`") or not value.strip():
        return f"{fence} {value} {fence}"  # CommonMark strips one space on each side
    return f"{fence}{value}{fence}"


def _fence(lines: list[str]) -> str:
    body = "\n".join(escape_terminal(line) for line in lines)
    longest = max((len(run) for run in _BACKTICKS.findall(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def render_markdown(report: AuditReport, lang: str = "en") -> str:
    out: list[str] = [f"# Vendor audit: {_code(report.source)}", ""]
    manifest = report.manifest or {}
    host = manifest.get("host") if isinstance(manifest.get("host"), dict) else {}
    meta = []
    if isinstance(host, dict) and host.get("hostname"):
        meta.append(f"host {_code(host['hostname'])}")
    elif isinstance(manifest.get("host"), str) and manifest["host"]:
        meta.append(f"host {_code(manifest['host'])}")
    if manifest.get("created"):
        meta.append(f"collected {_code(manifest['created'])}")
    if report.model:
        meta.append(f"target model {_code(report.model)}")
    if meta:
        out += [", ".join(meta), ""]
    machine_lines = report.machines_lines()
    if machine_lines:
        out += [f"> **{_prose(machine_lines[0])}**", ""]
        out += [("  - " if line.startswith("  ") else "- ") + _prose(line.strip()) for line in machine_lines[1:]] + [""]
    out += [f"**{_prose(report.verdict_sentence())}**", ""]
    out += ["| # | verdict | question | answer |", "|---|---|---|---|"]
    for number, answer in enumerate(report.answers, start=1):
        out.append(f"| {number} | **{answer.verdict}** | {_cell(answer.question)} | {_cell(answer.summary)} |")
    out.append("")
    for number, answer in enumerate(report.answers, start=1):
        out += [f"## {number}. {_prose(answer.question)} — {answer.verdict}", ""]
        if answer.seed and lang == "zh":
            out += [f"> {_prose(answer.seed)}", ""]
        out += [_prose(answer.summary), ""]
        for line in answer.details[:40]:
            out.append(f"- {_prose(line)}")
        if answer.details:
            out.append("")
        if answer.evidence:
            out += ["Evidence:", "", _fence([ref.cite() for ref in answer.evidence]), ""]
        if answer.request:
            out += ["Ask the vendor to run:", "", _fence([answer.request]), ""]
        if answer.findings:
            out += ["Findings: " + ", ".join(_code(key) for key in answer.findings[:12]), ""]
    if report.spec_path:
        out += [f"## Purchase spec ({_code(report.spec_path)})", "", "| verdict | item | expected | delivered | evidence |",
                "|---|---|---|---|---|"]
        for check in report.spec:
            evidence = "; ".join(_code(ref.cite()) for ref in check.evidence)
            if check.request:
                evidence += (" " if evidence else "") + f"run: {_code(check.request)}"
            out.append(f"| **{check.verdict}** | {_cell(check.item)} | {_cell(check.expected)} | "
                       f"{_cell(check.actual)} | {evidence} |")
        out.append("")
    if report.warnings:
        out += ["## Warnings", ""] + [f"- {_prose(w)}" for w in report.warnings[:200]] + [""]
    return "\n".join(out)
