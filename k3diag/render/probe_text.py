"""`k3diag probe` on a terminal or a pipe: what was measured, against what the link should give.

Plain text (no box drawing), one line per GPU and per measured pair, then the findings the
measurements support and anything skipped, so a pasted probe output reads like the tools it
stands beside (p2pBandwidthLatencyTest, nvbandwidth).
"""

from __future__ import annotations

from k3diag.analyze.finding import Finding
from k3diag.analyze.rules.probe import PINNED_EFFICIENCY, raw_link_gbps
from k3diag.model.machine import Machine
from k3diag.model.probe_records import ProbeBenchmark
from k3diag.render.escape import escape_terminal
from k3diag.model.words import counted


def _gbps(value: float | None) -> str:
    return f"{value:7.1f}" if value is not None else "      -"


def _check(value: bool | None) -> str:
    return {True: "intact", False: "CORRUPTED", None: "not checked"}[value]


def render_probe(bench: ProbeBenchmark, machine: Machine, findings: list[Finding]) -> list[str]:
    lines = [
        f"k3diag probe: {counted(len(bench.gpus), 'GPU')} through {bench.library or 'the driver library'}"
        + (f" (driver {bench.driver_version})" if bench.driver_version else "")
        + f", {(bench.size_bytes or 0) // (1024 * 1024)} MiB buffers, best of {bench.repeats or 0}",
        "",
        "Host <-> GPU, pinned memory (GB/s)",
        "  GPU  name                      bus id         link (expected)          H2D      D2H  data",
    ]
    unjudged: list[str] = []
    for probed in bench.gpus:
        gpu = machine.gpu_by_bus_id(probed.bus_id) if probed.bus_id else None
        link = "link class unknown"
        raw = raw_link_gbps(gpu.pcie.gen_max, gpu.pcie.width_max) if gpu is not None else None
        if raw is None and probed.host_to_device_gbps is not None:
            unjudged.append(f"GPU{probed.index}")
        if gpu is not None:
            if raw is not None:
                link = f"Gen{gpu.pcie.gen_max} x{gpu.pcie.width_max} (~{raw * PINNED_EFFICIENCY:.0f})"
                if (gpu.pcie.gen_current, gpu.pcie.width_current) != (gpu.pcie.gen_max, gpu.pcie.width_max) \
                        and gpu.pcie.width_current is not None:
                    link += f" at Gen{gpu.pcie.gen_current} x{gpu.pcie.width_current}"
        name = escape_terminal(probed.name or "unnamed")[:24]
        lines.append(f"  {probed.index:>3}  {name:<24}  {probed.bus_id or 'bus id unknown':<13}  {link:<22} "
                     f"{_gbps(probed.host_to_device_gbps)}  {_gbps(probed.device_to_host_gbps)}  {_check(probed.data_ok)}")
    if bench.pairs:
        lines += ["", "GPU -> GPU copies (GB/s): direct peer copy, and staged through the host",
                  "  pair      peer access   direct   staged  data"]
        for pair in bench.pairs:
            access = {True: "yes", False: "refused", None: "unknown"}[pair.can_access_peer]
            data = pair.data_ok_peer_enabled if pair.data_ok_peer_enabled is not None else pair.data_ok_peer_disabled
            if pair.data_ok_peer_enabled is not None and pair.data_ok_peer_disabled is False:
                data = False
            lines.append(f"  {pair.src:>2} -> {pair.dst:<2}  {access:<12} {_gbps(pair.peer_enabled_gbps)}  "
                         f"{_gbps(pair.peer_disabled_gbps)}  {_check(data)}")
    if findings:
        lines += ["", "Findings"]
        for finding in findings:
            lines.append(f"  {finding.severity.upper():<4} {finding.id}: {escape_terminal(finding.title)}")
            if finding.remedy:
                lines.append(f"       fix: {escape_terminal(finding.remedy)}")
    else:
        measured = any(g.host_to_device_gbps is not None for g in bench.gpus) or bench.pairs
        if measured:
            judged = "every byte arrived" + ("" if unjudged else ", and every copy is within what its link gives")
            lines += ["", f"No finding: {judged}."]
    if unjudged:
        lines.append(f"Link class unknown for {', '.join(unjudged)}, so their host copies were not judged: "
                     "`nvidia-smi -q -d PCIE` (Link Width / PCIe Generation, Max and Current) tells it.")
    notes = bench.skipped + bench.errors
    if notes:
        lines += ["", "Not measured"] + [f"  {escape_terminal(note)}" for note in notes]
    return lines
