"""The terminal report: verdict first, then the machine, then findings with their causes beneath.

Colour only on a terminal (rich decides from the stream) and never when NO_COLOR is set.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from k3diag.model.topology import endpoint_sort_key, gpu_index, nvlink_count

if TYPE_CHECKING:
    from rich.console import Console

    from k3diag.analyze.finding import Finding
    from k3diag.analyze.pipeline import Analysis
    from k3diag.model.machine import Machine

SEVERITY_STYLE = {"fail": "bold red", "warn": "yellow", "info": "cyan"}
SEVERITY_LABEL = {"fail": "FAIL", "warn": "WARN", "info": "INFO"}
VERDICT_STYLE = {"good": "bold green", "usable": "bold yellow", "poor": "bold red", "none": "bold red"}
MAX_EVIDENCE_LINES = 4
# From this many findings of one id under one heading, they are shown as one block.
COLLAPSE_AT = 3


def escape(text: str) -> str:
    """Input text shown inside rich markup: a bracket in a path or a log must print as itself."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def make_console(file=None) -> "Console":
    from rich.console import Console

    stream = file or sys.stdout
    is_terminal = hasattr(stream, "isatty") and stream.isatty()
    return Console(
        file=stream,
        no_color=bool(os.environ.get("NO_COLOR")) or not is_terminal,
        highlight=False,
        soft_wrap=not is_terminal,
        width=None if is_terminal else 160,
    )


def path_style(path: str | None) -> str:
    if path is None:
        return "dim"
    if nvlink_count(path) is not None or path in ("XGMI", "X"):
        return "green"
    if path in ("PIX", "PSB", "PXB"):
        return "green"
    if path in ("PHB", "NODE", "PCIE"):
        return "yellow"
    if path == "SYS":
        return "red"
    return "white"


def render(analysis: "Analysis", console: "Console", title: str) -> None:
    machine = analysis.machine
    from rich.text import Text

    console.print(Text(title, style="bold"))
    verdict = analysis.verdict
    console.print(Text(f"Verdict: {verdict.text}", style=VERDICT_STYLE.get(verdict.level, "bold")))
    console.print()
    _render_host(machine, console)
    _render_gpus(machine, console)
    _render_matrix(machine, console)
    _render_p2p(machine, console)
    _render_pcie_paths(machine, console)
    _render_nccl(machine, console)
    _render_benchmarks(machine, console)
    _render_findings(analysis.findings, console)
    _render_recommendation(analysis.recommendation, console)
    _render_inputs(machine, console)


def _render_host(machine: "Machine", console: "Console") -> None:
    host = machine.host
    parts = []
    if host.hostname:
        parts.append(f"host {host.hostname}")
    if host.cpu_model:
        parts.append(host.cpu_model)
    if host.packages:
        parts.append(f"{len(host.packages)} CPU package(s)")
    if host.numa_nodes:
        nodes = ", ".join(f"node{n.id}: cpus {n.cpus}" for n in host.numa_nodes)
        parts.append(f"{len(host.numa_nodes)} NUMA node(s) ({nodes})")
    if host.logical_cpus:
        parts.append(f"{host.logical_cpus} logical CPUs")
    if host.memory_total_bytes:
        parts.append(f"{host.memory_total_bytes / 2**30:.0f} GiB RAM")
    if host.driver_version:
        parts.append(f"driver {host.driver_version}")
    if host.iommu_mode:
        parts.append(f"IOMMU {host.iommu_mode}")
    if parts:
        console.print("Host: " + "; ".join(parts), markup=False)
    pci_count = len([d for d in machine.pci if d.bdf])
    if pci_count:
        console.print(f"PCI devices seen: {pci_count}")
    if pci_count and not machine.gpus:
        _render_pci_inventory(machine, console)
    console.print()


# Without GPUs the PCI inventory is what the user can still check (is the card even on the bus?).
MAX_PCI_LISTED = 40


