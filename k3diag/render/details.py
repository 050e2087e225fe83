"""`--details`: the tables behind the verdict and every finding in full.

Only what matters is drawn: P2P capabilities that say whether data moves (read, write; NVLink and atomics
are `NS` on every PCIe box and are left out), the legend of the vendor whose matrix it is, and values the
evidence does not hold shown as `-` with a note, never as `None` or `?`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from k3diag.model.topology import endpoint_sort_key
from k3diag.model.words import counted, per_kind
from k3diag.render.plain import Out
from k3diag.render.text import (
    NOT_SEEN,
    SEVERITY_LABEL,
    SEVERITY_STYLE,
    fmt,
    group_text,
    is_amd,
    launch_line,
    path_style,
)

if TYPE_CHECKING:
    from k3diag.analyze.finding import Finding
    from k3diag.analyze.pipeline import Analysis
    from k3diag.model.machine import Machine

MAX_EVIDENCE_LINES = 4
MAX_PCI_LISTED = 40
MAX_NCCL_RUNS_SHOWN = 3
# Matrices wider than this many endpoints are summarized by path class even with --details.
MAX_MATRIX_DRAWN = 40
P2P_DATA_CAPABILITIES = ("read", "write", "pcie", "unknown")
_CAPABILITY_NAME = {"read": "read", "write": "write", "pcie": "PCIe", "unknown": "(capability not named in the paste)"}
NVIDIA_LEGEND = "best first: NV# (NVLink) > PIX > PXB > PHB > NODE > SYS"
AMD_LEGEND = "best first: XGMI (Infinity Fabric) > PCIE"


def render_details(analysis: "Analysis", out: Out) -> None:
    machine = analysis.machine
    _host(machine, out)
    gpus_table(machine, out)
    matrix(machine, out)
    p2p(machine, out)
    _pcie_paths(machine, out)
    nccl_runs(machine, out)
    benchmarks(machine, out)
    findings_in_full(analysis.findings, out)
    tp_plan(analysis, out)
    inputs(machine, out)


def _host(machine: "Machine", out: Out) -> None:
    host = machine.host
    parts = []
    for value, text in ((host.cpu_model, host.cpu_model), (host.packages, counted(len(host.packages or []), "CPU package")),
                        (host.logical_cpus, f"{host.logical_cpus} logical CPUs"),
                        (host.memory_total_bytes, f"{(host.memory_total_bytes or 0) / 2**30:.0f} GiB RAM")):
        if value:
            parts.append(str(text))
    if host.numa_nodes:
        parts.append(f"{counted(len(host.numa_nodes), 'NUMA node')} ("
                     + ", ".join(f"node{n.id}: cpus {n.cpus}" for n in host.numa_nodes) + ")")
    if parts:
        out.line("Host: " + "; ".join(parts), wrap=True, hang=4)
    pci_count = len([d for d in machine.pci if d.bdf])
    if pci_count:
        out.line(f"PCI devices seen: {pci_count}")
    out.line()


def pci_inventory(machine: "Machine", out: Out) -> None:
    """Without GPUs the PCI inventory is what the user can still check (is the card even on the bus?)."""
    devices = [d for d in machine.pci if d.bdf][:MAX_PCI_LISTED]
    out.line("PCI devices (no GPU among them was usable; - = not in the evidence):", "bold")
    rows = []
    for device in devices:
        link = device.link
        link_text = ""
        if link is not None and (link.sta_width or link.cap_width):
            link_text = (f"{fmt(link.sta_speed_gts)} GT/s x{fmt(link.sta_width)} of "
                         f"{fmt(link.cap_speed_gts)} GT/s x{fmt(link.cap_width)}")
        ids = (f"{device.vendor_id or NOT_SEEN}:{device.device_id or NOT_SEEN}"
               if device.vendor_id or device.device_id else NOT_SEEN)
        rows.append([device.bdf or NOT_SEEN, device.description or device.class_name or NOT_SEEN, ids,
                     fmt(device.driver), fmt(device.numa_node), link_text or NOT_SEEN])
    out.table(["bdf", "device", "vendor:device", "driver", "NUMA", "link (runs at of capable)"], rows, indent=2)
    if len([d for d in machine.pci if d.bdf]) > MAX_PCI_LISTED:
        out.line(f"... {len(machine.pci) - MAX_PCI_LISTED} more in --json", "dim", indent=2)


def gpus_table(machine: "Machine", out: Out) -> None:
    if not machine.gpus:
        return
    rows = []
    narrow: set[int] = set()
    for r, gpu in enumerate(machine.sorted_gpus()):
        pcie = gpu.pcie
        if pcie.width_current is not None and pcie.width_max is not None and pcie.width_current < pcie.width_max:
            narrow.add(r)
        gen = f"{fmt(pcie.gen_current)}/{fmt(pcie.gen_max)}" if pcie.gen_current or pcie.gen_max else NOT_SEEN
        width = (f"x{fmt(pcie.width_current)}/x{fmt(pcie.width_max)}" if pcie.width_current or pcie.width_max
                 else NOT_SEEN)
        rows.append([str(gpu.index), fmt(gpu.name), fmt(gpu.bus_id), fmt(gpu.numa_node), fmt(gpu.cpu_affinity), gen,
                     width, fmt(gpu.performance_state)])
    out.line("GPUs (- = not in the evidence):", "bold")
    out.table(["GPU", "name", "bus id", "NUMA", "CPU affinity", "PCIe gen cur/max", "width cur/max", "pstate"],
              rows, indent=2, style=lambda r, c, t: "bold red" if c == 6 and r in narrow else None)
    out.line()


def matrix(machine: "Machine", out: Out) -> None:
    names = machine.endpoint_names()
    if len(names) < 2:
        return
    paths = {link.path for link in machine.links if link.path}
    amd = is_amd(machine) or (paths and paths <= {"XGMI", "PCIE"})
    legend = AMD_LEGEND if amd else NVIDIA_LEGEND
    if len(names) > MAX_MATRIX_DRAWN:
        from k3diag.render.text import gpu_pair_counts

        counts = gpu_pair_counts(machine)
        out.line(f"Paths between {len(names)} GPUs and NICs: too many to draw; GPU pairs by path: "
                 + ", ".join(f"{p} x{n}" for p, n in sorted(counts.items())) + " (every cell is in --json)",
                 wrap=True, hang=4)
        out.line()
        return
    out.line(f"Paths between GPUs and NICs ({legend}; - = not in the evidence):", "bold")
    rows = []
    for row in names:
        cells = [row]
        for col in names:
            if row == col:
                cells.append("X")
                continue
            link = machine.link(row, col)
            cells.append(link.path if link is not None and link.path else NOT_SEEN)
        rows.append(cells)
    out.table([""] + names, rows, indent=2, style=lambda r, c, t: path_style(t) if c > 0 and t not in ("X", NOT_SEEN)
              else None)
    if any(link.origin == "nvidia-smi-topo-mp" for link in machine.links):
        out.line("From `nvidia-smi topo -mp`: PCIe paths only; NVLink between these GPUs is not shown.", "yellow",
                 indent=2)
    out.line()


def p2p(machine: "Machine", out: Out) -> None:
    if not machine.p2p:
        return
    for capability in P2P_DATA_CAPABILITIES:
        statuses = [s for s in machine.p2p if s.capability == capability and s.src != s.dst]
        if not statuses:
            continue
        name = _CAPABILITY_NAME[capability]
        gpus = sorted({s.src for s in statuses} | {s.dst for s in statuses}, key=endpoint_sort_key)
        pairs = {tuple(sorted((s.src, s.dst), key=endpoint_sort_key)) for s in statuses}
        if all(s.status == "OK" for s in statuses):
            out.line(f"P2P {name}: OK between " + (f"the {len(gpus)} GPUs" if len(pairs) == 1
                                                      else f"all {len(pairs)} pairs of {len(gpus)} GPUs"))
            continue
        out.line(f"P2P {name} (OK; refused: NS, GNS, CNS, TNS, DR; U unknown; - not in the evidence):", "bold")
        lookup = {(s.src, s.dst): s.status for s in statuses}
        rows = [[row] + [("X" if row == col else (lookup.get((row, col)) or NOT_SEEN)) for col in gpus] for row in gpus]
        out.table([""] + gpus, rows, indent=2,
                  style=lambda r, c, t: None if c == 0 or t in ("X", NOT_SEEN) else ("green" if t == "OK" else "red"))
    skipped = sorted({s.capability for s in machine.p2p if s.capability not in P2P_DATA_CAPABILITIES})
    if skipped:
        out.line(f"(P2P {', '.join(skipped)} matrices are in --json: they do not decide whether data moves.)", "dim")
    out.line()


def _pcie_paths(machine: "Machine", out: Out) -> None:
    try:
        from k3diag.render.pcie import render_pcie_paths
    except ModuleNotFoundError:
        return
    render_pcie_paths(machine, out)


def nccl_runs(machine: "Machine", out: Out) -> None:
    runs = sorted(machine.nccl, key=lambda run: (-(run.transport_counts().get("SHM", 0) > 0), -(run.nranks or 0)))
    hidden = runs[MAX_NCCL_RUNS_SHOWN:]
    for run in runs[:MAX_NCCL_RUNS_SHOWN]:
        counts = run.transport_counts()
        what = f"{run.library or 'NCCL'} {run.version}" if run.version else f"{run.library or 'NCCL'} (version not in the log)"
        ranks = f"{run.nranks} ranks" if run.nranks else "rank count not in the log"
        nodes = f" on {counted(run.nodes, 'node')}" if run.nodes else ""
        hosts = f" ({', '.join(run.hosts[:6])}{' ...' if len(run.hosts) > 6 else ''})" if run.hosts else ""
        # the communicator's id tells apart runs that look alike (every job's world communicator)
        comm = f" (commId {run.comm_id})" if run.comm_id else ""
        head = f"{what}{comm}: {ranks}{nodes}{hosts}; connection lines: {per_kind(counts, ('P2P', 'SHM', 'NET'))}"
        if run.input:
            head += f"  [{run.input}]"
        out.line(head, wrap=True, hang=4)
        if run.env:
            out.line("settings: " + ", ".join(f"{key}={value}" for key, value in sorted(run.env.items())), indent=2,
                     wrap=True, hang=4)
        init = _init_line(run)
        if init:
            out.line(init, indent=2, wrap=True, hang=4)
        _transport_matrix(run, out)
    if hidden:
        totals: dict[str, int] = {}
        for run in hidden:
            for family, number in run.transport_counts().items():
                totals[family] = totals.get(family, 0) + number
        out.line(f"... and {counted(len(hidden), 'more communicator', 'more communicators')} (connection lines: "
                 f"{per_kind(totals) or 'none seen'}); all are in --json")
    if machine.nccl:
        out.line()


def _init_line(run: Any) -> str:
    """How far the communicator's init got, and its slowest `Init timings` line, in words ("" when the log
    shows neither)."""
    parts = []
    state = getattr(run, "init", None)
    if state is not None:
        of = f" of {state.nranks}" if state.nranks else ""
        text = f"{counted(state.started, 'rank')}{of} started, {state.completed} completed"
        if state.stuck_total:
            text += f", {state.stuck_total} never completed" + (" in this excerpt" if state.excerpt else "")
        if state.missing_total:
            text += f", {state.missing_total} never seen"
        parts.append(text)
    timings = getattr(run, "init_timings", None)
    if timings is not None and timings.slowest:
        slowest = timings.slowest[0]
        phase = f", mostly {slowest.dominant}" if slowest.dominant else ""
        parts.append(f"slowest init rank {slowest.rank} {slowest.total:.2f} s{phase} "
                     f"({counted(timings.ranks_timed, 'rank')} timed)")
    return ("init: " + "; ".join(parts)) if parts else ""


def _transport_matrix(run: Any, out: Out) -> None:
    ranks = sorted({c.src_rank for c in run.connections} | {c.dst_rank for c in run.connections})
    if not ranks or len(ranks) > 16:
        return
    families: dict[tuple[int, int], set[str]] = {}
    for conn in run.connections:
        families.setdefault((conn.src_rank, conn.dst_rank), set()).add(
            conn.via.split("/")[0] if conn.via else conn.transport)
    rows = []
    for src in ranks:
        cells = [str(src)]
        for dst in ranks:
            kinds = families.get((src, dst))
            cells.append("X" if src == dst else ("+".join(sorted(k for k in kinds if k)) if kinds else ""))
        rows.append(cells)
    out.line("Transport by rank pair (sender row, receiver column; blank = no channel):", indent=2)
    out.table([""] + [str(r) for r in ranks], rows, indent=4,
              style=lambda r, c, t: None if c == 0 else ("green" if t == "P2P" else "yellow" if "SHM" in t else None))


def benchmarks(machine: "Machine", out: Out) -> None:
    for bench in machine.benchmarks:
        data = bench.to_json()
        tool = data.get("tool") or "benchmark"
        if tool == "nccl-tests":
            op = data.get("op") or "collective"
            ranks = counted(data["nranks"], "GPU") if data.get("nranks") else "rank count not printed"
            out.line(f"nccl-tests {op} on {ranks}: {_nccl_tests_figures(data)}")
        else:
            names = ", ".join(sorted((data.get("matrices") or data.get("testcases") or {}).keys())[:4])
            out.line(f"{tool}: {names or 'no matrices'}")
    if machine.benchmarks:
        out.line()


def _nccl_tests_figures(data: dict) -> str:
    """Its bus bandwidths and out-of-bounds count in words: a run that finished no size printed none of
    them (a `-` in prose would say nothing)."""
    max_busbw, avg_busbw, out_of_bounds = data.get("max_busbw"), data.get("avg_busbw"), data.get("out_of_bounds")
    if max_busbw is None and avg_busbw is None:
        figures = ["no bus bandwidth printed (no message size finished)"]
    else:
        figures = [f"max busbw {fmt(max_busbw, ' GB/s')}" if max_busbw is not None else "max busbw not printed",
                   f"avg busbw {fmt(avg_busbw, ' GB/s')}" if avg_busbw is not None else "avg busbw not printed"]
    figures.append(f"out-of-bounds {out_of_bounds}" if out_of_bounds is not None else "out-of-bounds not printed")
    return ", ".join(figures)


def findings_in_full(findings: list["Finding"], out: Out) -> None:
    if not findings:
        out.line("Findings: none", "green")
        out.line()
        return
    by_key = {f.key: f for f in findings}
    explained = {cause for f in findings for cause in f.causes}
    roots = [f for f in findings if f.key not in explained] or list(findings)
    out.line(f"Findings ({len(findings)}):", "bold")
    for finding in roots:
        _finding(finding, by_key, out, depth=1, seen=set())
    out.line()


def _finding(finding: "Finding", by_key: dict, out: Out, depth: int, seen: set[str]) -> None:
    indent = 2 * depth
    kind = getattr(finding, "kind", "") or ""
    out.parts([(f"[{SEVERITY_LABEL.get(finding.severity, finding.severity.upper())}] ",
                SEVERITY_STYLE.get(finding.severity)), (finding.title, None),
               (f"  ({finding.id}{', ' + kind if kind else ''})", "dim")], indent=indent)
    if finding.explanation:
        out.line(finding.explanation, indent=indent + 4, wrap=True)
    for ref in finding.evidence[:MAX_EVIDENCE_LINES]:
        out.line(f"> {ref.cite()}", "dim", indent=indent + 4, wrap=True, hang=2)
    if len(finding.evidence) > MAX_EVIDENCE_LINES:
        out.line(f"> ... {counted(len(finding.evidence) - MAX_EVIDENCE_LINES, 'more line')} in --json", "dim",
                 indent=indent + 4)
    if finding.confirm_with:
        out.line(f"To confirm: {finding.confirm_with}", indent=indent + 4, wrap=True, hang=4)
    if finding.remedy:
        out.line(f"Fix: {finding.remedy}", "green", indent=indent + 4, wrap=True, hang=5)
    seen = seen | {finding.key}
    for cause_key in finding.causes:
        cause = by_key.get(cause_key)
        if cause is None or cause_key in seen:
            continue
        out.line("because:", "italic", indent=indent + 4)
        _finding(cause, by_key, out, depth + 2, seen)


def tp_plan(analysis: "Analysis", out: Out) -> None:
    rec = analysis.recommendation
    if rec is None or not getattr(rec, "groups", None):
        return
    machine = analysis.machine
    out.line("Tensor-parallel groups at each size (the best partition; the rest of the GPUs are replicas):", "bold")
    rows = []
    for size in sorted(rec.groups):
        worst = rec.worst_link.get(size)
        left = (rec.leftover or {}).get(size) or []
        groups = " ".join(group_text(g) for g in rec.groups[size])
        rows.append([f"TP{size}", groups + (f" + replicas {','.join(map(str, left))}" if left else ""),
                     worst or "unknown"])
    out.table(["size", "groups", "slowest pair"], rows, indent=2,
              style=lambda r, c, t: path_style(t) if c == 2 and t != "unknown" else None)
    rationale = getattr(rec, "rationale", {}) or {}
    for size in sorted(rationale):
        out.line(f"TP{size}: {rationale[size]}", indent=2, wrap=True, hang=4)
    if getattr(rec, "comparison", None):
        out.line(rec.comparison, indent=2, wrap=True)
    for size in sorted(rec.groups):
        out.line(f"TP{size} launch lines:", indent=2)
        for group in rec.groups[size]:
            out.line(launch_line(machine, group), indent=4)
    for size, why in sorted((getattr(rec, "skipped", {}) or {}).items()):
        out.line(f"TP{size} cannot be planned: {why}.", "yellow", indent=2)
    out.line()


def inputs(machine: "Machine", out: Out) -> None:
    if machine.inputs:
        out.line("Inputs:", "bold")
        for record in machine.inputs:
            out.line(f"{record.path}: {record.format}", "red" if record.format == "unknown" else None, indent=2)
            for warning in record.warnings[:5]:
                out.line(f"! {warning}", "yellow", indent=4, wrap=True, hang=2)
            if len(record.warnings) > 5:
                out.line(f"! ... {counted(len(record.warnings) - 5, 'more warning')} in --json", "yellow", indent=4)
    notes = [n for n in machine.notes if not any(n.message in r.warnings for r in machine.inputs)]
    if notes:
        out.line("Notes:", "bold")
        for note in notes:
            out.line(f"{note.subject}: {note.message}", "yellow" if note.level == "warn" else None, indent=2, wrap=True,
                     hang=4)


__all__ = ["render_details", "pci_inventory"]
