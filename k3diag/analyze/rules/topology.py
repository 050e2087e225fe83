"""GPU topology findings: slow GPU-GPU paths, P2P refused, PCIe links below what they can do.

Each rule reads only the model, cites the cells and lines that show the fact, and says what
to do. Pairs are judged by their best path from any source (an NVLink seen by NVML beats a
PCIe code from a stale paste), so a pair is flagged only when nothing better joins it.
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef
from k3diag.model.topology import Gpu, Link, P2PStatus, endpoint_sort_key, gpu_index, nvlink_count
from k3diag.model.words import counted

CROSS_SOCKET_PATHS = ("SYS", "SOC")
HOST_BRIDGE_PATHS = ("PHB", "NODE")
# NVLink and atomics are "NS" on every PCIe-only box; only these say whether P2P works at all.
P2P_DATA_CAPABILITIES = ("read", "write", "pcie", "unknown")
P2P_REFUSALS = ("CNS", "GNS", "TNS", "NS", "DR")
LOAD_RECHECK = (
    "nvidia-smi --query-gpu=index,pstate,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max --format=csv -l 1"
)


def _gpu_pairs(machine: Machine) -> Iterable[tuple[str, str, Link]]:
    names = sorted({name for link in machine.links for name in (link.a, link.b) if gpu_index(name) is not None},
                   key=lambda name: gpu_index(name) or 0)
    for a, b in combinations(names, 2):
        link = machine.link(a, b)
        if link is not None:
            yield a, b, link


def _numa_groups(machine: Machine) -> str | None:
    groups: dict[int, list[int]] = {}
    for gpu in machine.sorted_gpus():
        if gpu.numa_node is not None:
            groups.setdefault(gpu.numa_node, []).append(gpu.index)
    if len(groups) < 2:
        return None
    return "; ".join(f"NUMA node {node}: GPU {', '.join(map(str, indices))}" for node, indices in sorted(groups.items()))


def _evidence_for_pair(machine: Machine, a: str, b: str, paths: tuple[str, ...]) -> list[SourceRef]:
    refs = [link.source for link in machine.links_between(a, b) if link.source is not None and link.path in paths]
    return list(dict.fromkeys(refs))[:4]


def _pairs_on(machine: Machine, paths: tuple[str, ...]) -> list[tuple[str, str, Link]]:
    # `topo -mp` prints PCIe paths only: a SYS there may hide an NVLink, so it says nothing about the design.
    return [(a, b, link) for a, b, link in _gpu_pairs(machine)
            if link.path in paths and link.origin != "nvidia-smi-topo-mp"]


def _evidence_for_pairs(machine: Machine, pairs: list[tuple[str, str, Link]], paths: tuple[str, ...],
                        limit: int = 8) -> list[SourceRef]:
    """The lines that show the pairs: one per matrix row (distinct lines), so each GPU's row is cited."""
    refs: list[SourceRef] = []
    for a, b, _ in pairs:
        for ref in _evidence_for_pair(machine, a, b, paths):
            if ref not in refs:
                refs.append(ref)
        if len(refs) >= limit:
            break
    return refs[:limit]


def _pair_list(pairs: list[tuple[str, str, Link]], limit: int = 6) -> str:
    shown = ", ".join(f"{gpu_index(a)}-{gpu_index(b)}" for a, b, _ in pairs[:limit])
    return shown + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


def _same_numa_node(machine: Machine, a: str, b: str) -> bool:
    first, second = machine.gpus.get(gpu_index(a)), machine.gpus.get(gpu_index(b))  # type: ignore[arg-type]
    return (first is not None and second is not None and first.numa_node is not None
            and first.numa_node == second.numa_node)