def _render_pci_inventory(machine: "Machine", console: "Console") -> None:
    from rich.table import Table

    devices = [d for d in machine.pci if d.bdf][:MAX_PCI_LISTED]
    table = Table(title="PCI devices (no GPU among them was usable)", title_justify="left")
    for column in ("bdf", "device", "vendor:device", "driver", "NUMA", "link (runs at / capable)"):
        table.add_column(column)
    for device in devices:
        link = device.link
        link_text = ""
        if link is not None and (link.sta_width or link.cap_width):
            link_text = (f"{_fmt(link.sta_speed_gts)} GT/s x{_fmt(link.sta_width)} / "
                         f"{_fmt(link.cap_speed_gts)} GT/s x{_fmt(link.cap_width)}")
        ids = f"{device.vendor_id or '?'}:{device.device_id or '?'}" if device.vendor_id or device.device_id else ""
        table.add_row(escape(device.bdf or ""), escape(device.description or device.class_name or ""),
                      escape(ids), escape(device.driver or ""), _fmt(device.numa_node), escape(link_text))
    console.print(table)


def _render_gpus(machine: "Machine", console: "Console") -> None:
    if not machine.gpus:
        return
    from rich.table import Table

    table = Table(title="GPUs", title_justify="left", show_lines=False)
    for column in ("GPU", "name", "bus id", "NUMA", "CPU affinity", "PCIe gen (cur/max)", "width (cur/max)", "pstate"):
        table.add_column(column)
    for gpu in machine.sorted_gpus():
        pcie = gpu.pcie
        width_style = ""
        if pcie.width_current is not None and pcie.width_max is not None and pcie.width_current < pcie.width_max:
            width_style = "bold red"
        table.add_row(
            str(gpu.index),
            escape(gpu.name or "?"),
            escape(gpu.bus_id or "?"),
            _fmt(gpu.numa_node),
            escape(gpu.cpu_affinity or "?"),
            f"{_fmt(pcie.gen_current)}/{_fmt(pcie.gen_max)}",
            f"[{width_style}]x{_fmt(pcie.width_current)}/x{_fmt(pcie.width_max)}[/]" if width_style
            else f"x{_fmt(pcie.width_current)}/x{_fmt(pcie.width_max)}",
            gpu.performance_state or "?",
        )
    console.print(table)


def _render_matrix(machine: "Machine", console: "Console") -> None:
    names = machine.endpoint_names()
    if len(names) < 2:
        return
    from rich.table import Table

    table = Table(title="Paths between GPUs and NICs (best first: NV# > PIX > PXB > PHB > NODE > SYS)",
                  title_justify="left")
    table.add_column("")
    for name in names:
        table.add_column(escape(name), justify="center")
    for row in names:
        cells = []
        for col in names:
            if row == col:
                cells.append("X")
                continue
            link = machine.link(row, col)
            path = link.path if link else None
            cells.append(f"[{path_style(path)}]{escape(path or '?')}[/]")
        table.add_row(escape(row), *cells)
    console.print(table)


def _render_p2p(machine: "Machine", console: "Console") -> None:
    if not machine.p2p:
        return
    from rich.table import Table

    capabilities = sorted({status.capability for status in machine.p2p})
    for capability in capabilities:
        statuses = [s for s in machine.p2p if s.capability == capability and s.src != s.dst]
        if not statuses:
            continue
        if all(s.status == "OK" for s in statuses):
            console.print(f"P2P {capability}: OK for all {len(statuses)} ordered pairs")
            continue
        names = sorted({s.src for s in statuses} | {s.dst for s in statuses}, key=endpoint_sort_key)
        table = Table(title=f"P2P {capability} (OK, NS, GNS, CNS, TNS, DR, U)", title_justify="left")
        table.add_column("")
        for name in names:
            table.add_column(escape(name), justify="center")
        lookup = {(s.src, s.dst): s.status for s in statuses}
        for row in names:
            cells = []
            for col in names:
                if row == col:
                    cells.append("X")
                    continue
                status = lookup.get((row, col))
                style = "green" if status == "OK" else ("dim" if status is None else "red")
                cells.append(f"[{style}]{escape(status or '?')}[/]")
            table.add_row(escape(row), *cells)
        console.print(table)
    console.print()


