"""The audit as one self-contained HTML file: inline CSS and SVG, no scripts, nothing fetched.

Everything that comes from the bundle (quoted lines, names, warnings) is escaped, and the
page carries a Content-Security-Policy that forbids scripts anyway, so a hostile log line
can only ever show up as text.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, Answer, AuditReport
from k3diag.audit.svg import render_svg
from k3diag.render.escape import escape_terminal

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
_BADGE = {PASS: "pass", WARN: "warn", FAIL: "fail", UNKNOWN: "unknown"}

_CSS = """
*{box-sizing:border-box}
body{margin:0;font-family:"DejaVu Sans",Arial,Helvetica,sans-serif;color:#212121;background:#fafafa;font-size:14px}
header{background:#263238;color:#fff;padding:14px 24px}
header h1{margin:0 0 4px 0;font-size:20px}
header .meta{font-size:12px;color:#cfd8dc}
.verdict{margin:14px 24px;padding:12px 16px;border-radius:6px;font-size:16px;font-weight:bold}
.v-pass{background:#e8f5e9;border-left:8px solid #2e7d32}
.v-warn{background:#fff8e1;border-left:8px solid #f9a825}
.v-fail{background:#ffebee;border-left:8px solid #c62828}
.v-unknown{background:#eceff1;border-left:8px solid #78909c}
.layout{display:flex;flex-wrap:wrap;gap:18px;padding:0 24px 24px 24px;align-items:flex-start}
.drawing{flex:11 1 560px;min-width:420px;background:#fff;border:1px solid #cfd8dc;border-radius:6px;padding:10px;
 overflow-x:auto}
.checklist{flex:9 1 520px;min-width:420px}
h2{font-size:16px;margin:6px 0 10px 0}
.q{background:#fff;border:1px solid #cfd8dc;border-radius:6px;padding:10px 12px;margin-bottom:10px}
.q h3{margin:0;font-size:14px;display:flex;gap:8px;align-items:baseline}
.seed{color:#607d8b;font-size:12px;margin:2px 0 6px 0}
.seed:lang(zh){font-family:"Noto Sans CJK TC","Noto Sans CJK SC","Source Han Sans TC","PingFang TC",
 "Microsoft JhengHei","WenQuanYi Micro Hei",sans-serif}
.badge{display:inline-block;flex:0 0 auto;min-width:76px;white-space:nowrap;text-align:center;padding:2px 6px;
 border-radius:4px;font-size:12px;font-weight:bold;color:#fff}
.b-pass{background:#2e7d32}.b-warn{background:#f9a825;color:#212121}.b-fail{background:#c62828}
.b-unknown{background:#78909c}
.summary{margin:4px 0}
ul.details{margin:4px 0 4px 18px;padding:0;font-size:13px}
pre.evidence{background:#f5f5f5;border:1px solid #e0e0e0;border-radius:4px;padding:6px 8px;font-size:11.5px;
 white-space:pre-wrap;word-break:break-all;margin:6px 0}
.request{font-size:12.5px;background:#e3f2fd;border-radius:4px;padding:6px 8px;margin-top:6px}
.request code{white-space:pre-wrap;word-break:break-word}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border:1px solid #cfd8dc;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#eceff1}
section.more{padding:0 24px 24px 24px}
.warnings li{font-size:12.5px;color:#5d4037}
.machines{margin:14px 24px 0 24px;padding:10px 16px;border-radius:6px;background:#fff3e0;border-left:8px solid #ef6c00;
 font-size:13px}
.machines p{margin:0 0 6px 0}.machines ul{margin:0 0 0 18px;padding:0}.machines li.sub{margin-left:18px;color:#5d4037;
 font-size:12.5px;word-break:break-word}
footer{padding:10px 24px 30px 24px;color:#78909c;font-size:12px}
"""


def _e(text: object) -> str:
    # Control characters from the bundle are shown as `\x1b`, never written into the page.
    return escape(escape_terminal(text, multiline=True), quote=True)


LANGUAGES = ("en", "zh")


def _answer_html(answer: Answer, lang: str = "en") -> str:
    badge = _BADGE.get(answer.verdict, "unknown")
    parts = [f'<div class="q" id="q-{_e(answer.id)}"><h3><span class="badge b-{badge}">{_e(answer.verdict)}</span>'
             f'<span>{_e(answer.question)}</span></h3>']
    if answer.seed and lang == "zh":
        # The seed checklist's own (Chinese) wording, only on request: without CJK fonts it is boxes.
        parts.append(f'<div class="seed" lang="zh">{_e(answer.seed)}</div>')
    parts.append(f'<p class="summary">{_e(answer.summary)}</p>')
    if answer.details:
        parts.append('<ul class="details">' + "".join(f"<li>{_e(line)}</li>" for line in answer.details[:40])
                     + "</ul>")
    if answer.evidence:
        parts.append('<pre class="evidence">' + "\n".join(_e(ref.cite()) for ref in answer.evidence) + "</pre>")
    if answer.findings:
        parts.append('<div class="seed">findings: ' + ", ".join(_e(key) for key in answer.findings[:12]) + "</div>")
    if answer.request:
        label = "Ask the vendor to run" if answer.verdict in (UNKNOWN, WARN) else "To fix and confirm"
        parts.append(f'<div class="request"><b>{label}:</b> <code>{_e(answer.request)}</code></div>')
    parts.append("</div>")
    return "".join(parts)


def render_html(report: AuditReport, lang: str = "en") -> str:
    """`lang="zh"` adds the seed article's Chinese wording under each question (English is the default)."""
    manifest = report.manifest or {}
    host = manifest.get("host") if isinstance(manifest.get("host"), dict) else {}
    meta_bits = [f"bundle {report.source}"]
    if isinstance(host, dict) and host.get("hostname"):
        meta_bits.append(f"host {host['hostname']}")
    if manifest.get("created"):
        meta_bits.append(f"collected {manifest['created']}")
    if manifest.get("k3diag_version"):
        meta_bits.append(f"by k3diag {manifest['k3diag_version']}")
    if report.model:
        meta_bits.append(f"target model {report.model}")
    if manifest.get("redaction"):
        meta_bits.append("redacted")
    verdict_class = _BADGE.get(report.verdict, "unknown")
    body: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',  # our constant, not bundle text
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>k3diag audit: {_e(report.source)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<header><h1>Vendor audit: {_e(report.source)}</h1>"
        f'<div class="meta">{" · ".join(_e(bit) for bit in meta_bits)}</div></header>',
    ]
    machine_lines = report.machines_lines()
    if machine_lines:
        items = "".join(f'<li class="{"sub" if line.startswith("  ") else "top"}">{_e(line.strip())}</li>'
                        for line in machine_lines[1:])
        body.append(f'<div class="machines"><p><b>{_e(machine_lines[0])}</b></p><ul>{items}</ul></div>')
    body += [
        f'<div class="verdict v-{verdict_class}">{_e(report.verdict_sentence())}</div>',
        '<div class="layout">',
        '<div class="drawing"><h2>The machine</h2>' + render_svg(report.drawing or {}) + "</div>",
        '<div class="checklist"><h2>The checklist</h2>' + "".join(_answer_html(a, lang) for a in report.answers) + "</div>",
        "</div>",
    ]
    if report.spec_path:
        rows = "".join(
            f'<tr><td><span class="badge b-{_BADGE.get(c.verdict, "unknown")}">{_e(c.verdict)}</span></td>'
            f"<td>{_e(c.item)}</td><td>{_e(c.expected)}</td><td>{_e(c.actual)}</td>"
            f"<td>{'<br>'.join(_e(ref.cite()) for ref in c.evidence)}"
            + (f"<br><i>run:</i> <code>{_e(c.request)}</code>" if c.request else "") + "</td></tr>"
            for c in report.spec
        )
        body.append(f'<section class="more"><h2>Purchase spec ({_e(report.spec_path)})</h2><table><tr><th>verdict</th>'
                    f"<th>item</th><th>expected</th><th>delivered</th><th>evidence</th></tr>{rows}</table></section>")
    if report.findings:
        rows = "".join(
            f"<tr><td>{_e(f.get('severity', ''))}</td><td>{_e(f.get('id', ''))}</td>"
            f"<td>{_e(', '.join(f.get('subjects') or []))}</td><td>{_e(f.get('title', ''))}</td></tr>"
            for f in report.findings[:200]
        )
        body.append('<section class="more"><h2>Analyzer findings</h2><table><tr><th>severity</th><th>id</th>'
                    f"<th>subjects</th><th>title</th></tr>{rows}</table></section>")
    if report.inputs:
        rows = "".join(f"<tr><td>{_e(i.get('path', ''))}</td><td>{_e(i.get('format', ''))}</td>"
                       f"<td>{_e(i.get('command') or '')}</td></tr>" for i in report.inputs[:300])
        body.append('<section class="more"><h2>Evidence read</h2><table><tr><th>member</th><th>format</th>'
                    f"<th>command</th></tr>{rows}</table></section>")
    if report.warnings:
        body.append('<section class="more"><h2>Warnings</h2><ul class="warnings">'
                    + "".join(f"<li>{_e(w)}</li>" for w in report.warnings[:200]) + "</ul></section>")
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    body.append(f"<footer>Generated by k3diag audit at {_e(now)}. PASS: the evidence supports it. WARN: usable with a "
                "caveat. FAIL: fix before accepting. UNKNOWN: the bundle does not say; the command to run is given."
                "</footer></body></html>")
    return "\n".join(body)
