"""What `k3diag check --format ...` prints, for the fleet tools that read it.

Every adapter is a pure function of the JSON report (`k3diag.report/1`), its exit code and the check's
timing, so the same facts come out in each: text for a person, `nagios` (0/1/2/3 with one status line
and performance data), `npd` (node-problem-detector's custom plugin: exit 0 OK, 1 NonOK, 2 Unknown; one
line under 80 characters), `nhc` (one `ERROR: k3diag: ...` line on failure, as LBNL NHC prints), and
`prom` (Prometheus text exposition for node_exporter's textfile collector).
"""

from __future__ import annotations

import time
from pathlib import Path

from k3diag import __version__
from k3diag.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN
from k3diag.model.words import counted, one_line

FORMATS = ("text", "json", "nagios", "npd", "nhc", "prom")
NPD_MAX_LINE = 79  # node-problem-detector's example config cuts plugin output at 80 characters
NPD_OK, NPD_NONOK, NPD_UNKNOWN = 0, 1, 2
# Series per metric family, so a node with many findings or GPUs cannot blow up Prometheus.
MAX_FINDING_SERIES = 20
MAX_PAIR_GPUS = 16
MAX_LABEL_CHARS = 64
_STATE = {EXIT_OK: "OK", EXIT_WARN: "WARN", EXIT_FAIL: "FAIL", EXIT_UNKNOWN: "UNKNOWN"}
_NAGIOS = {EXIT_OK: "OK", EXIT_WARN: "WARNING", EXIT_FAIL: "CRITICAL", EXIT_UNKNOWN: "UNKNOWN"}


def _findings(report: dict, severity: str) -> list[dict]:
    return [f for f in report.get("findings") or [] if isinstance(f, dict) and f.get("severity") == severity]


def _subject(finding: dict) -> str:
    subjects = [str(s) for s in finding.get("subjects") or []]
    return ",".join(subjects) if subjects else "host"


def node_of(report: dict) -> str:
    """The node's name on one line: the formats that print it are read line by line (a Nagios status line,
    node-problem-detector's message), so whatever reached the report is never more than one line there."""
    shape = report.get("shape") or {}
    if isinstance(shape, dict) and shape.get("node") and shape.get("node") not in ("live host", "saved evidence"):
        return one_line(shape["node"])
    host = report.get("host") or {}
    return one_line(host.get("hostname") or "this node") or "this node"


def worst_finding(report: dict) -> dict | None:
    for severity in ("fail", "warn"):
        found = _findings(report, severity)
        if found:
            return found[0]
    return None


_NOTHING_ANALYZED = "Nothing could be analyzed"


def _unread_inputs(report: dict) -> str | None:
    """Why nothing could be analyzed, from the inputs' own sentences: the check formats print no Inputs
    section, so the verdict's "(see Inputs)" would point at nothing and the reason would be lost."""
    unread = [i for i in report.get("inputs") or []
              if isinstance(i, dict) and i.get("format") == "unknown" and i.get("warnings")]
    if not unread:
        return None
    path, warning = str(unread[0].get("path")), str(unread[0]["warnings"][0])
    name = Path(path).name  # a bundle's sentences name it by its file name
    said = warning if warning.startswith((f"{path}: ", f"{path} ", f"{name}: ", f"{name} ")) else f"{path}: {warning}"
    more = f" (and {counted(len(unread) - 1, 'more input')} not used)" if len(unread) > 1 else ""
    return f"{_NOTHING_ANALYZED}: {said}{more}"


def unknown_reason(report: dict) -> str:
    """Why the node could not be judged, in one sentence."""
    for note in report.get("notes") or []:
        if isinstance(note, dict) and note.get("subject") == "check":
            return str(note.get("message"))
    verdict = report.get("verdict") or {}
    if isinstance(verdict, dict) and str(verdict.get("text") or "").startswith(_NOTHING_ANALYZED):
        unread = _unread_inputs(report)
        if unread:
            return unread
    if isinstance(verdict, dict) and verdict.get("text"):
        return str(verdict["text"])
    return "nothing on this node could be analyzed"


def _tally(report: dict) -> str:
    return f"{counted(len(_findings(report, 'fail')), 'failure')}, {counted(len(_findings(report, 'warn')), 'warning')}"


def headline(report: dict, code: int, short: bool = False) -> str:
    """The worst finding as `id subject: title`, or why the node is unknown, or that all is well.

    `short` prefers the verdict's sentence for an unknown node (the deadline's says where it stopped in a
    few words) over the note's full explanation."""
    if code == EXIT_UNKNOWN:
        verdict = report.get("verdict") or {}
        if short and isinstance(verdict, dict) and str(verdict.get("text") or "").startswith(_NOTHING_ANALYZED):
            return unknown_reason(report)
        if short and isinstance(verdict, dict) and verdict.get("text"):
            return str(verdict["text"])
        return unknown_reason(report)
    worst = worst_finding(report)
    if worst is None:
        return f"no failure or warning ({_tally(report)})"
    text = f"{worst.get('id')} {_subject(worst)}: {worst.get('title') or ''}".rstrip(": ")
    if code == EXIT_OK:
        # `K3DIAG OK - ...: pcie-width-below-max GPU2` read as a contradiction: say why it passes
        return f"{text} (passes: --fail-on does not count it)"
    return text


