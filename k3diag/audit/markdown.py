"""The audit as Markdown, for pasting into a ticket or a procurement thread."""

from __future__ import annotations

from k3diag.audit.answer import AuditReport


def _text(text: object) -> str:
    """Bundle text outside code fences: Markdown renderers pass raw HTML through, so `<` and `&`
    are written as entities and a `<script>` in a log stays text."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cell(text: object) -> str:
    # Table cells cannot hold raw pipes or newlines; bundle text may contain both.
    return _text(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _fence(lines: list[str]) -> str:
    body = "\n".join(lines)
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}text\n{body}\n{fence}"


def render_markdown(report: AuditReport) -> str:
    out: list[str] = [f"# Vendor audit: {_text(report.source)}", ""]
    manifest = report.manifest or {}
    host = manifest.get("host") if isinstance(manifest.get("host"), dict) else {}
    meta = []
    if isinstance(host, dict) and host.get("hostname"):
        meta.append(f"host {_cell(host['hostname'])}")
    if manifest.get("created"):
        meta.append(f"collected {manifest['created']}")
    if report.model:
        meta.append(f"target model {_cell(report.model)}")
    if meta:
        out += [", ".join(meta), ""]
    out += [f"**{_text(report.verdict_sentence())}**", ""]
    out += ["| # | verdict | question | answer |", "|---|---|---|---|"]
    for number, answer in enumerate(report.answers, start=1):
        out.append(f"| {number} | **{answer.verdict}** | {_cell(answer.question)} | {_cell(answer.summary)} |")
    out.append("")
    for number, answer in enumerate(report.answers, start=1):
        out += [f"## {number}. {_text(answer.question)} — {answer.verdict}", ""]
        if answer.seed:
            out += [f"> {answer.seed}", ""]
        out += [_text(answer.summary), ""]
        for line in answer.details[:40]:
            out.append(f"- {_text(line)}")
        if answer.details:
            out.append("")
        if answer.evidence:
            out += ["Evidence:", "", _fence([ref.cite() for ref in answer.evidence]), ""]
        if answer.request:
            out += ["Ask the vendor to run:", "", _fence([answer.request]), ""]
        if answer.findings:
            out += ["Findings: " + ", ".join(f"`{key}`" for key in answer.findings[:12]), ""]
    if report.spec_path:
        out += [f"## Purchase spec ({_text(report.spec_path)})", "", "| verdict | item | expected | delivered | evidence |",
                "|---|---|---|---|---|"]
        for check in report.spec:
            evidence = "; ".join(ref.cite() for ref in check.evidence)
            if check.request:
                evidence += (" " if evidence else "") + f"run: {check.request}"
            out.append(f"| **{check.verdict}** | {_cell(check.item)} | {_cell(check.expected)} | "
                       f"{_cell(check.actual)} | {_cell(evidence)} |")
        out.append("")
    if report.warnings:
        out += ["## Warnings", ""] + [f"- {_cell(w)}" for w in report.warnings[:200]] + [""]
    return "\n".join(out)