def _render_pcie_paths(machine: "Machine", console: "Console") -> None:
    """Each GPU's path from the root port down, when the PCIe layer could build the tree."""
    try:
        from k3diag.render.pcie import render_pcie_paths
    except ModuleNotFoundError:
        return
    render_pcie_paths(machine, console)


# A gigabyte log can hold thousands of communicators; show the most telling ones in full.
MAX_NCCL_RUNS_SHOWN = 3


def _render_nccl(machine: "Machine", console: "Console") -> None:
    # Communicators that left the fast path (SHM, network) first, then the biggest.
    runs = sorted(
        machine.nccl,
        key=lambda run: (-(run.transport_counts().get("SHM", 0) > 0), -(run.nranks or 0)),
    )
    hidden = runs[MAX_NCCL_RUNS_SHOWN:]
    for run in runs[:MAX_NCCL_RUNS_SHOWN]:
        counts = run.transport_counts()
        head = (
            f"{run.library or 'NCCL'} {run.version or '?'}: {run.nranks or '?'} ranks on "
            f"{run.nodes or '?'} node(s) ({_list_some(run.hosts) or 'hosts unknown'}); "
            f"connections P2P {counts.get('P2P', 0)}, SHM {counts.get('SHM', 0)}, NET {counts.get('NET', 0)}"
        )
        if run.input:
            head += f"  [{run.input}]"
        console.print(head, markup=False)  # input paths and env values may hold '[...]'
        if run.env:
            console.print("  settings: " + ", ".join(f"{key}={value}" for key, value in sorted(run.env.items())), markup=False)
        _render_transport_matrix(run, console)
    if hidden:
        totals: dict[str, int] = {}
        for run in hidden:
            for family, number in run.transport_counts().items():
                totals[family] = totals.get(family, 0) + number
        summary = ", ".join(f"{family} {number}" for family, number in sorted(totals.items()))
        console.print(f"... and {len(hidden)} more communicator(s) (connections: {summary}); all are in --json",
                      markup=False)
    if machine.nccl:
        console.print()


def _render_transport_matrix(run: Any, console: "Console") -> None:
    ranks = sorted({c.src_rank for c in run.connections} | {c.dst_rank for c in run.connections})
    if not ranks or len(ranks) > 16:
        return
    from rich.table import Table

    families: dict[tuple[int, int], set[str]] = {}
    for conn in run.connections:
        families.setdefault((conn.src_rank, conn.dst_rank), set()).add(conn.via.split("/")[0] if conn.via else conn.transport)
    table = Table(title="Transport by rank pair (sender row, receiver column)", title_justify="left")
    table.add_column("")
    for rank in ranks:
        table.add_column(str(rank), justify="center")
    for src in ranks:
        cells = []
        for dst in ranks:
            kinds = families.get((src, dst))
            if not kinds:
                cells.append("" if src != dst else "X")
                continue
            label = "+".join(sorted(kinds))
            style = "green" if kinds == {"P2P"} else ("yellow" if "SHM" in kinds else "white")
            cells.append(f"[{style}]{escape(label)}[/]")
        table.add_row(str(src), *cells)
    console.print(table)


def _render_benchmarks(machine: "Machine", console: "Console") -> None:
    for bench in machine.benchmarks:
        data = bench.to_json()
        tool = data.get("tool")
        if tool == "nccl-tests":
            console.print(
                f"nccl-tests {data.get('op') or '?'} on {data.get('nranks') or '?'} GPU(s): "
                f"max busbw {_fmt(data.get('max_busbw'))} GB/s, avg busbw {_fmt(data.get('avg_busbw'))} GB/s, "
                f"out-of-bounds {_fmt(data.get('out_of_bounds'))}"
            )
        else:
            names = ", ".join(sorted((data.get("matrices") or data.get("testcases") or {}).keys())[:4])
            console.print(f"{tool}: {names or 'no matrices'}", markup=False)
    if machine.benchmarks:
        console.print()


