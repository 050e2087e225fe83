"""Findings that matter on AMD Instinct and Radeon hosts.

XGMI (Infinity Fabric) links tie the GPUs of a hive together; on an 8-GPU MI300X/MI325X/
MI355X baseboard every pair has its own link, so TP8 collectives never touch PCIe. A pair
that reports PCIE inside such a hive has lost its link. RCCL also has host requirements the
NVIDIA world does not: `iommu=pt` and `HSA_FORCE_FINE_GRAIN_PCIE=1` for PCIe peer traffic.

Which source wins for a pair: live amdsmi readings, then `amd-smi topology`, then
`rocm-smi --showtopo` (contradictions are reported by the contradictions rules).
"""

from __future__ import annotations

from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.analyze.rules.amd_views import (
    AMD_ORIGINS,
    amd_links,
    by_pair,
    describe_link,
    distinct_refs,
    gpu_span,
    has_amd,
    xgmi_components,
)
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef
from k3diag.model.topology import Link, endpoint_sort_key, pair_key
from k3diag.model.words import counted

# A pair measured below this fraction of its link class's median is "far below".
BELOW_CLASS_FRACTION = 0.5
# A hive counts as a hive (and a PCIE pair in it as a broken link) when at least this share of
# its pairs report XGMI.
HIVE_XGMI_SHARE = 0.5


# -- amd-xgmi-link-down -----------------------------------------------------------------------

LINK_DOWN_REMEDY = (
    "Confirm the link state with `amd-smi xgmi --link-status` (and the per-link counters of `amd-smi xgmi -m`) "
    "and the pair's type with `rocm-smi --showtopo`; check for XGMI errors with `amd-smi metric --xgmi-err` and "
    "`sudo dmesg | grep -i xgmi`, and count physical links per pair in `/sys/class/drm/card*/device/xgmi_num_links`. "
    "A full power cycle (not a warm reboot) retrains the links; if the pair still reports PCIE, reseat the OAM "
    "modules on the baseboard or open an RMA with the system vendor for the GPU/baseboard. Until then, TP groups "
    "that do not contain both GPUs keep running on XGMI."
)