def check_gpu_pair_sys(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    """One advisory finding per machine: crossing sockets is how a dual-socket box is built, not a fault.
    The TP advice keeps groups inside a socket; faults on those pairs (P2P refused where it should work,
    NCCL falling back) are their own findings and name this one as their cause."""
    pairs = _pairs_on(machine, CROSS_SOCKET_PATHS)
    if not pairs:
        return
    groups = _numa_groups(machine)
    # SYS between GPUs that report the same NUMA node (seen on real boxes: every pair SYS): staying inside a
    # NUMA node does not avoid the crossing there, so the advice must not say it does.
    same_node = [(x, y, link) for x, y, link in pairs if _same_numa_node(machine, x, y)]
    if groups and same_node:
        split = (f"This host's GPUs split as {groups}, but pairs {_pair_list(same_node)} are SYS although both GPUs "
                 "report the same NUMA node, so keeping a group inside one NUMA node does not avoid the crossing "
                 "here (the NUMA affinity is the driver's, and this output does not say why the path is SYS); "
                 "measure such a pair (`nvidia-smi topo -p2p r`, p2pBandwidthLatencyTest) before putting it in a "
                 "tensor-parallel group.")
    elif groups:
        split = f"This host's GPUs split as {groups}; keep each tensor-parallel group inside one of these."
    else:
        split = "Keep each tensor-parallel group on GPUs of one socket (same NUMA Affinity in `nvidia-smi topo -m`)."
    a, b, _ = pairs[0]
    advice = (", even between GPUs of one NUMA node" if groups and same_node else
              ": TP groups should stay within a socket")
    yield Finding(
        id="gpu-pair-sys",
        severity="info",
        subjects=[],
        title=f"{counted(len(pairs), 'GPU pair')} {'crosses' if len(pairs) == 1 else 'cross'} the CPU interconnect "
              f"(SYS){advice}",
        explanation=(
            f"The GPUs sit on more than one CPU socket: pairs {_pair_list(pairs)} have no path but the SMP link "
            "(QPI/UPI/Infinity Fabric). That is how this machine is built, not a fault. PCIe peer-to-peer across "
            "sockets is slow or refused on most platforms, so NCCL stages such traffic through host memory and a "
            "tensor-parallel group spanning sockets is paced by it. " + split
        ),
        evidence=_evidence_for_pairs(machine, pairs, CROSS_SOCKET_PATHS),
        remedy=(
            ("GPUs of one NUMA node are SYS apart here too: prefer replicas (data parallelism) or pipeline "
             "parallelism unless a measurement shows such a pair is fast. " if groups and same_node else "")
            + "Place tensor-parallel groups within one socket and use pipeline or data parallelism across sockets "
            "(vLLM: --tensor-parallel-size within a socket, --pipeline-parallel-size across); bind each rank to "
            "its GPU's NUMA node."
        ),
        confirm_with=f"nvidia-smi topo -p -i {gpu_index(a)},{gpu_index(b)}",
        data={"pairs": [[x, y] for x, y, _ in pairs], "paths": sorted({link.path for _, _, link in pairs}),
              "numa_groups": groups},
        aliases=[f"gpu-pair-sys@{x},{y}" for x, y, _ in pairs],
    )


def _one_socket_clause(machine: Machine) -> str:
    """On bare metal a PHB/NODE path stays on one socket; inside a VM the path class is the hypervisor's, so
    the socket is not known and the text hedges (see topology-virtualized)."""
    from k3diag.model.virtual import is_virtualized

    if is_virtualized(machine) or _virtual_bus(machine):
        return ("On bare metal such a path stays on one socket; here the topology is virtualized, so which socket "
                "and switch each GPU really sits on is not known (see topology-virtualized), and")
    return "It stays on one socket and is how the board is wired, not a fault, but"


def _virtual_bus(machine: Machine) -> bool:
    try:
        from k3diag.analyze.rules.virtual import machine_signs
    except ModuleNotFoundError:
        return False
    return any(sign.kind == "vm" for sign in machine_signs(machine))


def check_gpu_pair_phb(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    pairs = _pairs_on(machine, HOST_BRIDGE_PATHS)
    if not pairs:
        return
    codes = sorted({link.path for _, _, link in pairs})
    where = " / ".join(
        {"PHB": "through a CPU's PCIe host bridge (PHB)", "NODE": "between host bridges of one CPU (NODE)"}[code]
        for code in codes
    )
    a, b, _ = pairs[0]
    yield Finding(
        id="gpu-pair-phb",
        severity="info",
        subjects=[],
        title=f"{counted(len(pairs), 'GPU pair')} {'shares' if len(pairs) == 1 else 'share'} no PCIe switch and "
              f"{'connects' if len(pairs) == 1 else 'connect'} {where}",
        explanation=(
            f"Pairs {_pair_list(pairs)} have no PCIe switch in common: their traffic climbs to the CPU root complex "
            f"and back. {_one_socket_clause(machine)} NCCL's default P2P "
            "level on Intel CPUs is PXB, so such pairs fall back to host-memory copies unless NCCL_P2P_LEVEL is "
            "raised. Expect roughly half of same-switch bandwidth for collectives; TP=2 prefers pairs behind one "
            "switch (PIX/PXB) when the box has them."
        ),
        evidence=_evidence_for_pairs(machine, pairs, HOST_BRIDGE_PATHS),
        remedy=(
            "For TP=2 prefer pairs behind one PCIe switch (PIX/PXB) when the box has them. If P2P is supported "
            "(`nvidia-smi topo -p2p r` shows OK) and measured P2P bandwidth is good, NCCL_P2P_LEVEL=SYS (or PHB) "
            "lets NCCL use it; if P2P is slow or hangs, check ACS/IOMMU on the root ports first."
        ),
        confirm_with="nvidia-smi topo -p2p r",
        data={"pairs": [[x, y] for x, y, _ in pairs], "paths": codes},
        aliases=[f"gpu-pair-phb@{x},{y}" for x, y, _ in pairs],
    )


_P2P_MEANING = {
    "GNS": (
        "the driver refuses P2P on this GPU model (GeForce and most consumer cards on stock drivers)",
        "P2P cannot be enabled with the stock driver: NCCL will copy through host memory. For vLLM/SGLang pass "
        "--disable-custom-all-reduce (its custom all-reduce needs P2P). Community patched open kernel modules enable "
        "P2P on some GeForce cards, unsupported and at your own risk; a data-center or workstation SKU is the "
        "supported fix.",
    ),
    "CNS": (
        "the chipset or PCIe root complex between them does not allow peer-to-peer (typical across CPU sockets, on "
        "some consumer boards, and when the root ports redirect P2P)",
        "Check the BIOS for ACS / IOMMU settings (disable ACS on the PCIe switches and root ports, or boot with "
        "iommu=pt), and keep P2P peers on one socket or one PCIe switch. `lspci -vv` on the bridges above both GPUs "
        "shows ACSCtl; ReqRedir+/CmpltRedir+ send P2P to the root complex.",
    ),
    "TNS": (
        "the topology between them does not support P2P (for example a path across CPU sockets that the platform "
        "cannot carry peer traffic over)",
        "Keep tensor-parallel peers on GPUs whose path is PIX/PXB/PHB, not SYS; move cards so peers share a socket.",
    ),
    "NS": (
        "P2P is not supported between them, without a more specific reason (common in VMs, with IOMMU translation, "
        "or when a GPU is behind a bridge that blocks P2P)",
        # bare metal first: the one-line summary shows only the first sentence, and most boxes are not VMs
        "Check the IOMMU (iommu=pt or off), ACS on the bridges above both GPUs, and the driver version. In a VM, ask "
        "for GPUs passed through with P2P support (or bare metal).",
    ),
    "DR": (
        "P2P was disabled by a driver registry key",
        "Look for NVreg_RegistryDwords settings in /etc/modprobe.d/*.conf and on the kernel command line, remove the "
        "P2P override, and reload the nvidia module (or reboot).",
    ),
}


def check_p2p_not_supported(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    from k3diag.analyze.rules.amd_views import AMD_ORIGINS

    by_pair: dict[tuple[str, str], list[P2PStatus]] = {}
    for status in machine.p2p:
        if status.capability not in P2P_DATA_CAPABILITIES or status.status not in P2P_REFUSALS:
            continue
        if status.origin in AMD_ORIGINS and status.status == "NS":
            continue  # amd-p2p-not-accessible reports it with AMD's fix; one pair, one problem
        if gpu_index(status.src) is None or gpu_index(status.dst) is None:
            continue
        key = tuple(sorted((status.src, status.dst), key=lambda name: gpu_index(name) or 0))
        by_pair.setdefault(key, []).append(status)  # type: ignore[arg-type]
    by_design: list[tuple[str, str, list[str], list[SourceRef], list[str]]] = []
    for (a, b), statuses in sorted(by_pair.items(), key=lambda item: (gpu_index(item[0][0]), gpu_index(item[0][1]))):
        if _joined_by_nvlink(machine, a, b) and all(s.status == "NS" and s.capability == "pcie" for s in statuses):
            continue  # NVLink pairs need no PCIe P2P
        codes = sorted({s.status for s in statuses if s.status}, key=P2P_REFUSALS.index)
        crossing = [key for key in (f"gpu-pair-sys@{a},{b}",)
                    if any(key == f.key or key in f.aliases for f in earlier)]
        # A refusal the platform gives by design is not a fault: GeForce drivers refuse P2P (GNS), and most
        # platforms refuse it across CPU sockets (CNS/TNS on a SYS pair). One advisory for the machine.
        if codes == ["GNS"] or (crossing and set(codes) <= {"CNS", "TNS"}):
            refs = list(dict.fromkeys(s.source for s in statuses if s.source is not None))[:2]
            by_design.append((a, b, codes, refs, crossing))
            continue
        capabilities = sorted({s.capability for s in statuses})
        named = [c for c in capabilities if c != "unknown"]
        which = ", ".join(named) + (" and a matrix whose capability was not given" if "unknown" in capabilities else "")
        if not named:
            which = "a P2P matrix whose capability was not given"
        meaning = "; ".join(f"{code}: {_P2P_MEANING[code][0]}" for code in codes)
        remedy = " ".join(_P2P_MEANING[code][1] for code in codes)
        refs = list(dict.fromkeys(s.source for s in statuses if s.source is not None))[:4]
        yield Finding(
            id="p2p-not-supported",
            severity="warn",
            subjects=[a, b],
            title=f"P2P between {a} and {b} is refused ({', '.join(codes)})",
            explanation=(
                f"The driver reports no peer-to-peer access between {a} and {b} ({which}; "
                f"{meaning}). Without P2P, NCCL moves their data through host memory (SHM) and tensor-parallel "
                "all-reduce between them is several times slower; vLLM's custom all-reduce is disabled or fails."
            ),
            evidence=refs,
            remedy=remedy,
            confirm_with="nvidia-smi topo -p2p r; nvidia-smi topo -p2p w",
            data={"codes": codes, "capabilities": capabilities},
            # A chipset/topology refusal on a pair that crosses sockets is explained by the crossing.
            causes=[key for key in (f"gpu-pair-sys@{a},{b}", f"gpu-pair-phb@{a},{b}")
                    if set(codes) & {"CNS", "TNS"} and any(key == f.key or key in f.aliases for f in earlier)],
        )
    if by_design:
        yield _p2p_refused_by_design(by_design)


def _p2p_refused_by_design(pairs: list[tuple[str, str, list[str], list[SourceRef], list[str]]]) -> Finding:
    codes = sorted({code for _, _, cs, _, _ in pairs for code in cs}, key=P2P_REFUSALS.index)
    listed = ", ".join(f"{gpu_index(a)}-{gpu_index(b)}" for a, b, _, _, _ in pairs[:8])
    listed += f" and {len(pairs) - 8} more" if len(pairs) > 8 else ""
    geforce = "GNS" in codes
    why = ("the driver refuses P2P on this GPU model (GeForce and most consumer cards on stock drivers)" if geforce
           else "these pairs cross CPU sockets, where the platform does not carry peer-to-peer traffic")
    # The fault remedies (_P2P_MEANING: change ACS, IOMMU, the BIOS) would contradict "not a fault" here.
    remedy = (_P2P_MEANING["GNS"][1] if geforce else
              "Nothing to fix on the machine: keep each tensor-parallel group within one socket and use pipeline or "
              "data parallelism across sockets. A few platforms do carry P2P across sockets; only if this one "
              "should, check ACS on the root ports (`lspci -vv`: ReqRedir+/CmpltRedir+) and the IOMMU mode.")
    return Finding(
        id="p2p-not-supported",
        severity="info",
        subjects=[],
        title=f"P2P is refused by design on {counted(len(pairs), 'GPU pair')} ({', '.join(codes)}): "
              + ("GeForce cards" if geforce else "pairs across CPU sockets"),
        explanation=(
            f"Pairs {listed}: {why}. That is how this machine is built, not a fault: NCCL copies their data "
            "through host memory (SHM), so tensor-parallel groups should not span them"
            + ("; vLLM/SGLang need --disable-custom-all-reduce." if geforce else "; keep TP groups within a socket.")
        ),
        evidence=[ref for _, _, _, refs, _ in pairs for ref in refs][:4],
        remedy=remedy,
        confirm_with="nvidia-smi topo -p2p r; nvidia-smi topo -p2p w",
        causes=sorted({cause for _, _, _, _, causes in pairs for cause in causes}),
        data={"codes": codes, "pairs": [[a, b] for a, b, _, _, _ in pairs]},
        kind="design",
        aliases=[f"p2p-not-supported@{a},{b}" for a, b, _, _, _ in pairs],
    )


def _joined_by_nvlink(machine: Machine, a: str, b: str) -> bool:
    return any((nvlink_count(link.path) or 0) > 0 for link in machine.links_between(a, b))


def check_pcie_width(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for gpu in machine.sorted_gpus():
        state = gpu.pcie
        if state.width_current is None or state.width_max is None or state.width_current >= state.width_max:
            continue
        yield Finding(
            id="pcie-width-below-max",
            severity="fail",
            subjects=[gpu.label],
            title=f"{gpu.label} link runs at x{state.width_current} of x{state.width_max}",
            explanation=(
                f"{gpu.label}{_name(gpu)} negotiated x{state.width_current} lanes where x{state.width_max} are "
                "possible. GPUs lower link speed when idle but not width, so this is a physical or configuration "
                f"limit: host-device copies, model loading and any PCIe P2P traffic to this GPU get "
                f"{state.width_current}/{state.width_max} of the bandwidth, and a tensor-parallel group is as fast as "
                "its slowest member."
            ),
            evidence=[state.source] if state.source is not None else [],
            remedy=(
                "Reseat the card (and its riser), check the slot is wired x16 and not shared with an M.2/U.2 slot, "
                "and check BIOS PCIe bifurcation for the slot (x16, not x8x8). `lspci -vv` shows LnkCap/LnkSta on the "
                "GPU and on each bridge above it; the first hop whose LnkSta width is below its LnkCap is the limit. "
                "Cards with an x8 edge connector (e.g. some RTX 40/50-series) report the slot's x16 as max: then "
                "x8 is expected."
            ),
            confirm_with=(
                f"sudo lspci -vv -s {gpu.bus_id} | grep -E 'LnkCap|LnkSta'" if gpu.bus_id else "sudo lspci -vv | grep -E 'LnkCap|LnkSta'"
            ),
            data={"width_current": state.width_current, "width_max": state.width_max, "bus_id": gpu.bus_id},
        )


def check_pcie_gen(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for gpu in machine.sorted_gpus():
        state = gpu.pcie
        if state.gen_current is None or state.gen_max is None or state.gen_current >= state.gen_max:
            continue
        busy = gpu.performance_state == "P0"
        if busy:
            why = (
                f"{gpu.label} is in P0 (busy) and its link still runs at Gen{state.gen_current} of "
                f"Gen{state.gen_max}: the link trained down, which cuts host-device and PCIe P2P bandwidth "
                f"to about {2 ** (state.gen_current - state.gen_max):.0%} of what Gen{state.gen_max} gives."
            )
        else:
            seen = f"in {gpu.performance_state}" if gpu.performance_state else "in an unknown performance state"
            why = (
                f"{gpu.label} was {seen} when read. GPUs drop the link to Gen1 (2.5 GT/s) when idle to save power "
                f"and return to Gen{state.gen_max} under load, so Gen{state.gen_current} here is expected and not "
                "a fault by itself; only a reading taken under load can tell."
            )
        yield Finding(
            id="pcie-gen-below-max",
            severity="warn" if busy else "info",
            subjects=[gpu.label],
            title=f"{gpu.label} link at Gen{state.gen_current} of Gen{state.gen_max}"
            + ("" if busy else " (idle reading)"),
            explanation=why,
            evidence=[state.source] if state.source is not None else [],
            remedy=(
                "Re-check while the GPU is busy (run a job or `nvbandwidth`, and in another shell the command "
                "below). If it stays below max in P0: reseat the card, check risers/retimers and the BIOS PCIe "
                "generation setting for the slot (Auto, not Gen3), and update the BIOS."
                if busy
                else "Nothing to do if it reaches Gen{0} under load; check with the command below while a job runs.".format(
                    state.gen_max
                )
            ),
            confirm_with=LOAD_RECHECK,
            data={
                "gen_current": state.gen_current,
                "gen_max": state.gen_max,
                "performance_state": gpu.performance_state,
            },
        )


def _name(gpu: Gpu) -> str:
    parts = [part for part in (gpu.name, gpu.bus_id) if part]
    return f" ({', '.join(parts)})" if parts else ""


RULES = (
    Rule("gpu-pair-sys", "info", "GPU pair crosses the CPU interconnect", check_gpu_pair_sys, kind="design"),
    Rule("gpu-pair-phb", "info", "GPU pair goes through the host bridge", check_gpu_pair_phb, kind="design"),
    Rule("p2p-not-supported", "warn", "P2P refused between GPUs", check_p2p_not_supported, kind="fault"),
    Rule("pcie-width-below-max", "fail", "GPU PCIe link narrower than it can be", check_pcie_width, kind="fault"),
    Rule("pcie-gen-below-max", "warn", "GPU PCIe link slower than it can be", check_pcie_gen, kind="fault"),
)


def check_nvlink_uneven(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    """One GPU with fewer NVLinks than its peers: a link is down (NVSwitch boxes show NV17 for NV18)."""
    counts: dict[tuple[str, str], tuple[int, Link]] = {}
    for a, b, link in _gpu_pairs(machine):
        links = link.nvlinks
        if links is not None:
            counts[(a, b)] = (links, link)
    if len(counts) < 2:
        return
    typical = max(set(n for n, _ in counts.values()), key=lambda n: sum(1 for m, _ in counts.values() if m == n))
    low = {pair: (n, link) for pair, (n, link) in counts.items() if n < typical}
    # On boxes where NVLink only bridges pairs (NV4 between two cards, nothing else) counts
    # legitimately differ; only a minority of short pairs in an otherwise uniform box is a fault.
    if not low or len(low) * 2 > len(counts):
        return
    by_gpu: dict[str, int] = {}
    for a, b in low:
        by_gpu[a] = by_gpu.get(a, 0) + 1
        by_gpu[b] = by_gpu.get(b, 0) + 1
    suspects = sorted((g for g, n in by_gpu.items() if n == max(by_gpu.values())), key=endpoint_sort_key)
    if len(suspects) == 1 and all(suspects[0] in pair for pair in low):
        gpu = suspects[0]
        peers = sorted((b if a == gpu else a for a, b in low), key=endpoint_sort_key)
        counts_seen = sorted({n for n, _ in low.values()})
        yield Finding(
            id="nvlink-count-low",
            severity="warn",
            subjects=[gpu],
            title=f"{gpu} has fewer NVLinks than its peers (NV{'/NV'.join(map(str, counts_seen))} instead of NV{typical})",
            explanation=(
                f"Every low pair involves {gpu} ({', '.join(peers)}), while the other pairs have NV{typical}: "
                f"at least one of {gpu}'s NVLinks is down or degraded. All-reduce bandwidth through {gpu} drops by "
                "the missing links' share, and any tensor-parallel group containing it runs at that pace."
            ),
            evidence=[link.source for _, link in list(low.values())[:3] if link.source is not None],
            confirm_with=f"nvidia-smi nvlink --status -i {gpu_index_of(gpu)}; nvidia-smi nvlink -e -i {gpu_index_of(gpu)}",
            remedy=("Look for inactive links in `nvidia-smi nvlink --status` and rising error counters in "
                    "`nvidia-smi nvlink -e`; reset the GPU (`nvidia-smi -r`) or restart the fabric manager, and open a "
                    "hardware ticket if the link stays down. Until then keep that GPU out of the largest TP group."),
            data={"nvlinks": counts_seen, "typical": typical, "peers": peers},
        )
        return
    for pair, (n, link) in sorted(low.items(), key=lambda item: (endpoint_sort_key(item[0][0]), endpoint_sort_key(item[0][1]))):
        yield Finding(
            id="nvlink-count-low",
            severity="warn",
            subjects=list(pair),
            title=f"{pair[0]} and {pair[1]} have NV{n} where the other pairs have NV{typical}",
            explanation=(
                f"{pair[0]}-{pair[1]} is joined by {n} NVLinks while most GPU pairs on this host have {typical}: "
                f"at least one NVLink is down or degraded (the GPU most often involved: {', '.join(suspects)}). "
                "All-reduce bandwidth through that GPU drops by the missing links' share, and a tensor-parallel "
                "group containing it runs at that pace."
            ),
            evidence=[link.source] if link.source is not None else [],
            confirm_with=f"nvidia-smi nvlink --status -i {gpu_index_of(suspects[0])}; nvidia-smi nvlink -e -i {gpu_index_of(suspects[0])}",
            remedy=("Check `nvidia-smi nvlink --status` for inactive links and `nvidia-smi nvlink -e` for error counters; "
                    "reset the GPU (`nvidia-smi -r`) or the fabric manager, and open a hardware ticket if the link stays down. "
                    "Until then keep that GPU out of the largest TP group."),
            data={"nvlinks": n, "typical": typical, "suspects": suspects},
        )


def gpu_index_of(name: str) -> str:
    return name[3:] if name.startswith("GPU") else name


RULES = RULES + (
    Rule("nvlink-count-low", "warn", "Fewer NVLinks on one GPU pair than on the others", check_nvlink_uneven,
         kind="fault"),
)