def _render_findings(findings: list["Finding"], console: "Console") -> None:
    from rich.text import Text

    if not findings:
        console.print(Text("Findings: none", style="green"))
        console.print()
        return
    by_key = {f.key: f for f in findings}
    explained = {cause for f in findings for cause in f.causes}
    roots = [f for f in findings if f.key not in explained]
    if not roots:  # a cycle; show everything flat rather than nothing
        roots = list(findings)
    console.print(Text(f"Findings ({len(findings)})", style="bold"))
    groups: dict[str, list["Finding"]] = {}
    for finding in roots:
        subject = _subject_group(finding.subjects)
        groups.setdefault(subject, []).append(finding)
    for subject in sorted(groups, key=_subject_order):
        console.print(Text(f"{subject}:", style="bold"))
        same_id: dict[str, list["Finding"]] = {}
        for finding in groups[subject]:
            same_id.setdefault(finding.id, []).append(finding)
        for finding_id, members in same_id.items():
            if len(members) >= COLLAPSE_AT:
                _render_collapsed(members, by_key, console)
                continue
            for finding in members:
                _render_finding(finding, by_key, console, depth=1, seen=set())
    console.print()


def _render_collapsed(members: list["Finding"], by_key: dict, console: "Console") -> None:
    """Many findings of one kind (28 SYS pairs on a dual-socket box) read as one, with its subjects listed."""
    from rich.text import Text

    first = members[0]
    label = SEVERITY_LABEL.get(first.severity, first.severity.upper())
    line = Text("  ")
    line.append(f"[{label}] ", style=SEVERITY_STYLE.get(first.severity, ""))
    line.append(f"{len(members)} x {first.title}")
    line.append(f"  ({first.id})", style="dim")
    console.print(line)
    subjects = ", ".join("-".join(f.subjects) for f in members)
    console.print(Text(f"      subjects: {subjects}"))
    console.print(Text(f"      For example: {first.explanation}"))
    for ref in first.evidence[:2]:
        console.print(Text(f"      > {ref.cite()}", style="dim"))
    if first.remedy:
        console.print(Text(f"      Fix: {first.remedy}", style="green"))
    causes = sorted({cause for f in members for cause in f.causes})
    if causes:
        console.print(Text("      because:", style="italic"))
    for cause_key in causes[:MAX_EVIDENCE_LINES]:
        _render_cause_chain(cause_key, by_key, console, depth=4, seen={f.key for f in members})
    if len(causes) > MAX_EVIDENCE_LINES:
        console.print(Text(f"        ... {len(causes) - MAX_EVIDENCE_LINES} more cause(s) in --json", style="dim"))


def _render_cause_chain(key: str, by_key: dict, console: "Console", depth: int, seen: set[str]) -> None:
    """One line per cause, its own causes indented beneath: the chain, without repeating every explanation."""
    from rich.text import Text

    cause = by_key.get(key)
    if cause is None or key in seen:
        return
    label = SEVERITY_LABEL.get(cause.severity, cause.severity.upper())
    line = Text("  " * depth)
    line.append(f"[{label}] ", style=SEVERITY_STYLE.get(cause.severity, ""))
    line.append(cause.title)
    line.append(f"  ({cause.id})", style="dim")
    console.print(line)
    for ref in cause.evidence[:1]:
        console.print(Text("  " * depth + f"    > {ref.cite()}", style="dim"))
    for sub in cause.causes:
        _render_cause_chain(sub, by_key, console, depth + 1, seen | {key})


def _subject_group(subjects: list[str]) -> str:
    if not subjects:
        return "host"
    gpus = [s for s in subjects if gpu_index(s) is not None]
    if len(subjects) == 1:
        return subjects[0]
    if gpus and len(gpus) == len(subjects):
        return "GPU pairs"
    return "links and devices"


