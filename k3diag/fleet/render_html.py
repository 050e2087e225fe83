"""The fleet summary as one self-contained HTML page: no script, no external file, everything escaped.

A grid of nodes coloured by state (each cell names its node and worst finding on hover), then per group
the outliers' differences side by side against the majority, with the evidence line under each value.
"""

from __future__ import annotations

from html import escape

from k3diag.model.words import counted

_COLOURS = {"fail": "#c62828", "warn": "#ef9f00", "unknown": "#8c8c8c", "ok": "#2e7d32"}
# Outliers shown side by side in one table; more make further tables below it.
COLUMNS_PER_TABLE = 8

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:0 0 8px} h2{font-size:18px;margin:28px 0 8px} h3{font-size:15px;margin:18px 0 6px}
.totals{font-size:15px;margin:6px 0 14px} code{background:#f3f3f3;padding:1px 4px;border-radius:3px}
.grid{display:flex;flex-wrap:wrap;gap:3px;max-width:1200px}
.node{width:64px;height:30px;border-radius:3px;color:#fff;font-size:10px;line-height:30px;text-align:center;
overflow:hidden;white-space:nowrap;text-overflow:ellipsis}
.node.outlier{outline:3px solid #1a237e;outline-offset:-3px}
.legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px} th,td{border:1px solid #d0d0d0;padding:4px 8px;
vertical-align:top;text-align:left} th{background:#f5f5f5} td.diff{background:#fde7e7} td.same{color:#555}
.ev{display:block;color:#555;font-family:ui-monospace,Menlo,monospace;font-size:11px;max-width:360px;
word-break:break-all;margin-top:3px}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _grid(report: dict) -> str:
    cells = []
    for node in report["nodes"]:
        state = node["state"] if node["state"] in _COLOURS else "unknown"
        worst = node.get("worst") or {}
        tip = f"{node['node']}: {state}" + (f", {worst.get('id')} {worst.get('subject')}" if worst else "") + (
            ", outlier" if node.get("outlier") else "")
        cls = "node outlier" if node.get("outlier") else "node"
        cells.append(f'<div class="{cls}" style="background:{_COLOURS[state]}" title="{_e(tip)}" '
                     f'data-state="{state}">{_e(node["node"])}</div>')
    return '<div class="grid">' + "".join(cells) + "</div>"


def _outlier_tables(group: dict) -> str:
    outliers = group["outliers"]
    if not outliers:
        return "<p>No outlier: every node matches the majority on every feature.</p>" if group["nodes"] > 1 else (
            "<p>One node: nothing to compare it with.</p>")
    parts = []
    for start in range(0, len(outliers), COLUMNS_PER_TABLE):
        chunk = outliers[start:start + COLUMNS_PER_TABLE]
        features: list[str] = []
        majority: dict[str, str] = {}
        for outlier in chunk:
            for diff in outlier["differences"]:
                if diff["feature"] not in majority:
                    features.append(diff["feature"])
                    majority[diff["feature"]] = diff["majority"]
        head = "<tr><th>feature</th><th>majority</th>" + "".join(f"<th>{_e(o['node'])}</th>" for o in chunk) + "</tr>"
        rows = []
        for feature in features:
            cells = [f"<td>{_e(feature)}</td>", f"<td>{_e(majority[feature])}</td>"]
            for outlier in chunk:
                diff = next((d for d in outlier["differences"] if d["feature"] == feature), None)
                if diff is None:
                    cells.append('<td class="same">same as the majority</td>')
                    continue
                pairs = "".join(f'<span class="ev">{_e(p)}</span>' for p in diff.get("pairs") or [])
                evidence = f'<span class="ev">{_e(diff["evidence"])}</span>' if diff.get("evidence") else ""
                cells.append(f'<td class="diff">{_e(diff["value"])}{pairs}{evidence}</td>')
            rows.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("<table>" + head + "".join(rows) + "</table>")
    return "".join(parts)


def render_html(report: dict) -> str:
    totals = report["totals"]
    states = ", ".join(f"{totals.get(s, 0)} {s}" for s in ("fail", "warn", "unknown", "ok") if totals.get(s))
    legend = "".join(f'<span><i style="background:{colour}"></i>{state}</span>' for state, colour in _COLOURS.items())
    body = [
        "<h1>k3diag fleet summary</h1>",
        f'<p class="totals">{counted(totals["nodes"], "node")} in {counted(totals["groups"], "group")}: '
        f'{_e(states or "none readable")}; {counted(totals["outliers"], "outlier")}.</p>',
        f'<p><b>Drain ({report["drain"]["nodes"]}):</b> <code>{_e(report["drain"]["hosts"] or "none")}</code></p>',
    ]
    if report.get("outlier_hosts"):
        body.append(f'<p><b>Outliers:</b> <code>{_e(report["outlier_hosts"])}</code></p>')
    body += [f'<p class="legend">{legend}<span>outlined: outlier</span></p>', _grid(report)]
    if report["finding_counts"]:
        body.append("<h2>Findings</h2><table><tr><th>severity</th><th>finding</th><th>nodes</th><th>hosts</th></tr>")
        body += [f"<tr><td>{_e(e['severity'])}</td><td>{_e(e['id'])}</td><td>{e['nodes']}</td>"
                 f"<td><code>{_e(e['hosts'])}</code></td></tr>" for e in report["finding_counts"]]
        body.append("</table>")
    for group in report["groups"]:
        body.append(f"<h2>{_e(group['label'])}</h2>")
        body.append(f"<p>{counted(group['nodes'], 'node')}: <code>{_e(group['hosts'])}</code></p>")
        for split in group["split"]:
            values = "; ".join(f"{_e(v['value'])} on {v['nodes']}" for v in split["values"])
            body.append(f"<p>No majority for <b>{_e(split['feature'])}</b>: {values}</p>")
        body.append("<h3>Outliers against the majority</h3>" + _outlier_tables(group))
    if report["unreadable"]:
        body.append("<h2>Not read</h2><ul>" + "".join(f"<li>{_e(i['problem'])}</li>" for i in report["unreadable"]) + "</ul>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>k3diag fleet: {totals['nodes']} nodes</title><style>{_CSS}</style></head><body>"
            + "".join(body) + "</body></html>\n")
