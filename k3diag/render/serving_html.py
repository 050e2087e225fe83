"""`k3diag serving --html`: one self-contained page, inline CSS and SVG, no scripts, nothing fetched.

Two charts: latency against per-GPU throughput (one line per layout through its concurrency points, the
latency target as a dashed line), and the per-GPU throughput of each ranked layout as bars. Every string
from the inputs (file names, model names, log lines) is escaped; the page's Content-Security-Policy
forbids scripts anyway.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from k3diag.analyze.serving.compare import load_key, load_text, shape_key
from k3diag.analyze.serving.report import ServingReport
from k3diag.model.serving import ServingRun
from k3diag.render.serving_text import LATENCY_HEAD, THROUGHPUT_HEAD, latency_rows, throughput_rows

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
# Colour-blind-safe palette (Okabe-Ito), one per layout shape.
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
_DASHES = ("", "6 3", "2 3", "8 3 2 3")

_CSS = """
*{box-sizing:border-box}
body{margin:0;font-family:"DejaVu Sans",Arial,Helvetica,sans-serif;color:#212121;background:#fafafa;font-size:14px}
header{background:#263238;color:#fff;padding:14px 24px}
header h1{margin:0 0 4px 0;font-size:20px}
header .meta{font-size:12px;color:#cfd8dc}
.verdict{margin:14px 24px;padding:12px 16px;border-radius:6px;font-size:15px;font-weight:bold}
.v-ok{background:#e8f5e9;border-left:8px solid #2e7d32}
.v-no{background:#fff8e1;border-left:8px solid #f9a825}
.charts{display:flex;flex-wrap:wrap;gap:18px;padding:0 24px}
.chart{background:#fff;border:1px solid #cfd8dc;border-radius:6px;padding:10px;flex:1 1 560px}
.chart h2,section h2{font-size:15px;margin:4px 0 8px 0}
section{padding:8px 24px}
table{border-collapse:collapse;background:#fff;font-size:12px;margin-bottom:10px}
th,td{border:1px solid #cfd8dc;padding:3px 7px;text-align:left;white-space:nowrap}
th{background:#eceff1}
tr.best td{background:#e8f5e9;font-weight:bold}
ul{margin:4px 0 10px 18px;padding:0}
li{margin:2px 0}
.bad{color:#b71c1c}.good{color:#1b5e20}.unknown{color:#546e7a}
.ev{font-family:"DejaVu Sans Mono",monospace;font-size:11px;color:#455a64;white-space:pre-wrap;word-break:break-all}
.legend{font-size:12px;color:#546e7a}
"""


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/r"
    return f"{value:,.{digits}f}"


def _latency_of(run: ServingRun, stat: str) -> tuple[float | None, str]:
    """The TPOT the chart plots: the target's percentile, else P50, else the mean; and which it is."""
    for name in (stat, "p50", "mean"):
        value = run.tpot.value(name)
        if value is not None:
            return value, name
    return None, stat


def _series(report: ServingReport) -> list[tuple[str, tuple, list[ServingRun]]]:
    groups: dict[tuple, list[ServingRun]] = {}
    for run in report.runs:
        if run.output_tok_per_s_per_gpu is None:
            continue
        groups.setdefault(run.layout.key(), []).append(run)
    out = []
    for key, runs in groups.items():
        runs.sort(key=lambda r: (load_key(r) or ("", 0.0))[1])
        out.append((runs[0].layout.label(), shape_key(runs[0]), runs))
    return sorted(out, key=lambda item: (item[1][0] or 0, item[0]))


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    for step in (1, 2, 2.5, 5, 10):
        magnitude = 10 ** len(str(int(value))) / 10
        candidate = step * magnitude
        if candidate >= value * 1.05:
            return candidate
    return value * 1.1


def latency_chart(report: ServingReport) -> str:
    series = _series(report)
    stat = report.comparison.slo.stat
    width, height, left, right, top, bottom = 640, 380, 64, 170, 20, 52
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [(run.output_tok_per_s_per_gpu or 0.0, _latency_of(run, stat)[0]) for _, _, runs in series for run in runs]
    xs = [x for x, _ in points] or [1.0]
    ys = [y for _, y in points if y is not None] or [1.0]
    slo = report.comparison.slo.tpot_ms
    x_max = _nice_max(max(xs))
    y_max = _nice_max(max(ys + ([slo] if slo else [])))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="TPOT against output tokens per second per GPU">']
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#ffffff" stroke="#90a4ae"/>')
    for i in range(6):
        gx = left + plot_w * i / 5
        gy = top + plot_h * i / 5
        parts.append(f'<line x1="{gx:.1f}" y1="{top}" x2="{gx:.1f}" y2="{top + plot_h}" stroke="#eceff1"/>')
        parts.append(f'<line x1="{left}" y1="{gy:.1f}" x2="{left + plot_w}" y2="{gy:.1f}" stroke="#eceff1"/>')
        parts.append(f'<text x="{gx:.1f}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle">'
                     f'{x_max * i / 5:,.0f}</text>')
        parts.append(f'<text x="{left - 6}" y="{top + plot_h - plot_h * i / 5 + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{y_max * i / 5:,.0f}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 12}" font-size="12" text-anchor="middle">'
                 'output tokens/s per GPU</text>')
    parts.append(f'<text x="16" y="{top + plot_h / 2:.1f}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 16 {top + plot_h / 2:.1f})">TPOT ms ({escape(stat.upper())}; P50 or mean '
                 'where not recorded)</text>')
    if slo:
        sy = top + plot_h - plot_h * slo / y_max
        parts.append(f'<line x1="{left}" y1="{sy:.1f}" x2="{left + plot_w}" y2="{sy:.1f}" stroke="#c62828" '
                     'stroke-dasharray="5 4" stroke-width="1.5"/>')
        parts.append(f'<text x="{left + plot_w - 4}" y="{sy - 5:.1f}" font-size="11" fill="#c62828" '
                     f'text-anchor="end">target {slo:g} ms</text>')
    shapes = sorted({key for _, key, _ in series}, key=lambda k: (k[0] or 0, k[1]))
    for index, (label, key, runs) in enumerate(series):
        colour = _COLOURS[shapes.index(key) % len(_COLOURS)]
        dash = _DASHES[sum(1 for _, k, _ in series[:index] if k == key) % len(_DASHES)]
        coords = []
        for run in runs:
            y, _ = _latency_of(run, stat)
            if y is None:
                continue
            cx = left + plot_w * (run.output_tok_per_s_per_gpu or 0) / x_max
            cy = top + plot_h - plot_h * y / y_max
            coords.append((cx, cy, run))
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in coords)
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        for cx, cy, run in coords:
            concurrency = run.concurrency_per_replica
            tip = f"{label}, {load_text(load_key(run))}"
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{colour}"><title>{escape(tip)}</title></circle>')
            if concurrency is not None:
                parts.append(f'<text x="{cx + 6:.1f}" y="{cy - 6:.1f}" font-size="10" fill="{colour}">c{concurrency:g}</text>')
        ly = top + 14 + index * 18
        lx = left + plot_w + 12
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 22}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        parts.append(f'<text x="{lx + 28}" y="{ly}" font-size="11">{escape(_short(label))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(label: str, limit: int = 22) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def bars_chart(report: ServingReport) -> str:
    comparison = report.comparison
    if comparison.comparable:
        items = [(r.label, r.per_gpu, i == 0) for i, r in enumerate(comparison.ranking)]
        caption = f"ranked at {comparison.load}"
    else:
        best: dict[str, float] = {}
        for run in report.runs:
            if run.output_tok_per_s_per_gpu is not None:
                label = run.layout.label()
                best[label] = max(best.get(label, 0.0), run.output_tok_per_s_per_gpu)
        items = [(label, value, False) for label, value in sorted(best.items(), key=lambda kv: -kv[1])]
        caption = "not ranked (see why below): each layout's highest measured value"
    width, bar_h, gap, left = 640, 26, 10, 190
    height = 40 + len(items) * (bar_h + gap) + 10
    top_value = _nice_max(max([v for _, v, _ in items] or [1.0]))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             'aria-label="output tokens per second per GPU by layout">']
    parts.append(f'<text x="{left}" y="16" font-size="11" fill="#546e7a">{escape(caption)}</text>')
    for index, (label, value, best_one) in enumerate(items):
        y = 30 + index * (bar_h + gap)
        w = (width - left - 70) * value / top_value
        colour = "#2e7d32" if best_one else ("#78909c" if not comparison.comparable else "#0072B2")
        parts.append(f'<text x="{left - 8}" y="{y + bar_h * 0.68:.1f}" font-size="12" text-anchor="end">'
                     f'{escape(_short(label, 28))}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{colour}" rx="3">'
                     f'<title>{escape(label)}: {value:,.1f} tok/s/GPU</title></rect>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + bar_h * 0.68:.1f}" font-size="12">{value:,.1f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(head: list[str], rows: list[list[str]], best_col: int | None = None) -> str:
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cls = ' class="best"' if best_col is not None and row[best_col] == "BEST" else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def render_html(report: ServingReport) -> str:
    comparison = report.comparison
    generated = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    sources = sorted({run.input for run in report.runs})
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        "<title>k3diag serving: layouts compared</title>",
        f"<style>{_CSS}</style></head><body>",
        "<header><h1>Serving benchmarks by layout</h1>",
        f'<div class="meta">{len(report.runs)} runs from {len(sources)} files; machine: '
        f'{escape(report.machine_source or "not given")}; generated {generated} by k3diag</div></header>',
        f'<div class="verdict {"v-ok" if comparison.comparable else "v-no"}">{escape(comparison.verdict)}</div>',
        '<div class="charts">',
        '<div class="chart"><h2>Latency against throughput per GPU</h2>' + latency_chart(report) + "</div>",
        '<div class="chart"><h2>Output tokens/s per GPU</h2>' + bars_chart(report) + "</div>",
        "</div>",
    ]
    if comparison.reasons or comparison.notes or comparison.excluded:
        parts.append("<section><h2>Comparability</h2><ul>")
        parts.extend(f"<li class=\"bad\">{escape(reason)}</li>" for reason in comparison.reasons)
        parts.extend(f"<li>{escape(run.layout.label())} ({escape(run.input)}): {escape(why)}</li>"
                     for run, why in comparison.excluded)
        parts.extend(f"<li>{escape(note)}</li>" for note in comparison.notes)
        parts.append("</ul></section>")
    parts.append("<section><h2>Runs</h2>")
    parts.append(_table(THROUGHPUT_HEAD, throughput_rows(report), best_col=len(THROUGHPUT_HEAD) - 1))
    parts.append(_table(LATENCY_HEAD, latency_rows(report)))
    parts.append('<div class="legend">n/r: not recorded by the tool. vLLM records P50 and P99 only unless run with '
                 "--metric-percentiles 50,95,99.</div></section>")
    if report.explanations or report.predictions:
        parts.append("<section><h2>Why: the machine's evidence</h2>")
        for item in report.explanations:
            parts.append(f"<h3>{escape(item.label)}</h3><ul>")
            for fact in item.facts:
                text = escape(fact.text)
                if fact.state == "unknown" and fact.command:
                    text += f" (to find out: <code>{escape(fact.command)}</code>)"
                evidence = "".join(f'<div class="ev">{escape(ref.cite())}</div>' for ref in fact.evidence[:2])
                parts.append(f'<li class="{escape(fact.state)}">[{escape(fact.state)}] {text}{evidence}</li>')
            parts.append("</ul>")
        if report.predictions:
            parts.append("<h3>Against what advise predicted</h3><ul>")
            parts.extend(f'<li class="{escape(p.state)}">{escape(p.label)}: {escape(p.text)}</li>'
                         for p in report.predictions)
            parts.append("</ul>")
        parts.append("</section>")
    if report.warnings:
        parts.append("<section><h2>Warnings</h2><ul>")
        parts.extend(f"<li>{escape(w)}</li>" for w in report.warnings)
        parts.append("</ul></section>")
    parts.append("</body></html>\n")
    return "".join(parts)