def _subject_order(subject: str) -> tuple:
    special = {"host": (0,), "GPU pairs": (2,), "links and devices": (3,)}
    if subject in special:
        return special[subject] + ("",)
    return (1,) + endpoint_sort_key(subject)


def _render_finding(finding: "Finding", by_key: dict, console: "Console", depth: int, seen: set[str]) -> None:
    from rich.text import Text

    indent = "  " * depth
    label = SEVERITY_LABEL.get(finding.severity, finding.severity.upper())
    line = Text(indent)
    line.append(f"[{label}] ", style=SEVERITY_STYLE.get(finding.severity, ""))
    line.append(finding.title)
    line.append(f"  ({finding.id})", style="dim")
    console.print(line)
    if finding.explanation:
        console.print(Text(f"{indent}    {finding.explanation}"))
    for ref in finding.evidence[:MAX_EVIDENCE_LINES]:
        console.print(Text(f"{indent}    > {ref.cite()}", style="dim"))
    if len(finding.evidence) > MAX_EVIDENCE_LINES:
        console.print(Text(f"{indent}    > ... {len(finding.evidence) - MAX_EVIDENCE_LINES} more line(s) in --json", style="dim"))
    if finding.confirm_with:
        console.print(Text(f"{indent}    To confirm: {finding.confirm_with}"))
    if finding.remedy:
        console.print(Text(f"{indent}    Fix: {finding.remedy}", style="green"))
    seen = seen | {finding.key}
    for cause_key in finding.causes:
        cause = by_key.get(cause_key)
        if cause is None or cause_key in seen:
            continue
        console.print(Text(f"{indent}    because:", style="italic"))
        _render_finding(cause, by_key, console, depth + 2, seen)


def _render_recommendation(recommendation: Any | None, console: "Console") -> None:
    if recommendation is None or not getattr(recommendation, "groups", None):
        return
    from rich.table import Table

    table = Table(title="Tensor-parallel groups (best partition of all GPUs at each TP size)", title_justify="left")
    for column in ("TP", "groups", "worst link inside a group", "why"):
        table.add_column(column)
    rationale = getattr(recommendation, "rationale", {}) or {}
    for size in sorted(recommendation.groups):
        worst = recommendation.worst_link.get(size)
        table.add_row(
            str(size),
            " ".join("{" + ",".join(str(i) for i in group) + "}" for group in recommendation.groups[size]),
            f"[{path_style(worst)}]{escape(worst or '?')}[/]",
            escape(str(rationale.get(size, ""))) if isinstance(rationale, dict) else "",
        )
    console.print(table)
    comparison = getattr(recommendation, "comparison", None)
    if comparison:
        console.print(comparison, markup=False)
    visible = getattr(recommendation, "cuda_visible_devices", {}) or {}
    for size in sorted(visible):
        console.print(f"TP{size}: " + "   ".join(visible[size]), markup=False)
    console.print()


def _render_inputs(machine: "Machine", console: "Console") -> None:
    from rich.text import Text

    if machine.inputs:
        console.print(Text("Inputs", style="bold"))
        for record in machine.inputs:
            style = "red" if record.format == "unknown" else ""
            console.print(Text(f"  {record.path}: {record.format}", style=style))
            for warning in record.warnings[:5]:
                console.print(Text(f"    ! {warning}", style="yellow"))
            if len(record.warnings) > 5:
                console.print(Text(f"    ! ... {len(record.warnings) - 5} more warning(s) in --json", style="yellow"))
    notes = [n for n in machine.notes if not any(n.message in r.warnings for r in machine.inputs)]
    if notes:
        console.print(Text("Notes", style="bold"))
        for note in notes:
            console.print(Text(f"  {note.subject}: {note.message}", style="yellow" if note.level == "warn" else ""))


def _list_some(items: list[str], shown: int = 6) -> str:
    if len(items) <= shown:
        return ", ".join(items)
    return ", ".join(items[:shown]) + f" and {len(items) - shown} more"


def _fmt(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
