"""The fleet summary as plain text (terminal) and as Markdown: counts, drain list, groups, odd nodes."""

from __future__ import annotations

from k3diag.fleet.shape import NOT_IN_EVIDENCE
from k3diag.model.words import counted

# Outliers listed in full per group on a terminal; the JSON and HTML outputs list every one.
MAX_OUTLIERS_SHOWN = 50


def _states(states: dict) -> str:
    return ", ".join(f"{states.get(s, 0)} {s}" for s in ("fail", "warn", "unknown", "ok") if states.get(s))


def render_text(report: dict) -> str:
    totals = report["totals"]
    lines = [
        f"k3diag fleet: {counted(totals['nodes'], 'node')} in {counted(totals['groups'], 'group')}: "
        f"{_states(totals) or 'none readable'}; {counted(totals['outliers'], 'outlier')}"
        + (f"; {counted(totals['unreadable'], 'input')} not read" if totals["unreadable"] else "")
        + (f"; {totals['damaged']} read in part" if totals.get("damaged") else ""),
    ]
    drain = report["drain"]
    lines.append(f"drain ({drain['nodes']}): {drain['hosts']}" if drain["nodes"] else "drain: no node fails")
    if report.get("outlier_hosts"):
        lines.append(f"outliers: {report['outlier_hosts']}")
    if report["finding_counts"]:
        lines.append("")
        lines.append("findings (nodes: hosts):")
        for entry in report["finding_counts"]:
            lines.append(f"  {entry['severity'].upper():4} {entry['id']}: {counted(entry['nodes'], 'node')}: {entry['hosts']}")
    for group in report["groups"]:
        lines.append("")
        lines.append(f"group {group['label']}: {counted(group['nodes'], 'node')} ({_states(group['states'])}): "
                     f"{group['hosts']}")
        if group["nodes"] < 2:
            lines.append("  one node: nothing to compare it with")
        for split in group["split"]:
            values = "; ".join(f"{v['value']} on {v['nodes']} ({v['hosts']})" for v in split["values"])
            lines.append(f"  no majority for {split['feature']}: {values}")
        for outlier in group["outliers"][:MAX_OUTLIERS_SHOWN]:
            lines.append(f"  {outlier['node']} differs from the other {group['nodes'] - 1}:")
            for diff in outlier["differences"]:
                lines.append(f"    {diff['feature']}: {diff['value']} (majority {diff['majority']} on "
                             f"{diff['majority_nodes']} of {group['nodes']})")
                for pair in diff.get("pairs") or []:
                    lines.append(f"      {pair}")
                if diff.get("evidence"):
                    lines.append(f"      evidence: {diff['evidence']}")
                elif diff["value"] not in (NOT_IN_EVIDENCE, "absent"):
                    lines.append("      evidence: the report holds the value without its input line; "
                                 "give the bundle or `k3diag check --format json` output to see it")
        hidden = len(group["outliers"]) - MAX_OUTLIERS_SHOWN
        if hidden > 0:
            lines.append(f"  and {counted(hidden, 'more outlier')}: see --json or --html")
    _listed(lines, "read in part:", [_damaged_sentence(item) for item in report.get("damaged") or []])
    _listed(lines, "not read:", [item["problem"] for item in report["unreadable"]])
    return "\n".join(lines) + "\n"


def _listed(lines: list[str], heading: str, sentences: list[str]) -> None:
    """A block of one sentence per input, the first `MAX_OUTLIERS_SHOWN` of them, after a blank line."""
    if not sentences:
        return
    lines += ["", heading] + [f"  {sentence}" for sentence in sentences[:MAX_OUTLIERS_SHOWN]]
    if len(sentences) > MAX_OUTLIERS_SHOWN:
        lines.append(f"  and {len(sentences) - MAX_OUTLIERS_SHOWN} more: see --json")


def _damaged_sentence(item: dict) -> str:
    return (f"{item['node']}: the shape stored in {item['source']} has fields k3diag does not write "
            f"({', '.join(item['fields'])}); they were left out, the rest compared")


def _md(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def render_markdown(report: dict) -> str:
    totals = report["totals"]
    out = [
        "# k3diag fleet summary",
        "",
        f"{counted(totals['nodes'], 'node')} in {counted(totals['groups'], 'group')}: "
        f"{_states(totals) or 'none readable'}; {counted(totals['outliers'], 'outlier')}.",
        "",
        f"**Drain ({report['drain']['nodes']}):** `{report['drain']['hosts']}`" if report["drain"]["nodes"]
        else "**Drain:** no node fails.",
        "",
    ]
    if report.get("outlier_hosts"):
        out += [f"**Outliers:** `{report['outlier_hosts']}`", ""]
    if report["finding_counts"]:
        out += ["## Findings", "", "| severity | finding | nodes | hosts |", "|---|---|---|---|"]
        out += [f"| {e['severity']} | `{_md(e['id'])}` | {e['nodes']} | `{_md(e['hosts'])}` |" for e in report["finding_counts"]]
        out.append("")
    for group in report["groups"]:
        out += [f"## {_md(group['label'])}", "", f"{counted(group['nodes'], 'node')} ({_states(group['states'])}): "
                f"`{_md(group['hosts'])}`", ""]
        if group["majority"]:
            out += ["| feature | majority | nodes |", "|---|---|---|"]
            out += [f"| {_md(name)} | {_md(item['value'])} | {item['nodes']} |" for name, item in group["majority"].items()]
            out.append("")
        for split in group["split"]:
            out.append(f"- no majority for **{_md(split['feature'])}**: " +
                       "; ".join(f"{_md(v['value'])} on {v['nodes']}" for v in split["values"]))
        if group["outliers"]:
            out += ["", "| node | feature | value | majority | evidence |", "|---|---|---|---|---|"]
            for outlier in group["outliers"]:
                for diff in outlier["differences"]:
                    detail = _md(diff["value"]) + ("<br>" + "<br>".join(_md(p) for p in diff["pairs"]) if diff.get("pairs") else "")
                    out.append(f"| {_md(outlier['node'])} | {_md(diff['feature'])} | {detail} | {_md(diff['majority'])} | "
                               f"{'`' + _md(diff['evidence']) + '`' if diff.get('evidence') else ''} |")
        out.append("")
    if report["unreadable"]:
        out += ["## Not read", ""] + [f"- {_md(item['problem'])}" for item in report["unreadable"]] + [""]
    if report.get("damaged"):
        out += ["## Read in part", ""] + [f"- {_md(_damaged_sentence(item))}" for item in report["damaged"]] + [""]
    return "\n".join(out)
