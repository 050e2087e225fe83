"""The terminal report, one screen by default: the verdict, the root causes with their evidence and fix, the
advice and what is not known, one ready-to-paste launch line per TP group, and a pointer to `--details`.

`--details` adds the tables (GPUs, the path matrix, P2P, PCIe paths, NCCL transports, benchmarks), every
finding in full with its causes, and the TP plan at every size (`k3diag.render.details`). Plain text through
`k3diag.render.plain`: colour on a terminal only, no box drawing, no rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from k3diag.model.words import counted, per_kind
from k3diag.render.plain import Out
from k3diag.render.text import (
    SEVERITY_LABEL,
    SEVERITY_STYLE,
    STATUS_LABEL,
    STATUS_STYLE,
    first_sentence,
    gpu_pair_counts,
    gpu_span,
    group_text,
    launch_line,
)

if TYPE_CHECKING:
    from k3diag.analyze.finding import Finding
    from k3diag.analyze.pipeline import Analysis
    from k3diag.model.machine import Machine

# The default report shows this many root problems in full; the rest are counted and left to --details.
MAX_PROBLEMS = 5
MAX_ADVICE = 4
MAX_UNKNOWN = 4
MAX_NCCL_RUNS_SHOWN = 3  # communicators listed in --details; the summary names the most telling one
PROBLEM_KINDS = ("fault", "misconfiguration", "contradiction")


def verdict_label(verdict) -> str:
    """OK / WARN / FAIL / UNKNOWN: the exit code's word, except that a verdict that cannot judge the machine
    never reads OK."""
    status = getattr(verdict, "status", "ok")
    if status == "ok" and verdict.level in ("unknown", "none"):
        return "UNKNOWN"
    return STATUS_LABEL.get(status, status.upper())


def make_console(file: TextIO | None = None) -> Out:
    """The writer for the report on `file` (stdout by default): colour only on a terminal."""
    return Out(file)


def render(analysis: "Analysis", console: Out, title: str, details: bool = False) -> None:
    out = console
    out.line(title, "bold")
    verdict = analysis.verdict
    label = verdict_label(verdict)
    out.parts([(f"Verdict [{label}]: ", STATUS_STYLE.get(label.lower())), (verdict.text, None)])
    machine = analysis.machine
    _machine_lines(machine, out)
    if details:
        from k3diag.render.details import render_details

        out.line()
        render_details(analysis, out)
        return
    shown = _problems(analysis.findings, out)
    _advice(analysis.findings, out)
    _unknowns(analysis, out)
    _launch(analysis, out)
    _inputs(machine, out)
    hidden = len(analysis.findings) - shown
    more = f"; {counted(hidden, 'more finding', 'more findings')} there" if hidden > 0 else ""
    out.line()
    out.line(f"More: add --details for the matrices, PCIe paths, NCCL transports and every finding in full{more}; "
             "--json for scripts.", "dim", wrap=True)


# -- the machine in two lines ---------------------------------------------------------------------------


def _machine_lines(machine: "Machine", out: Out) -> None:
    gpus = machine.sorted_gpus()
    parts: list[str] = []
    if gpus:
        names: dict[str, int] = {}
        for gpu in gpus:
            if gpu.name:
                names[gpu.name] = names.get(gpu.name, 0) + 1
        model = ", ".join(f"{n}x {name}" for name, n in names.items())
        parts.append(_gpu_count_words(machine, len(gpus)) + (f" ({model})" if model else ""))
        nodes: dict[int, list[int]] = {}
        for gpu in gpus:
            if gpu.numa_node is not None:
                nodes.setdefault(gpu.numa_node, []).append(gpu.index)
        if nodes:
            parts.append("; ".join(f"NUMA {node}: {gpu_span(ix)}" for node, ix in sorted(nodes.items())))
    host = machine.host
    if host.hostname:
        parts.insert(0, f"host {host.hostname}")
    if host.cpu_model and not gpus:
        parts.append(host.cpu_model)
    if host.numa_nodes and not gpus:
        parts.append(f"{counted(len(host.numa_nodes), 'NUMA node')} ({', '.join(f'node{n.id}: cpus {n.cpus}' for n in host.numa_nodes)})")
    if host.packages and not gpus:
        parts.append(counted(len(host.packages), "CPU package"))
    if host.driver_version:
        parts.append(f"driver {host.driver_version}")
    if host.iommu_mode:
        parts.append(f"IOMMU {host.iommu_mode}")
    if parts:
        out.line("Machine: " + "; ".join(parts), wrap=True, hang=4)
    counts = gpu_pair_counts(machine)
    if counts:
        from k3diag.model.topology import path_rank

        mp = any(link.origin == "nvidia-smi-topo-mp" for link in machine.links)
        text = ", ".join(f"{path} x{n}" for path, n in sorted(counts.items(), key=lambda item: path_rank(item[0])))
        out.line(f"GPU pairs by path: {text}" + (" (PCIe paths from topo -mp; NVLink not shown)" if mp else ""),
                 wrap=True, hang=4)
    if machine.nccl:
        _nccl_line(machine, out)
    pci = [d for d in machine.pci if d.bdf]
    if pci and not gpus:
        from k3diag.render.details import pci_inventory

        pci_inventory(machine, out)


def _gpu_count_words(machine: "Machine", shown: int) -> str:
    """`8 GPUs`; `1 of 8 attached GPUs` for a filtered `nvidia-smi -q -i 0`; `at least 3 GPUs (a GPU list was cut)`."""
    unseen = machine.unseen_attached_gpus()
    if unseen:
        return f"{shown} of {shown + unseen} attached GPUs"
    if machine.gpu_count_is_a_floor():
        return f"at least {counted(shown, 'GPU')} (a GPU list was cut)"
    return counted(shown, "GPU")


def _nccl_line(machine: "Machine", out: Out) -> None:
    totals: dict[str, int] = {}
    for run in machine.nccl:
        for family, number in run.transport_counts().items():
            totals[family] = totals.get(family, 0) + number
    # A long log keeps only the first runs in full (`nccl_runs`); the others are counted in its summary,
    # and the line counts them too, or a 500-run log would read as 64 communicators.
    summarized = 0
    for _, summary in machine.extras.get("nccl_summaries") or []:
        data = summary.to_json()
        summarized += data.get("runs_summarized", 0)
        for family, number in (data.get("summarized_transport_counts") or {}).items():
            totals[family] = totals.get(family, 0) + number
    versions = sorted({f"{run.library or 'NCCL'} {run.version}" for run in machine.nccl if run.version})
    ranks = max((run.nranks or 0 for run in machine.nccl), default=0)
    libraries = sorted({run.library or "NCCL" for run in machine.nccl}) or ["NCCL"]
    what = ", ".join(versions) or f"{'/'.join(libraries)} (version not in the log)"
    size = f", up to {ranks} ranks" if ranks else ""
    links = per_kind(totals)
    links = f"connection lines: {links}" if links else "no connection lines in the log"
    collnet = [c for run in machine.nccl for c in run.collnet]
    if collnet:  # printed while CollNet is set up, no proof it is used: `nccl-collnet-fallback` says when it is not
        families = ", ".join(sorted({"/".join(c.via.split("/")[:2]) for c in collnet}))
        links += f"; CollNet lines from {counted(len({(c.host, c.rank) for c in collnet}), 'rank')} ({families})"
    out.line(f"NCCL: {what}; {counted(len(machine.nccl) + summarized, 'communicator')}{size}; {links}", wrap=True, hang=4)


# -- problems, advice, unknowns --------------------------------------------------------------------------


def _kind(finding: "Finding") -> str:
    return getattr(finding, "kind", "") or ("fault" if finding.severity in ("fail", "warn") else "info")


def _problems(findings: list["Finding"], out: Out) -> int:
    """Root problems (explained by nothing else), worst first, each with one line of evidence and its fix;
    the findings that they explain are named under them. Returns how many findings were shown."""
    by_key = {f.key: f for f in findings}
    problems = [f for f in findings if f.severity in ("fail", "warn")]
    if not problems:
        return 0
    explained = {cause for f in problems for cause in f.causes if cause in by_key
                 and by_key[cause].severity in ("fail", "warn")}
    effects: dict[str, list["Finding"]] = {}
    for f in problems:
        for cause in f.causes:
            effects.setdefault(cause, []).append(f)
    roots = [f for f in problems if f.key not in explained] or problems
    # One block per kind of problem: sixteen pairs refusing P2P for one reason read as one.
    blocks: dict[str, list["Finding"]] = {}
    for f in roots:
        blocks.setdefault(f.id, []).append(f)
    out.line()
    out.line(f"Problems ({len(blocks)}):", "bold")
    shown = 0
    for count, (finding_id, members) in enumerate(blocks.items()):
        if count >= MAX_PROBLEMS:
            out.line(f"... {counted(len(blocks) - MAX_PROBLEMS, 'more kind of problem', 'more kinds of problem')}: see --details", "dim",
                     indent=2)
            break
        first = members[0]
        title = first.title if len(members) == 1 else f"{first.title} (and {len(members) - 1:,} more like it)"
        out.parts([(f"[{SEVERITY_LABEL[first.severity]}] ", SEVERITY_STYLE[first.severity]), (title, None),
                   (f"  ({finding_id})", "dim")], indent=2)
        shown += len(members)
        for ref in first.evidence[:1]:
            out.line(f"> {ref.cite()}", "dim", indent=6, wrap=True, hang=2)
        for cause_key in first.causes[:1]:  # a design property or a note that explains it
            cause = by_key.get(cause_key)
            if cause is not None:
                out.line(f"because: {cause.title}", "italic", indent=6, wrap=True, hang=4)
        if first.remedy:
            out.line(f"Fix: {first_sentence(first.remedy)}", "green", indent=6, wrap=True, hang=5)
        caused = {e.key: e for m in members for e in effects.get(m.key, [])}
        for effect in list(caused.values())[:2]:
            out.line(f"which causes: [{SEVERITY_LABEL[effect.severity]}] {effect.title}", indent=6, wrap=True, hang=4)
            shown += 1
        if len(caused) > 2:
            out.line(f"which causes {counted(len(caused) - 2, 'more finding', 'more findings')}: see --details", "dim", indent=6)
    return shown


def _advice(findings: list["Finding"], out: Out) -> None:
    design = [f for f in findings if _kind(f) == "design"]
    if not design:
        return
    out.line()
    out.line("Design (how this machine is built; the TP advice follows it):", "bold")
    for f in design[:MAX_ADVICE]:
        out.line(f"- {f.title}", indent=2, wrap=True, hang=2)
    if len(design) > MAX_ADVICE:
        out.line(f"- ... {len(design) - MAX_ADVICE} more in --details", "dim", indent=2)


def _unknowns(analysis: "Analysis", out: Out) -> None:
    items: list[str] = []
    for missing in getattr(analysis.verdict, "missing", []) or []:
        items.append(f"{missing['what']}: `{missing['command']}`")
    for f in analysis.findings:
        if _kind(f) == "missing-evidence" and f.id != "no-gpu-found":
            items.append(f"{f.title}" + (f": `{f.confirm_with}`" if f.confirm_with and f.confirm_with not in f.title else ""))
    if not items:
        return
    out.line()
    out.line("Not known (and the command that would tell):", "bold")
    for item in list(dict.fromkeys(items))[:MAX_UNKNOWN]:
        out.line(f"- {item}", indent=2, wrap=True, hang=2)
    if len(items) > MAX_UNKNOWN:
        out.line(f"- ... {len(items) - MAX_UNKNOWN} more in --details", "dim", indent=2)


# -- what to run ---------------------------------------------------------------------------------------------


def _launch(analysis: "Analysis", out: Out) -> None:
    rec = analysis.recommendation
    plan = getattr(analysis.verdict, "plan", None)
    machine = analysis.machine
    skipped = getattr(rec, "skipped", {}) or {} if rec is not None else {}
    if plan and plan.get("groups"):
        size = plan["tp"]
        groups, replicas = plan["groups"], plan.get("replicas") or []
        dp = len(groups) + len(replicas)
        out.line()
        out.line(f"Run TP{size} ({counted(len(groups), 'group')}{f' + ' + counted(len(replicas), 'replica GPU') if replicas else ''}, "
                 f"DP={dp}): one line per group, then your server command (e.g. vllm serve ... "
                 f"--tensor-parallel-size {size})", "bold", wrap=True, hang=2)
        for group in groups:
            out.line(f"{launch_line(machine, group)}   # TP{size} {group_text(group)}", indent=2)
        for gpu in replicas:
            out.line(f"{launch_line(machine, [gpu])}   # replica on GPU{gpu} (TP1)", indent=2)
    if rec is not None and getattr(rec, "groups", None):
        others = [size for size in sorted(rec.groups) if not plan or size != plan.get("tp")]
        if others:
            texts = []
            for size in others:
                worst = rec.worst_link.get(size)
                texts.append(f"TP{size} " + " ".join(group_text(g) for g in rec.groups[size][:4])
                             + (" ..." if len(rec.groups[size]) > 4 else "")
                             + (f" (slowest pair {worst})" if worst else " (a path inside is unknown)"))
            if not plan:  # no size is recommended (the verdict says why): these are not "other" than one
                out.line()
            out.line(("Other sizes: " if plan else "TP sizes, none recommended: ") + "; ".join(texts)
                     + " (--details explains each)", indent=2, wrap=True, hang=4)
    for size, why in sorted(skipped.items()):
        out.line(f"TP{size} cannot be planned: {why}.", "yellow", indent=2)


def _inputs(machine: "Machine", out: Out) -> None:
    unknown = [record for record in machine.inputs if record.format == "unknown"]
    warned = [record for record in machine.inputs if record.format != "unknown" and record.warnings]
    if not unknown and not warned:
        return
    out.line()
    read = len(machine.inputs) - len(unknown)
    # "not used", not "not recognized": some were never read (a link not followed, a FIFO in a folder, a file
    # that cannot be opened); the line under each says which and why.
    out.line(f"Inputs: {read:,} read, {len(unknown):,} not used" + (f", {len(warned):,} with warnings" if warned else ""),
             "bold")
    for record in (unknown + warned)[:4]:
        first = record.warnings[0] if record.warnings else "no format k3diag reads was found in it"
        # Most warnings name their input already (they stand alone in JSON): the path is not said twice.
        line = first if first.startswith((f"{record.path}: ", f"{record.path} ")) else f"{record.path}: {first}"
        out.line(line, "yellow" if record in unknown else None, indent=2, wrap=True, hang=4)
    if len(unknown) + len(warned) > 4:
        out.line(f"... {len(unknown) + len(warned) - 4} more in --details", "dim", indent=2)


def render_summary_lines(analysis: "Analysis", title: str = "k3diag") -> list[str]:
    """The default report as lines (for tests and the audit)."""
    import io

    buffer = io.StringIO()
    render(analysis, Out(buffer, color=False), title)
    return buffer.getvalue().splitlines()


__all__ = ["MAX_NCCL_RUNS_SHOWN", "make_console", "render", "render_summary_lines"]