def render_text(report: dict, code: int, timing: dict) -> str:
    node = node_of(report)
    state = _STATE.get(code, "UNKNOWN")
    lines = [f"k3diag check {node}: {state}: {headline(report, code)}"]
    for note in report.get("notes") or []:
        if isinstance(note, dict) and note.get("subject") == "node":
            lines.append(f"  node: {note.get('message')}")  # the name is a file's, not a host's: say so
    verdict = report.get("verdict") or {}
    if code != EXIT_UNKNOWN and isinstance(verdict, dict) and verdict.get("text"):
        lines.append(f"  verdict: {verdict['text']}")
    grouped: dict[tuple[str, str], list[dict]] = {}
    for severity in ("fail", "warn"):
        for finding in _findings(report, severity):
            grouped.setdefault((severity, str(finding.get("id"))), []).append(finding)
    for (severity, finding_id), group in grouped.items():
        first = group[0]
        subjects = _subject(first) if len(group) == 1 else f"{len(group):,} subjects, first {_subject(first)}"
        lines.append(f"  {severity.upper()} {finding_id} ({subjects}): {first.get('title') or ''}")
        for ref in (first.get("evidence") or [])[:1]:
            where = ref.get("input") or "input"
            if ref.get("line") is not None:
                where = f"{where}:{ref['line']}"
            lines.append(f"       evidence: {where}: {' '.join(str(ref.get('text') or '').split())}")
    lines.append(f"  checked in {timing.get('elapsed_s', 0):.1f} s of a {timing.get('deadline_s', 0):g} s deadline")
    return "\n".join(lines) + "\n"


def render_nagios(report: dict, code: int, timing: dict) -> str:
    node = node_of(report)
    perf = (f"failures={len(_findings(report, 'fail'))};;;0 warnings={len(_findings(report, 'warn'))};;;0 "
            f"duration={timing.get('elapsed_s', 0):.3f}s;;;0;{timing.get('deadline_s', 0):g}")
    return f"K3DIAG {_NAGIOS.get(code, 'UNKNOWN')} - {node}: {headline(report, code)} | {perf}\n"


def npd_exit_code(code: int) -> int:
    """k3diag's code -> node-problem-detector's: warnings and failures are NonOK, unknown stays Unknown.

    Which warnings count is `--fail-on`'s choice (with `--fail-on fail` a warning exits 0 here too)."""
    if code == EXIT_OK:
        return NPD_OK
    if code in (EXIT_WARN, EXIT_FAIL):
        return NPD_NONOK
    return NPD_UNKNOWN


def usage_answer(output_format: str, message: str) -> tuple[str, int] | None:
    """A monitoring plugin's answer to a wrong command line, (its status line, its exit code), for the
    nagios and npd formats (None for the others): UNKNOWN with a status line (Nagios plugin guidelines),
    never an empty output, which Nagios shows as "(No output returned from plugin)"."""
    if output_format == "nagios":
        return f"K3DIAG UNKNOWN - k3diag check: {message}\n", EXIT_UNKNOWN
    if output_format == "npd":
        return _npd_line(f"UNKNOWN k3diag check: {message}"), NPD_UNKNOWN
    return None


def _npd_line(line: str) -> str:
    line = one_line(line)
    if len(line) > NPD_MAX_LINE:
        line = line[: NPD_MAX_LINE - 3].rstrip() + "..."
    return line + "\n"


def render_npd(report: dict, code: int, timing: dict) -> str:
    return _npd_line(f"{_STATE.get(code, 'UNKNOWN')} {headline(report, code, short=True)}")


def render_nhc(report: dict, code: int, timing: dict) -> str:
    """One ERROR line when the node fails (or warns under `--fail-on warn`); nothing when it passes."""
    if code in (EXIT_FAIL, EXIT_WARN):
        return f"ERROR: k3diag: {' '.join(headline(report, code).split())}\n"
    return ""


# --------------------------------------------------------------------------- Prometheus


def _label(value: object) -> str:
    text = str(value)
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 3] + "..."
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _series(name: str, labels: dict[str, object], value: float | int) -> str:
    inner = ",".join(f'{key}="{_label(val)}"' for key, val in labels.items())
    number = repr(float(value)) if isinstance(value, float) else str(int(value))
    return f"{name}{{{inner}}} {number}" if inner else f"{name} {number}"


def _path_rank(path: str) -> int:
    from k3diag.model.topology import path_rank

    return path_rank(path)