def check_xgmi_link_down(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    links = amd_links(machine)
    for component in xgmi_components(links):
        if len(component) < 3:
            continue
        members = set(component)
        inside = {key: link for key, link in links.items() if key[0] in members and key[1] in members}
        xgmi = [link for link in inside.values() if link.path == "XGMI"]
        if len(xgmi) / max(len(inside), 1) < HIVE_XGMI_SHARE:
            continue
        for (a, b), link in by_pair(inside.items()):
            if link.path != "PCIE":
                continue
            contrast = next((other for other in xgmi if a in (other.a, other.b) or b in (other.a, other.b)), None)
            yield Finding(
                id="amd-xgmi-link-down",
                severity="fail",
                subjects=[a, b],
                title=f"XGMI link between {a} and {b} is down: the pair reports PCIE inside an XGMI hive",
                explanation=(
                    f"{a} and {b} belong to the XGMI hive {gpu_span(component)} ({len(xgmi)} of {len(inside)} pairs "
                    f"report XGMI), but {link.origin} reports {describe_link(link)} for this pair. Their direct "
                    "Infinity Fabric link is down or did not train, so traffic between them crosses PCIe and the "
                    "CPU at a fraction of XGMI bandwidth; every RCCL ring or tree that uses this pair, and so "
                    "every collective of a tensor-parallel group containing both GPUs, slows to that speed."
                ),
                evidence=distinct_refs(link.source, contrast.source if contrast else None),
                remedy=LINK_DOWN_REMEDY.replace("both GPUs", f"both {a} and {b}"),
                confirm_with="amd-smi xgmi --link-status",
                data={"hive": component, "xgmi_pairs": len(xgmi), "pairs": len(inside), "origin": link.origin,
                      "hops": link.hops, "weight": link.weight},
            )


# -- amd-xgmi-hive-incomplete ------------------------------------------------------------------


def check_xgmi_hive_incomplete(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    links = amd_links(machine)
    if not any(link.path == "XGMI" for link in links.values()):
        return
    components = xgmi_components(links)
    hives = [group for group in components if len(group) >= 2]
    loners = [group[0] for group in components if len(group) == 1]
    largest = max((len(group) for group in hives), default=0)
    down = {finding.key for finding in earlier if finding.id == "amd-xgmi-link-down"}
    for hive in hives:
        members = set(hive)
        inside = {key: link for key, link in links.items() if key[0] in members and key[1] in members}
        missing = [key for key, link in inside.items() if link.path != "XGMI"]
        if not missing:
            continue
        causes = [f"amd-xgmi-link-down@{a},{b}" for a, b in missing if f"amd-xgmi-link-down@{a},{b}" in down]
        yield Finding(
            id="amd-xgmi-hive-incomplete",
            severity="warn",
            subjects=hive,
            title=f"The XGMI hive {gpu_span(hive)} is not fully connected ({counted(len(missing), 'pair')} without XGMI)",
            explanation=(
                f"{len(inside) - len(missing)} of {len(inside)} pairs in this hive report XGMI; "
                + ", ".join(f"{a}-{b}" for a, b in missing[:8])
                + (" and more" if len(missing) > 8 else "")
                + " do not. On a fully connected baseboard (MI300X/MI325X/MI355X UBB) every pair has its own link; "
                "collectives over the whole hive run at the speed of the slowest pair."
            ),
            evidence=distinct_refs(*(inside[key].source for key in missing[:4])),
            remedy="See the link-down findings for each pair: `amd-smi xgmi --link-status`, a full power cycle, "
                   "then reseat/RMA. `rocm-smi --showtopo` must show XGMI for every pair of the hive afterwards.",
            causes=causes,
            confirm_with="rocm-smi --showtopo",
            data={"hive": hive, "pairs_without_xgmi": [list(key) for key in missing]},
        )
    if hives and loners and largest >= 2:
        big = max(hives, key=len)
        sample = next((link for key, link in links.items() if loners[0] in key), None)
        yield Finding(
            id="amd-xgmi-hive-incomplete",
            severity="warn",
            subjects=loners,
            title=f"{', '.join(loners)} {'is' if len(loners) == 1 else 'are'} outside the XGMI hive of {gpu_span(big)}",
            explanation=(
                f"{gpu_span(big)} are joined by XGMI but {', '.join(loners)} reach every other GPU over PCIe only. "
                "Either all of this GPU's XGMI links are down, or it is a different board (a PCIe card next to an "
                "XGMI hive). A tensor-parallel group that includes it runs at PCIe speed."
            ),
            evidence=distinct_refs(sample.source if sample else None),
            remedy="Check `amd-smi xgmi --link-status` and `amd-smi metric --xgmi-err` for this GPU; a full power "
                   "cycle retrains the links; if it stays outside the hive, reseat or RMA it. Keep it out of TP "
                   "groups with the hive's GPUs meanwhile.",
            confirm_with="amd-smi xgmi --link-status",
            data={"outside": loners, "hive": big},
        )
    if len(hives) >= 2 and len({len(group) for group in hives}) > 1:
        smaller = [group for group in hives if len(group) < largest]
        subjects = sorted({name for group in smaller for name in group}, key=endpoint_sort_key)
        yield Finding(
            id="amd-xgmi-hive-incomplete",
            severity="warn",
            subjects=subjects,
            title="XGMI hives of different sizes: " + " + ".join(str(len(group)) for group in hives) + " GPUs",
            explanation=(
                "The GPUs form XGMI hives of unequal size ("
                + "; ".join(gpu_span(group) for group in hives)
                + "). Boards come in whole hives (for example 2 x 4 MI100 or 8 MI300X), so an odd split usually "
                "means links are down between GPUs that should share a hive."
            ),
            evidence=distinct_refs(*(link.source for link in list(links.values())[:2])),
            remedy="Compare with the platform's documented topology; check `amd-smi xgmi --link-status` on the "
                   "GPUs of the smaller hive and power cycle, then reseat/RMA.",
            confirm_with="amd-smi xgmi --link-status",
            data={"hives": hives},
        )


# -- amd-p2p-not-accessible -------------------------------------------------------------------

P2P_REMEDY = (
    "P2P between AMD GPUs needs: large BAR (\"Above 4G Decoding\" and Resizable BAR on in the BIOS), `iommu=pt` "
    "on the kernel command line, ACS redirection off on the bridges between the GPUs (`sudo lspci -vvv | grep "
    "ACSCtl`; AMD's cluster guide disables it with `setpci -s <bdf> ECAP_ACS+0x6.w=0000`), a kernel built with "
    "CONFIG_HSA_AMD_P2P, and both GPUs under a root complex that forwards peer traffic. Check again with "
    "`amd-smi topology -a` (ACCESS TABLE) or `rocm-bandwidth-test` (access matrix)."
)


def check_p2p_not_accessible(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    links = amd_links(machine)
    reported: set[tuple[str, str]] = set()
    for status in machine.p2p:
        if status.origin not in AMD_ORIGINS or status.status != "NS":
            continue
        key = pair_key(status.src, status.dst)
        if key in reported:
            continue
        reported.add(key)
        yield _p2p_finding(key, links.get(key), status.origin, status.source)
    for bench in _rbt_benchmarks(machine):
        access = bench.matrices.get("access")
        if access is None:
            continue
        mapping = _gpu_names(machine, bench)
        for row_id, src_name in mapping.items():
            for col_id, dst_name in mapping.items():
                if row_id == col_id:
                    continue
                if access.value(row_id, col_id) != 0:
                    continue
                key = pair_key(src_name, dst_name)
                if key in reported:
                    continue
                reported.add(key)
                yield _p2p_finding(key, links.get(key), "rocm-bandwidth-test", access.source(row_id))


def _p2p_finding(key: tuple[str, str], link: Link | None, origin: str, source: SourceRef | None) -> Finding:
    a, b = key
    on_xgmi = link is not None and link.path == "XGMI"
    return Finding(
        id="amd-p2p-not-accessible",
        severity="fail" if on_xgmi else "warn",
        subjects=[a, b],
        title=f"{a} and {b} cannot access each other's memory (P2P not accessible)",
        explanation=(
            f"{origin} reports peer-to-peer access between {a} and {b} as not available"
            + (f" although the pair is linked by {describe_link(link)}" if link is not None else "")
            + ". RCCL then moves data between them through host memory (SHM) instead of direct GPU copies, "
            "which costs bandwidth and latency on every tensor-parallel all-reduce; vLLM/SGLang custom all-reduce "
            "needs P2P and falls back or fails."
        ),
        evidence=distinct_refs(source, link.source if link else None),
        remedy=P2P_REMEDY,
        confirm_with="amd-smi topology -a",
        data={"origin": origin, "link": link.path if link else None},
        # what an NCCL/RCCL finding names as the cause of SHM between the pair
        aliases=[f"p2p-not-supported@{a},{b}"],
    )


# -- amd-iommu-not-passthrough ----------------------------------------------------------------

IOMMU_REMEDY = (
    "Add `iommu=pt` (with `amd_iommu=on` on AMD CPUs or `intel_iommu=on` on Intel CPUs) to GRUB_CMDLINE_LINUX in "
    "/etc/default/grub, run `sudo update-grub` (or `sudo grub2-mkconfig -o /boot/grub2/grub.cfg`), reboot, and "
    "check `cat /proc/cmdline`. RCCL warns `Missing \"iommu=pt\" from kernel command line` without it; AMD's "
    "acceptance checklists for MI300X/MI355X require it."
)


def check_iommu_not_passthrough(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    rccl_refs = _rccl_warnings(machine, 'Missing "iommu=pt"')
    if not has_amd(machine) and not rccl_refs:  # RCCL's own warning is AMD evidence enough
        return
    host = machine.host
    cmdline = host.kernel_cmdline
    tokens = cmdline.split() if cmdline else []
    iommu_off = any(token in ("iommu=off", "amd_iommu=off", "intel_iommu=off") for token in tokens)
    if host.iommu_mode == "passthrough" or "iommu=pt" in tokens:
        return
    if host.iommu_mode == "off" or iommu_off:
        return
    evidence = list(rccl_refs)
    if cmdline is not None:
        cmd_source = next((ref for ref in host.sources if "cmdline" in ref.input or "iommu" in ref.text), None)
        evidence.insert(0, cmd_source or SourceRef("kernel command line", None, cmdline))
    if host.iommu_mode == "translated" or cmdline is not None or rccl_refs:
        what = (
            "the IOMMU translates DMA for the GPUs" if host.iommu_mode == "translated"
            else "the kernel command line has no `iommu=pt`" if cmdline is not None
            else "RCCL reported that `iommu=pt` is missing"
        )
        yield Finding(
            id="amd-iommu-not-passthrough",
            severity="warn",
            subjects=[],
            title="IOMMU is not in passthrough mode (RCCL wants iommu=pt)",
            explanation=(
                f"On this AMD GPU host {what}. With a translating IOMMU every GPU DMA, including peer-to-peer "
                "copies, goes through IOMMU page tables: RCCL documents this as a cause of low bandwidth, hangs and "
                "instability, and peer traffic may be redirected through the root complex."
            ),
            evidence=evidence,
            remedy=IOMMU_REMEDY,
            confirm_with="cat /proc/cmdline",
            data={"iommu_mode": host.iommu_mode, "kernel_cmdline": cmdline},
        )
        return
    yield Finding(
        id="amd-iommu-not-passthrough",
        severity="info",
        subjects=[],
        title="IOMMU mode unknown: check that the kernel runs with iommu=pt",
        explanation=(
            "No input told the kernel command line or the IOMMU mode. RCCL on AMD GPUs expects `iommu=pt`; "
            "without it peer-to-peer traffic is translated by the IOMMU, which RCCL warns can cause low "
            "performance or hangs."
        ),
        evidence=[],
        remedy=IOMMU_REMEDY,
        confirm_with="cat /proc/cmdline",
        data={"iommu_mode": None, "kernel_cmdline": None},
    )


# -- amd-fine-grain-pcie-missing --------------------------------------------------------------

FINE_GRAIN_REMEDY = (
    "Set `export HSA_FORCE_FINE_GRAIN_PCIE=1` in the environment of every rank (the job script, the container's "
    "environment, or the serving engine's launcher) and restart the job; RCCL logs `Missing "
    "\"HSA_FORCE_FINE_GRAIN_PCIE=1\" from environment` at start-up while it is unset."
)


def check_fine_grain_pcie(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    links = amd_links(machine)
    pcie_only = [key for key, link in by_pair(links.items()) if link.path == "PCIE"]
    if not pcie_only:
        return
    gpus = sorted({name for key in pcie_only for name in key}, key=endpoint_sort_key)
    variable = "HSA_FORCE_FINE_GRAIN_PCIE"
    values = [(run, run.env.get(variable)) for run in machine.nccl if variable in run.env]
    if values and all(value == "1" for _, value in values):
        return
    warnings = _rccl_warnings(machine, "HSA_FORCE_FINE_GRAIN_PCIE")
    down = {finding.key for finding in earlier if finding.id == "amd-xgmi-link-down"}
    causes = [f"amd-xgmi-link-down@{a},{b}" for a, b in pcie_only if f"amd-xgmi-link-down@{a},{b}" in down]
    example = links[pcie_only[0]]
    pairs_text = ", ".join(f"{a}-{b}" for a, b in pcie_only[:6]) + (" and more" if len(pcie_only) > 6 else "")
    if warnings or values:
        shown = ", ".join(f"{run.input or 'log'}: {value!r}" for run, value in values if value != "1")
        yield Finding(
            id="amd-fine-grain-pcie-missing",
            severity="warn",
            subjects=gpus,
            title="HSA_FORCE_FINE_GRAIN_PCIE=1 is not set for a job whose GPUs talk over PCIe",
            explanation=(
                f"GPU pairs {pairs_text} are connected over PCIe only. RCCL uses fine-grained host and peer memory "
                "for PCIe P2P only when HSA_FORCE_FINE_GRAIN_PCIE=1; without it RCCL warns of low performance, "
                "instability or hangs" + (f" (environment seen: {shown})" if shown else "") + "."
            ),
            evidence=distinct_refs(*warnings, example.source),
            remedy=FINE_GRAIN_REMEDY,
            causes=causes,
            confirm_with="echo $HSA_FORCE_FINE_GRAIN_PCIE",
            data={"pcie_pairs": [list(key) for key in pcie_only]},
        )
        return
    yield Finding(
        id="amd-fine-grain-pcie-missing",
        severity="info",
        subjects=gpus,
        title="GPUs talk over PCIe: make sure jobs run with HSA_FORCE_FINE_GRAIN_PCIE=1",
        explanation=(
            f"GPU pairs {pairs_text} have no XGMI link, so RCCL's peer traffic between them goes over PCIe, where it "
            "needs HSA_FORCE_FINE_GRAIN_PCIE=1. No RCCL log was given to tell whether the job sets it."
        ),
        evidence=distinct_refs(example.source),
        remedy=FINE_GRAIN_REMEDY,
        causes=causes,
        confirm_with="echo $HSA_FORCE_FINE_GRAIN_PCIE",
        data={"pcie_pairs": [list(key) for key in pcie_only]},
    )


def _rccl_warnings(machine: Machine, needle: str) -> list[SourceRef]:
    """RCCL's own start-up warnings (`Missing "iommu=pt" ...`), one per run, with their log line."""
    refs = []
    for run in machine.nccl:
        found = None
        for message in getattr(run, "messages", []) or []:
            if needle in getattr(message, "text", ""):
                found = message.source or SourceRef(run.input or "RCCL log", None, message.text)
                break
        if found is None:
            text = next((text for text in run.warnings if needle in text), None)
            if text is not None:
                found = SourceRef(run.input or "RCCL log", None, text)
        if found is not None:
            refs.append(found)
    return refs


# -- amd-cross-numa ---------------------------------------------------------------------------


def check_cross_numa(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    links = amd_links(machine)
    if not links:
        return
    numa = {gpu.label: gpu.numa_node for gpu in machine.gpus.values()}
    crossing = []
    for key, link in by_pair(links.items()):
        if link.path != "PCIE":
            continue
        a, b = key
        nodes_differ = numa.get(a) is not None and numa.get(b) is not None and numa[a] != numa[b]
        # AMD's hop count: 3 means the route crosses both CPU sockets.
        if nodes_differ or (link.hops == 3 and (numa.get(a) is None or numa.get(b) is None)):
            crossing.append((key, link))
    if crossing:
        subjects = sorted({name for key, _ in crossing for name in key}, key=endpoint_sort_key)
        down = {finding.key for finding in earlier if finding.id == "amd-xgmi-link-down"}
        causes = [f"amd-xgmi-link-down@{a},{b}" for (a, b), _ in crossing if f"amd-xgmi-link-down@{a},{b}" in down]
        described = ", ".join(
            f"{a}-{b}" + (f" (NUMA {numa[a]}/{numa[b]})" if None not in (numa.get(a), numa.get(b)) else " (hops 3)")
            for (a, b), _ in crossing[:8]
        )
        yield Finding(
            id="amd-cross-numa",
            severity="info",
            subjects=subjects,
            title=f"{counted(len(crossing), 'GPU pair')} {'talks' if len(crossing) == 1 else 'talk'} over PCIe across CPU sockets / "
                  "NUMA nodes",
            explanation=(
                f"{described}{' and more' if len(crossing) > 8 else ''}: these pairs have no XGMI link and their "
                "PCIe route crosses the inter-socket fabric, the slowest path a GPU pair can have (often unable to do "
                "P2P at all). A tensor-parallel group spanning them is limited by it."
            ),
            evidence=distinct_refs(*(link.source for _, link in crossing[:4])),
            remedy="Keep each tensor-parallel group on GPUs of one NUMA node (or one XGMI hive); use "
                   "`rocm-smi --showtopo` (hops 1 = XGMI, 2 = same socket, 3 = across sockets) to choose them, and "
                   "bind each rank's CPU threads and memory to its GPU's node (`numactl --cpunodebind=N --membind=N`).",
            causes=causes,
            confirm_with="rocm-smi --showtoponuma",
            data={"pairs": [list(key) for key, _ in crossing]},
        )
    for hive in xgmi_components(links):
        nodes = sorted({numa[name] for name in hive if numa.get(name) is not None})
        if len(hive) >= 2 and len(nodes) > 1 and all(links.get(key) is None or links[key].path == "XGMI"
                                                       for key in links if key[0] in hive and key[1] in hive):
            yield Finding(
                id="amd-cross-numa",
                severity="info",
                subjects=hive,
                title=f"The XGMI hive {gpu_span(hive)} spans NUMA nodes {', '.join(map(str, nodes))}: "
                      "bind ranks to their GPU's node",
                explanation=(
                    "GPU-GPU traffic stays on XGMI, but each GPU's host traffic (input batches, KV-cache offload, "
                    "tokenizer and scheduler threads) goes to its own CPU socket. A rank running on the other "
                    "socket pays the inter-socket hop on every host copy."
                ),
                evidence=distinct_refs(*(gpu.sources[0] for gpu in machine.sorted_gpus() if gpu.label in hive and gpu.sources)),
                remedy="Bind each rank to its GPU's NUMA node (`numactl --cpunodebind=N --membind=N`, or the "
                       "serving engine's NUMA binding option); `rocm-smi --showtoponuma` lists each GPU's node.",
                confirm_with="rocm-smi --showtoponuma",
                data={"numa_nodes": nodes},
                kind="info",  # a binding hint; the crossing pairs above are the design property
            )


# -- amd-bandwidth-below-link-class -----------------------------------------------------------


def _rbt_benchmarks(machine: Machine) -> list:
    return [bench for bench in machine.benchmarks if getattr(bench, "tool", None) == "rocm-bandwidth-test"
            and hasattr(bench, "matrices") and hasattr(bench, "devices")]


def _gpu_names(machine: Machine, bench) -> dict[int, str]:
    """rocm-bandwidth-test device id -> "GPUn" for its GPU devices."""
    names: dict[int, str] = {}
    for device in bench.devices:
        if device.type != "gpu":
            continue
        known = machine.gpu_by_bus_id(device.bus_id) if device.bus_id else None
        if known is not None:
            names[device.id] = known.label
        elif device.gpu_index is not None and (not machine.gpus or device.gpu_index in machine.gpus):
            names[device.id] = f"GPU{device.gpu_index}"
    return names


def check_bandwidth_below_class(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    links = amd_links(machine)
    for bench in _rbt_benchmarks(machine):
        matrix = bench.matrices.get("unidirectional") or bench.matrices.get("bidirectional")
        if matrix is None:
            continue
        names = _gpu_names(machine, bench)
        samples: list[tuple[str, tuple[str, str], float, int]] = []
        for row_id, src in names.items():
            for col_id, dst in names.items():
                if row_id == col_id:
                    continue
                value = matrix.value(row_id, col_id)
                if not isinstance(value, (int, float)) or value <= 0:
                    continue
                link = links.get(pair_key(src, dst))
                samples.append((link.path if link else "unknown", (src, dst), float(value), row_id))
        by_class: dict[str, list[float]] = {}
        for klass, _, value, _ in samples:
            by_class.setdefault(klass, []).append(value)
        import statistics  # here, not at the top: ~4 ms of every start-up, for AMD tables alone

        medians = {klass: statistics.median(values) for klass, values in by_class.items() if len(values) >= 3}
        pcie_median = medians.get("PCIE")
        flagged: set[tuple[str, str]] = set()
        for klass, (src, dst), value, row_id in samples:
            median = medians.get(klass)
            reason = None
            if median and value < BELOW_CLASS_FRACTION * median:
                reason = f"{value:g} GB/s against a median of {median:g} GB/s for {klass} pairs in the same run"
            elif klass == "XGMI" and pcie_median and value <= pcie_median:
                reason = f"{value:g} GB/s, no better than the PCIe pairs' median of {pcie_median:g} GB/s"
            if reason is None:
                continue
            key = pair_key(src, dst)
            if key in flagged:
                continue
            flagged.add(key)
            link = links.get(key)
            yield Finding(
                id="amd-bandwidth-below-link-class",
                severity="warn",
                subjects=list(key),
                title=f"{src}->{dst} copy bandwidth is far below its link class ({klass})",
                explanation=(
                    f"rocm-bandwidth-test {matrix.name} copy {src}->{dst}: {reason}. A pair that should run at its "
                    "link's speed but does not points to a degraded or retrained link, P2P falling back to host "
                    "staging, or a GPU in a low power state during the test."
                ),
                evidence=distinct_refs(matrix.source(row_id), link.source if link else None),
                remedy="Re-run `rocm-bandwidth-test -s <src> -d <dst>` for this pair on an idle host; compare the "
                       "pair's link in `rocm-smi --showtopo` and `amd-smi xgmi --link-status`, and its PCIe link "
                       "state (`sudo lspci -vv -s <bdf> | grep LnkSta`).",
                confirm_with="rocm-bandwidth-test -a",
                data={"value_gb_s": value, "class": klass, "class_median_gb_s": median, "matrix": matrix.name},
            )


RULES = (
    Rule("amd-xgmi-link-down", "fail", "An XGMI link inside a hive is down (pair reports PCIE)", check_xgmi_link_down,
         kind="fault"),
    Rule("amd-xgmi-hive-incomplete", "warn", "An XGMI hive is not fully connected", check_xgmi_hive_incomplete,
         kind="fault"),
    Rule("amd-p2p-not-accessible", "warn", "AMD GPUs that cannot access each other's memory", check_p2p_not_accessible,
         kind="fault"),
    Rule("amd-iommu-not-passthrough", "warn", "IOMMU not in passthrough mode on an AMD GPU host",
         check_iommu_not_passthrough, kind="misconfiguration"),
    Rule("amd-fine-grain-pcie-missing", "warn", "HSA_FORCE_FINE_GRAIN_PCIE=1 missing for PCIe peer traffic",
         check_fine_grain_pcie, kind="misconfiguration"),
    Rule("amd-cross-numa", "info", "AMD GPU pairs across CPU sockets / NUMA nodes", check_cross_numa, kind="design"),
    Rule("amd-bandwidth-below-link-class", "warn", "Measured copy bandwidth far below the link class",
         check_bandwidth_below_class, kind="fault"),
)
