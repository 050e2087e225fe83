"""Benchmark findings: nccl-tests data errors, bus bandwidth against what the links should give,
runs whose numbers mean nothing, scaling that falls, and P2P copies that are no faster than
host-staged ones (p2pBandwidthLatencyTest).

Expectations state their basis: the slowest link class among the tested GPUs when the topology
is known (NVLink, or PCIe generation x width), else typical public all-reduce results for the
GPU model named in the nccl-tests header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef
from k3diag.model.words import counted

if TYPE_CHECKING:  # imported where there are benchmarks: most inputs have none, and start-up counts
    from k3diag.model.bench_records import NcclTestsBenchmark, P2PBandwidthBenchmark
    from k3diag.model.probe_records import ProbeBenchmark

# Theoretical one-direction PCIe bandwidth per lane (GB/s) by generation; achieved ~80% of it.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}
PCIE_EFFICIENCY = 0.8
# Peak all_reduce bus bandwidth seen in public nccl-tests threads for one 8-GPU NVSwitch node
# (NVIDIA/nccl-tests#212, NVIDIA/nccl#1374 and the field notes): name fragment -> (GB/s, basis).
TYPICAL_NVLINK_BUSBW: tuple[tuple[str, float, str], ...] = (
    ("H200", 475.0, "8xH200 all_reduce peaks near 475 GB/s busbw"),
    ("H100", 370.0, "8xH100 all_reduce reaches ~370 GB/s busbw with ring, ~480 with NVLS"),
    ("H800", 215.0, "8xH800 all_reduce reaches ~215 GB/s busbw"),
    ("A100-SXM", 230.0, "8xA100 SXM all_reduce reaches ~230 GB/s busbw"),
    ("A100 SXM", 230.0, "8xA100 SXM all_reduce reaches ~230 GB/s busbw"),
    ("A800", 180.0, "8xA800 all_reduce reaches ~180 GB/s busbw"),
)
LOW_FRACTION = 0.5  # "far below": under half of the expectation
MIN_PLATEAU_BYTES = 128 * 1024 * 1024  # smaller tables never reach the plateau
BUSBW_OPS = ("all_reduce", "all_gather", "reduce_scatter", None)


def _nccl_tests(machine: Machine) -> list[NcclTestsBenchmark]:
    if not machine.benchmarks:
        return []
    from k3diag.model.bench_records import NcclTestsBenchmark

    return [b for b in machine.benchmarks if isinstance(b, NcclTestsBenchmark)]


def _subject(bench) -> str:
    op = getattr(bench, "op", None) or getattr(bench, "tool", "benchmark")
    name = (bench.input or "").replace("\\", "/").rsplit("/", 1)[-1]
    n = getattr(bench, "nranks", None)
    return f"{op}:{n}rank:{name}" if n else f"{op}:{name}"


# -- nccl-tests-data-errors ----------------------------------------------------------------------


def check_data_errors(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _nccl_tests(machine):
        bad_rows = [row for row in bench.rows if row.wrong() > 0]
        oob = bench.out_of_bounds or 0
        if not bad_rows and oob <= 0:
            continue
        total = bench.wrong_total
        evidence = [row.source for row in bad_rows[:3] if row.source is not None]
        if bench.oob_source:
            evidence.append(bench.oob_source)
        sizes = ", ".join(str(row.size_bytes) for row in bad_rows[:6])
        yield Finding(
            id="nccl-tests-data-errors",
            severity="fail",
            subjects=[_subject(bench)],
            title=f"nccl-tests {bench.op or ''} returned wrong data ({counted(max(total, oob), 'wrong value')})".replace("  ", " "),
            explanation=(
                f"The test checks every result; {('rows of sizes ' + sizes + ' report #wrong > 0') if bad_rows else ''}"
                f"{'; ' if bad_rows and oob else ''}{('the footer counts ' + str(oob) + ' out-of-bounds values') if oob else ''}. "
                "Collectives that corrupt data make training diverge silently and inference return garbage. The usual "
                "causes are P2P over a PCIe path that cannot carry it (ACS/IOMMU redirecting peer writes, consumer "
                "GPUs with a P2P-patched driver), a faulty NVLink, or GPU memory errors."
            ),
            evidence=evidence[:4],
            remedy=("Stop using this machine for production. Rerun with NCCL_P2P_DISABLE=1: if the errors vanish, P2P "
                    "is broken (check ACS/IOMMU on the bridges, `nvidia-smi topo -p2p r`); else check `nvidia-smi -q -d "
                    "ECC,ROW_REMAPPER` and XID errors in dmesg."),
            confirm_with="NCCL_P2P_DISABLE=1 all_reduce_perf -b 8 -e 1G -f 2 -g <n> -c 1",
            data={"wrong_total": total, "out_of_bounds": bench.out_of_bounds},
        )


# -- nccl-tests-aborted -------------------------------------------------------------------------


def check_aborted(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _nccl_tests(machine):
        if not bench.failure:
            continue
        where = f" on {', '.join(bench.failure_hosts[:4])}" if bench.failure_hosts else ""
        done = (f"after {counted(len(bench.rows), 'message size')}, the largest {bench.rows[-1].size_bytes} bytes: its numbers "
                "cover only what ran" if bench.rows else "before any message size finished: it measured nothing")
        nccl_said = [f for f in earlier if f.id == "nccl-warnings"]
        yield Finding(
            id="nccl-tests-aborted",
            severity="fail",
            subjects=[_subject(bench)],
            title=f"nccl-tests {bench.op or ''} aborted{where}".replace("  ", " "),
            explanation=(
                f"The test stopped with {bench.failure} {done}. "
                + ("NCCL's own warnings in this log say why (see the NCCL warnings finding)." if nccl_said else
                   "The error string alone rarely says why: NCCL's log does (`NCCL WARN` lines just before it).")
            ),
            evidence=[bench.failure_source] if bench.failure_source else [],
            remedy=("Rerun the same command with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET,P2P for transport trouble) "
                    "and read the NCCL WARN lines before the failure; 'unhandled cuda error' that starts at a large size "
                    "is usually GPU memory (lower -e), 'remote process exited or there was a network error' a peer "
                    "that died or a network path that broke."),
            causes=[f.key for f in nccl_said],
            confirm_with="NCCL_DEBUG=INFO all_reduce_perf -b 8 -e 1G -f 2 -g <n>",
            data={"failure": bench.failure, "hosts": list(bench.failure_hosts), "rows": len(bench.rows)},
        )


# -- nccl-tests-single-rank ----------------------------------------------------------------------


def check_single_rank(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _nccl_tests(machine):
        if bench.nranks != 1:
            continue
        evidence = [d for d in [bench.header_source, bench.avg_source] if d is not None]
        yield Finding(
            id="nccl-tests-single-rank",
            severity="info",
            subjects=[_subject(bench)],
            title=f"nccl-tests {bench.op or ''} ran with one rank: its bus bandwidth means nothing".replace("  ", " "),
            explanation=(
                "With a single rank no data crosses any link: busbw is 0 (or algbw shows a local memory copy), so the "
                "result says nothing about the interconnect. A common cause is an nccl-tests binary built without "
                "MPI=1 started by mpirun: every process runs its own 1-rank test."
            ),
            evidence=evidence,
            remedy="Run with -g <number of GPUs> on one node, or build nccl-tests with MPI=1 for mpirun/srun jobs.",
            confirm_with="all_reduce_perf -b 8 -e 8G -f 2 -g 8",
        )


# -- nccl-tests-busbw-low ------------------------------------------------------------------------


def _tested_gpus(machine: Machine, bench: NcclTestsBenchmark) -> list[int]:
    if len(bench.hosts) > 1:
        return []
    own = machine.host.hostname.split(".")[0].lower() if machine.host.hostname else None
    if own and bench.hosts and bench.hosts[0].split(".")[0].lower() != own:
        return []
    indices = []
    for device in bench.devices:
        gpu = machine.gpu_by_bus_id(device.bus_id) if device.bus_id else None
        if gpu is None and device.device is not None and device.device in machine.gpus:
            gpu = machine.gpus[device.device]
        if gpu is not None:
            indices.append(gpu.index)
    return sorted(set(indices))


def _expectation(machine: Machine, bench: NcclTestsBenchmark) -> tuple[float, str, list[SourceRef]] | None:
    gpus = _tested_gpus(machine, bench)
    if len(gpus) >= 2:
        paths = []
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                link = machine.link(f"GPU{a}", f"GPU{b}")
                paths.append(link)
        if paths and all(link is not None and link.nvlinks for link in paths):
            name = next((machine.gpus[g].name for g in gpus if machine.gpus[g].name), None)
            typical = _typical(name)
            if typical:
                value, basis = typical
                return value, f"every tested pair is NVLink; {basis}", []
            return None
        worst = None
        for g in gpus:
            pcie = machine.gpus[g].pcie
            gen = pcie.gen_max or pcie.gen_current
            width = pcie.width_current or pcie.width_max
            if not gen or not width or gen not in PCIE_LANE_GBPS:
                continue
            value = PCIE_LANE_GBPS[gen] * width * PCIE_EFFICIENCY
            if worst is None or value < worst[0]:
                worst = (value, g, gen, width)
        if worst is not None:
            value, g, gen, width = worst
            theory = PCIE_LANE_GBPS[gen] * width
            source = machine.gpus[g].pcie.source
            return (round(value, 1),
                    f"the slowest link among the tested GPUs is GPU{g}'s PCIe Gen{gen} x{width} "
                    f"({theory:.1f} GB/s per direction, ~{value:.0f} GB/s achievable)",
                    [source] if source else [])
        return None
    if len(bench.hosts) <= 1 and bench.devices:
        name = next((d.name for d in bench.devices if d.name), None)
        typical = _typical(name)
        if typical and (bench.nranks or 0) >= 8:
            return typical[0], typical[1], []
    return None


def _typical(name: str | None) -> tuple[float, str] | None:
    if not name:
        return None
    for fragment, value, basis in TYPICAL_NVLINK_BUSBW:
        if fragment in name:
            return value, basis
    return None


def check_busbw_low(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _nccl_tests(machine):
        if bench.op not in BUSBW_OPS or not bench.rows or (bench.nranks is not None and bench.nranks < 2):
            continue
        largest = max(row.size_bytes for row in bench.rows)
        if largest < MIN_PLATEAU_BYTES:
            continue
        measured = bench.plateau_busbw
        if measured is None:
            continue
        expectation = _expectation(machine, bench)
        if expectation is None:
            continue
        expected, basis, sources = expectation
        if measured >= LOW_FRACTION * expected:
            continue
        best = bench.best_row()
        evidence = [r.source for r in (best,) if r is not None and r.source is not None]
        if bench.avg_source:
            evidence.append(bench.avg_source)
        evidence.extend(sources)
        pct = 100.0 * measured / expected if expected else 0.0
        yield Finding(
            id="nccl-tests-busbw-low",
            severity="warn",
            subjects=[_subject(bench)],
            title=f"{bench.op or 'collective'} bus bandwidth {measured:.1f} GB/s is {pct:.0f}% of the ~{expected:.0f} GB/s "
                  f"the links should give",
            explanation=(
                f"At the largest messages (up to {largest} bytes) nccl-tests measured {measured:.1f} GB/s bus bandwidth "
                f"(peak {bench.max_busbw} GB/s). Expected about {expected:.0f} GB/s: {basis}. Far below that, the "
                "collective is not using the links it should: look for SHM or socket transports in an NCCL_DEBUG=INFO "
                "log of the same run, P2P disabled, ACS redirection, a narrowed PCIe link or cross-socket pairs."
            ),
            evidence=evidence[:5],
            remedy=(f"Rerun the test with {'NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P'} and give the log to "
                    "k3diag: it shows the transport of every pair; compare with `nvidia-smi topo -m` and fix the pairs "
                    "that do not use P2P/NVLink."),
            confirm_with=f"NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P {bench.op or 'all_reduce'}_perf -b 1G -e 8G -f 2 -g {bench.nranks or 8}",
            data={"measured": measured, "expected": expected, "basis": basis},
        )


# -- nccl-tests-scaling-drops --------------------------------------------------------------------


def check_scaling_drops(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    by_op: dict[str, list[NcclTestsBenchmark]] = {}
    for bench in _nccl_tests(machine):
        if bench.nranks and bench.nranks >= 2 and bench.plateau_busbw and bench.rows:
            by_op.setdefault(bench.op or "unknown", []).append(bench)
    for op, benches in sorted(by_op.items()):
        best_by_n: dict[int, NcclTestsBenchmark] = {}
        for bench in benches:
            current = best_by_n.get(bench.nranks or 0)
            if current is None or (bench.plateau_busbw or 0) > (current.plateau_busbw or 0):
                best_by_n[bench.nranks or 0] = bench
        ordered = [best_by_n[n] for n in sorted(best_by_n)]
        for smaller, larger in zip(ordered, ordered[1:]):
            before, after = smaller.plateau_busbw or 0.0, larger.plateau_busbw or 0.0
            if before <= 0 or after >= 0.7 * before:
                continue
            evidence = [r.source for r in (smaller.best_row(), larger.best_row()) if r is not None and r.source]
            yield Finding(
                id="nccl-tests-scaling-drops",
                severity="warn",
                subjects=[f"{op}:{smaller.nranks}->{larger.nranks}"],
                title=f"{op} bus bandwidth falls from {before:.1f} to {after:.1f} GB/s going from {smaller.nranks} to "
                      f"{larger.nranks} GPUs",
                explanation=(
                    "Bus bandwidth is normalized for the number of ranks, so on a healthy system it stays flat or rises "
                    f"as GPUs are added. Here it drops by {100 * (1 - after / before):.0f}%: the added GPUs bring a slower "
                    "link into the ring (a cross-socket pair, a GPU without P2P, a narrower PCIe link, or the network)."
                ),
                evidence=evidence,
                remedy=("Find which GPU or node the larger run added and check its pairs in `nvidia-smi topo -m` and "
                        "`-p2p r`; use tensor-parallel group sizes that stay within the fast island."),
                confirm_with=f"{op}_perf -b 1G -e 8G -f 2 -g {smaller.nranks}; {op}_perf -b 1G -e 8G -f 2 -g {larger.nranks}",
                data={"before": before, "after": after, "nranks": [smaller.nranks, larger.nranks]},
            )


# -- p2pBandwidthLatencyTest ---------------------------------------------------------------------


def _p2p_benches(machine: Machine) -> list[P2PBandwidthBenchmark | ProbeBenchmark]:
    """Measurements with P2P-enabled/disabled matrices: p2pBandwidthLatencyTest, and k3diag probe."""
    if not machine.benchmarks:
        return []
    from k3diag.model.bench_records import P2PBandwidthBenchmark
    from k3diag.model.probe_records import ProbeBenchmark

    return [b for b in machine.benchmarks if isinstance(b, (P2PBandwidthBenchmark, ProbeBenchmark))]


def check_p2p_enabled_not_faster(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _p2p_benches(machine):
        for kind in ("Unidirectional", "Bidirectional"):
            disabled = bench.matrix(kind, "P2P=Disabled", "Bandwidth")
            enabled = bench.matrix(kind, "P2P=Enabled", "Bandwidth")
            if disabled is None or enabled is None:
                continue
            (dname, dmat), (ename, emat) = disabled, enabled
            pairs = []
            for i, row in enumerate(emat):
                for j, on in enumerate(row):
                    if i == j or on is None or i >= len(dmat) or j >= len(dmat[i]) or dmat[i][j] is None:
                        continue
                    if bench.can_access and i < len(bench.can_access) and j < len(bench.can_access[i]) \
                            and bench.can_access[i][j] is False:
                        continue  # CUDA refused P2P: the "enabled" run fell back to staged copies
                    off = dmat[i][j]
                    if off > 0 and on <= 1.1 * off:
                        pairs.append((i, j, on, off))
            if not pairs:
                continue
            slower = [p for p in pairs if p[2] < 0.9 * p[3]]
            worst = min(pairs, key=lambda p: p[2] / p[3])
            gpus = sorted({p[0] for p in pairs} | {p[1] for p in pairs})
            listing = ", ".join(f"{i}->{j} {on:.1f} vs {off:.1f}" for i, j, on, off in sorted(pairs)[:8])
            causes = []
            for i, j, _, _ in pairs:
                a, b = sorted((i, j))
                causes.extend([f"p2p-not-supported@GPU{a},GPU{b}", f"gpu-pair-sys@GPU{a},GPU{b}"])
            evidence = [s for s in (bench.sources.get(ename), bench.sources.get(dname)) if s is not None]
            yield Finding(
                id="p2p-enabled-not-faster",
                severity="warn",
                subjects=[f"GPU{g}" for g in gpus],
                title=(f"{kind.lower()} P2P copies are {'slower than' if slower else 'no faster than'} host-staged "
                       f"copies for {counted(len(pairs), 'GPU pair')} (worst {worst[0]}->{worst[1]}: {worst[2]:.1f} vs "
                       f"{worst[3]:.1f} GB/s)"),
                explanation=(
                    f"{bench.tool} measured '{ename}' against '{dname}': {listing}. Direct peer copies "
                    "should beat copies staged through host memory (PCIe P2P by ~1.5-2x, NVLink by far more). When they "
                    "do not, peer traffic is being bounced through the CPU root complex (ACS ReqRedir/CmpltRedir on the "
                    "bridges, IOMMU translation) or the pair is cross-socket; NCCL will use such P2P and run slower than "
                    "with it disabled."
                ),
                evidence=evidence,
                remedy=("Check ACS on the PCIe switches and root ports above these GPUs (`lspci -vv | grep -i acsctl`: "
                        "ReqRedir+ CmpltRedir+ redirect P2P) and the IOMMU mode (iommu=pt); until fixed, NCCL_P2P_DISABLE=1 "
                        "or NCCL_P2P_LEVEL=PXB may be faster for the affected pairs."),
                causes=sorted(set(causes)),
                confirm_with="p2pBandwidthLatencyTest --p2p_read; sudo lspci -vv | grep -E 'ACSCtl|^[0-9a-f]'",
                data={"pairs": [[i, j, on, off] for i, j, on, off in pairs], "matrices": [ename, dname]},
            )


def check_p2p_cannot_access_peer(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _p2p_benches(machine):
        refused = []
        for i, row in enumerate(bench.can_access):
            for j, value in enumerate(row):
                if value is False:
                    refused.append((i, j))
        if not refused:
            continue
        unordered = sorted({tuple(sorted(p)) for p in refused})
        gpus = sorted({g for pair in unordered for g in pair})
        names = {g.name for g in bench.gpus if g.name}
        consumer = any(tag in name for name in names for tag in ("GeForce", "TITAN"))
        causes = []
        for a, b in unordered:
            causes.extend([f"p2p-not-supported@GPU{a},GPU{b}", f"gpu-pair-sys@GPU{a},GPU{b}"])
        evidence = [bench.sources[f"access:{i}:{j}"] for i, j in refused[:4] if f"access:{i}:{j}" in bench.sources]
        total_pairs = len(bench.can_access) * (len(bench.can_access) - 1) // 2
        # A pair is known when the test printed either direction; an output cut short (a pasted head) says
        # nothing of the rest, and "N of all pairs" would tell the reader that the rest can reach each other.
        unknown_pairs = sum(1 for i, row in enumerate(bench.can_access) for j in range(i + 1, len(row))
                            if row[j] is None and (j >= len(bench.can_access) or i >= len(bench.can_access[j])
                                                   or bench.can_access[j][i] is None))
        listing = ", ".join(f"{a}-{b}" for a, b in unordered[:12]) + (" ..." if len(unordered) > 12 else "")
        refused = (f"{counted(len(unordered), 'GPU pair')}: {listing} (the output shows no other pair: {unknown_pairs} of "
                   f"{total_pairs} unknown)" if unknown_pairs else
                   f"{len(unordered):,} of {counted(total_pairs, 'GPU pair')}: {listing}")
        yield Finding(
            id="p2p-cannot-access-peer",
            severity="warn",
            subjects=[f"GPU{g}" for g in gpus],
            title=f"CUDA refuses peer access for {refused}",
            explanation=(
                "cudaDeviceCanAccessPeer says no for these pairs, so CUDA and NCCL copy their data through host memory "
                "(NCCL falls back to SHM) and frameworks that need P2P (vLLM/SGLang custom all-reduce) disable it or "
                "fail. "
                + ("These are consumer GPUs: the stock driver refuses P2P on them." if consumer else
                   "On data-center GPUs this means the platform blocks peer traffic: GPUs on different sockets, a "
                   "root complex or switch without P2P support, or IOMMU/ACS settings; in a VM, passthrough without P2P.")
            ),
            evidence=evidence,
            remedy=("Keep tensor-parallel groups to GPUs that can access each other; compare with `nvidia-smi topo "
                    "-p2p r` (CNS/GNS/TNS say why); on data-center GPUs check BIOS ACS/IOMMU settings."),
            causes=sorted(set(causes)),
            confirm_with="nvidia-smi topo -p2p r",
            data={"pairs": [list(p) for p in unordered], "consumer_gpus": consumer, "pairs_unknown": unknown_pairs},
        )


RULES = (
    Rule("nccl-tests-data-errors", "fail", "nccl-tests found wrong data", check_data_errors, kind="fault"),
    Rule("nccl-tests-aborted", "fail", "nccl-tests stopped with an error", check_aborted, kind="fault"),
    Rule("nccl-tests-single-rank", "info", "nccl-tests ran with a single rank", check_single_rank, kind="info"),
    Rule("nccl-tests-busbw-low", "warn", "Bus bandwidth far below the links' capability", check_busbw_low,
         kind="fault"),
    Rule("nccl-tests-scaling-drops", "warn", "Bus bandwidth falls as GPUs are added", check_scaling_drops,
         kind="fault"),
    Rule("p2p-enabled-not-faster", "warn", "P2P copies no faster than host-staged copies", check_p2p_enabled_not_faster,
         kind="fault"),
    Rule("p2p-cannot-access-peer", "warn", "CUDA refuses peer access between GPUs", check_p2p_cannot_access_peer,
         kind="fault"),
)