def render_prom(report: dict, code: int, timing: dict, now: float | None = None) -> str:
    now = time.time() if now is None else now
    families: list[tuple[str, str, list[str]]] = []

    def family(name: str, help_text: str, lines: list[str]) -> None:
        families.append((name, help_text, lines))

    family("k3diag_build_info", "k3diag version that wrote this file (always 1).",
           [_series("k3diag_build_info", {"version": __version__}, 1)])
    family("k3diag_check_success", "1 when the node was judged and no failure was found, else 0.",
           [_series("k3diag_check_success", {}, 1 if code in (EXIT_OK, EXIT_WARN) else 0)])
    family("k3diag_check_exit_code", "Exit code of the check: 0 ok, 1 warnings, 2 failures, 3 unknown.",
           [_series("k3diag_check_exit_code", {}, code)])
    family("k3diag_check_duration_seconds", "Seconds the check took.",
           [_series("k3diag_check_duration_seconds", {}, float(timing.get("elapsed_s") or 0.0))])
    family("k3diag_last_run_timestamp_seconds", "Unix time at which the check finished.",
           [_series("k3diag_last_run_timestamp_seconds", {}, float(round(now, 3)))])
    family("k3diag_findings", "Findings of the last check by severity.",
           [_series("k3diag_findings", {"severity": s}, len(_findings(report, s))) for s in ("fail", "warn", "info")])
    counts: dict[tuple[str, str, str], int] = {}
    for severity in ("fail", "warn"):
        for finding in _findings(report, severity):
            key = (str(finding.get("id")), severity, _label(_subject(finding)))
            counts[key] = counts.get(key, 0) + 1
    kept = list(counts.items())[:MAX_FINDING_SERIES]
    family("k3diag_finding", f"1 per failing or warning finding (id, severity, subject); at most {MAX_FINDING_SERIES} series.",
           [_series("k3diag_finding", {"id": i, "severity": s, "subject": subj}, n) for (i, s, subj), n in kept])
    family("k3diag_findings_not_listed", "Failing or warning findings left out of k3diag_finding by its series limit.",
           [_series("k3diag_findings_not_listed", {}, sum(n for _, n in list(counts.items())[MAX_FINDING_SERIES:]))])
    gpus = [g for g in (report.get("topology") or {}).get("gpus") or [] if isinstance(g, dict)]
    widths, widths_max, gens, gens_max = [], [], [], []
    for gpu in sorted(gpus, key=lambda g: g.get("index", 0)):
        pcie = gpu.get("pcie") or {}
        labels = {"gpu": gpu.get("index"), "bus_id": gpu.get("bus_id") or "unknown"}
        for target, key in ((widths, "width_current"), (widths_max, "width_max"), (gens, "gen_current"), (gens_max, "gen_max")):
            if pcie.get(key) is not None:
                target.append(_series("", labels, pcie[key]))
    for name, help_text, lines in (
        ("k3diag_gpu_pcie_link_width", "Current PCIe link width (lanes) of each GPU.", widths),
        ("k3diag_gpu_pcie_link_width_max", "Maximum PCIe link width (lanes) each GPU supports.", widths_max),
        ("k3diag_gpu_pcie_link_generation", "Current PCIe generation of each GPU's link (drops at idle on NVIDIA).", gens),
        ("k3diag_gpu_pcie_link_generation_max", "Highest PCIe generation each GPU's link supports.", gens_max),
    ):
        family(name, help_text, [name + line for line in lines])
    pairs: dict[tuple[str, str], str] = {}
    wanted = {f"GPU{g.get('index')}" for g in sorted(gpus, key=lambda g: g.get("index", 0))[:MAX_PAIR_GPUS]}
    for link in (report.get("topology") or {}).get("links") or []:
        a, b, path = str(link.get("a")), str(link.get("b")), link.get("path")
        if a not in wanted or b not in wanted or not path:
            continue
        key = tuple(sorted((a, b), key=lambda n: int(n[3:])))
        if key not in pairs or _path_rank(path) < _path_rank(pairs[key]):
            pairs[key] = path  # type: ignore[index]
    family("k3diag_gpu_pair_path_rank",
           f"Path class between two GPUs as a rank, lower is better: -N for N NVLinks, -1 XGMI, 0 PIX, 2 PXB, 3 PHB, "
           f"4 NODE, 5 SYS (first {MAX_PAIR_GPUS} GPUs).",
           [_series("k3diag_gpu_pair_path_rank", {"a": a, "b": b, "path": path}, _path_rank(path))
            for (a, b), path in sorted(pairs.items(), key=lambda kv: (int(kv[0][0][3:]), int(kv[0][1][3:])))])
    out: list[str] = []
    for name, help_text, lines in families:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    return "\n".join(out) + "\n"


def write_prom_file(path: Path, text: str) -> None:
    """Written atomically (`render.output.write_text_atomic`): its temporary name (`.NAME.*.tmp`, not `*.prom`)
    is one node_exporter's textfile collector ignores, so it never reads a half-written file."""
    from k3diag.render.output import write_text_atomic

    write_text_atomic(path, text)


def render(fmt: str, report: dict, code: int, timing: dict) -> str:
    if fmt == "json":
        from k3diag.model import json_text

        return json_text.dumps(report, indent=2, default=str) + "\n"
    renderer = {"text": render_text, "nagios": render_nagios, "npd": render_npd, "nhc": render_nhc,
                "prom": render_prom}[fmt]
    return renderer(report, code, timing)

