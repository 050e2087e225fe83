"""PCIe findings: the hop that limits each GPU's and NIC's link, ACS redirect between devices
that talk peer-to-peer, ACS state that could not be read (`rules/pcie_acs.py`), GPU-NIC
distance, and the PCIe tree disagreeing with `nvidia-smi topo -m`.

All of them read the PCIe tree (`k3diag.model.pcie_tree`) built from whatever sources gave
PCI devices (lspci -vv/-tv, sysfs). GPU-level width/generation findings from nvidia-smi live
in `rules/topology.py`; the findings here name the hop behind them and are linked to them as
their cause.
"""

from __future__ import annotations

from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.analyze.rules.pcie_acs import check_acs_between_gpus, check_acs_enabled, check_acs_gpu_nic, check_acs_unknown
from k3diag.analyze.rules.pcie_common import (
    covered_bdfs,
    device_name,
    evidence_refs,
    gpu_busy,
    judged_endpoints,
    link_cause,
    role_words,
)
from k3diag.model.machine import Machine
from k3diag.model.pci import PciDevice, format_speed, gen_from_speed, link_gbs
from k3diag.model.pcie_tree import Hop, PcieTree, build_tree, gpu_endpoints, nic_endpoints
from k3diag.model.topology import PCIE_PATH_ORDER, nvlink_count
from k3diag.model.words import counted

LOAD_RECHECK = ("nvidia-smi --query-gpu=index,pstate,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current "
                "--format=csv -l 1   # while a job runs; or: sudo lspci -vv -s <bdf> | grep LnkSta")
# Classes whose narrow or slow link matters for serving: display/3D, network, accelerators.
_IMPORTANT_CLASSES = (0x03, 0x02, 0x12, 0x0B)


# -- link width ----------------------------------------------------------------------------


def check_link_width(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    tree = build_tree(machine)
    endpoints = judged_endpoints(machine, tree)
    for label, bdf, kind in endpoints:
        finding = _width_finding(tree, label, bdf, kind)
        if finding is not None:
            if kind == "gpu":
                link_cause(earlier, "pcie-width-below-max", label, finding.key)
                if finding.data.get("kind") == "wired":
                    # The slot's lanes are the limit (the port above is wired narrower): reseating, the GPU
                    # finding's general fix, would not help; moving the card would.
                    for gpu_finding in earlier:
                        if gpu_finding.id == "pcie-width-below-max" and label in gpu_finding.subjects:
                            gpu_finding.remedy = finding.remedy
            yield finding
    other = _other_narrow_links(machine, tree, covered_bdfs(tree, endpoints))
    if other is not None:
        yield other


def _width_finding(tree: PcieTree, label: str, bdf: str, kind: str) -> Finding | None:
    device = tree.devices[bdf]
    own = device.link
    if own is None or not own.cap_width:
        return None
    capable = own.cap_width
    hops = tree.hops(bdf)
    limiting: Hop | None = None
    limiting_width = capable
    for hop in hops:
        width = hop.sta_width if hop.sta_width else hop.cap_width
        if width and width < limiting_width:
            limiting, limiting_width = hop, width
    if limiting is None:
        return None
    both_ends = limiting.upper_cap_width is not None and limiting.lower_cap_width is not None
    wired = limiting.cap_width is not None and limiting.cap_width <= limiting_width
    narrow_end: PciDevice | None = None
    if wired:
        if limiting.upper is not None and limiting.upper_cap_width == limiting.cap_width:
            narrow_end = limiting.upper
        elif limiting.lower_cap_width == limiting.cap_width:
            narrow_end = limiting.lower
    speed = min(s for s in (own.cap_speed_gts, limiting.cap_speed_gts, 999.0) if s is not None)
    speed = None if speed == 999.0 else speed
    full, got = link_gbs(speed, capable), link_gbs(speed, limiting_width)
    lost = link_gbs(speed, capable - limiting_width)
    gen = gen_from_speed(speed)
    if narrow_end is not None and narrow_end.bdf != bdf:
        reason = (f"the {role_words(tree, narrow_end.bdf)} {narrow_end.bdf} "
                  f"{'above it' if narrow_end is limiting.upper else 'on its path'} is wired x{limiting.cap_width} "
                  f"(LnkCap x{limiting.cap_width})")
    elif wired:
        reason = f"the link {limiting.name} is capable of x{limiting.cap_width} only"
    elif not both_ends:
        reason = (f"its link trained at x{limiting_width} and the port above it is not in the evidence "
                  "(a slot wired narrower, a riser, lane bifurcation, or a seating problem)")
    else:
        reason = (f"the link {limiting.name} trained at x{limiting_width} although both ends are capable of "
                  f"x{limiting.cap_width}")
    title = f"{label} runs at x{limiting_width}: {reason}; {label} itself is capable of x{capable}"
    what = "GPU" if kind == "gpu" else "NIC"
    bandwidth = (f" At Gen{gen} that is {got:g} GB/s per direction instead of {full:g} GB/s: {lost:g} GB/s lost "
                 "(theoretical)." if lost is not None and gen is not None else "")
    if kind == "gpu":
        impact = ("Host-to-GPU copies, model weight loading and PCIe peer-to-peer/NCCL traffic of this GPU are capped "
                  "there, and a tensor-parallel group runs at the pace of its slowest member.")
    else:
        impact = "GPUDirect RDMA and all network traffic through this NIC are capped there."
    if not wired and not both_ends:
        remedy = (f"Look at the port above {bdf} (`sudo lspci -tv`, then its LnkCap): if it is wired x{limiting_width}, "
                  f"move the {what} to a full-width slot; if it is x{capable}, reseat the card and riser and check "
                  "the BIOS bifurcation setting.")
        severity = "warn"
    elif wired:
        remedy = (f"Move the {what} to a slot whose lanes are all wired (x{capable}): check the board manual's slot "
                  f"table, the riser or backplane type and the BIOS bifurcation setting of "
                  f"{narrow_end.bdf if narrow_end is not None else limiting.name}. If the x{limiting.cap_width} slot "
                  f"is by design, keep bandwidth-hungry work off this {what}.")
        severity = "warn"
    else:
        remedy = ("Reseat the card and its riser or cable, check the BIOS lane bifurcation and PCIe settings for the "
                  "slot, update the BIOS; a link that trains below both ends' capability is a signal-integrity "
                  "or seating problem.")
        severity = "fail"
    target = narrow_end.bdf if narrow_end is not None else bdf
    return Finding(
        id="pcie-link-width-limited-by-hop",
        severity=severity,
        subjects=[label],
        title=title,
        explanation=f"{label} ({bdf}) path, root port down: {_describe_path(tree, bdf)}. {impact}{bandwidth}",
        evidence=evidence_refs(limiting.sources, own.cap_source and [own.cap_source] or [], [own.source]),
        remedy=remedy,
        confirm_with=f"sudo lspci -vv -s {target} | grep -E 'LnkCap:|LnkSta:'",
        data={
            "bdf": bdf,
            "limiting_hop": limiting.name,
            "limiting_device": narrow_end.bdf if narrow_end is not None else None,
            "width": limiting_width,
            "capable_width": capable,
            "kind": "wired" if wired else ("trained-down" if both_ends else "port-unknown"),
            "speed_gts": speed,
            "lost_gbs": lost,
        },
    )


def _describe_path(tree: PcieTree, bdf: str) -> str:
    parts = []
    for name in tree.path(bdf):
        device = tree.devices.get(name)
        link = device.link if device is not None else None
        role = tree.role(name) or "device"
        if link is not None and (link.cap_width or link.sta_width):
            parts.append(f"{name} ({role}, LnkCap x{link.cap_width or '?'} {format_speed(link.cap_speed_gts)}, "
                         f"LnkSta x{link.sta_width or '?'} {format_speed(link.sta_speed_gts)})")
        else:
            parts.append(f"{name} ({role})")
    return " -> ".join(parts)


def _other_narrow_links(machine: Machine, tree: PcieTree, covered: set[str]) -> Finding | None:
    """Every other link running narrower than its device can (lspci excerpts without GPUs known)."""
    hits: list[PciDevice] = []
    for device in machine.pci:
        if device.bdf in covered or device.link is None:
            continue
        link = device.link
        if not link.width_downgraded or not link.sta_width:
            continue
        if device.bdf is not None and device.is_bridge and tree.has_children(device.bdf):
            continue  # the device below the bridge tells the story of this link
        hits.append(device)
    if not hits:
        return None
    important = any(d.bdf is None or d.base_class is None or d.base_class in _IMPORTANT_CLASSES for d in hits)
    names = [device_name(d) for d in hits]
    return Finding(
        id="pcie-link-width-limited-by-hop",
        severity="warn" if important else "info",
        subjects=["pci"],
        title=f"{counted(len(hits), 'PCIe link')} {'runs' if len(hits) == 1 else 'run'} narrower than "
              f"{'its device' if len(hits) == 1 else 'their device'} can: " + ", ".join(names[:6])
        + (" ..." if len(names) > 6 else ""),
        explanation=" ".join(
            f"{device_name(d)}: x{d.link.sta_width} of x{d.link.cap_width if d.link.cap_width else '?'}"  # type: ignore[union-attr]
            f"{' (' + d.description + ')' if d.description else ''}." for d in hits[:12])
        + " A device trained narrower than its LnkCap sits in a slot wired narrower, behind a narrower port, or has "
        "a seating/riser problem; widths do not change with load.",
        evidence=evidence_refs(*[[d.link.source, d.link.cap_source] for d in hits[:12]]),  # type: ignore[union-attr]
        remedy="Find the port above each device (`sudo lspci -tv`) and compare its LnkCap width; reseat or move cards "
               "whose slot is wired full width.",
        confirm_with="sudo lspci -vv | grep -E '^[0-9a-f]|LnkCap:|LnkSta:'",
        data={"devices": [d.bdf for d in hits]},
    )


# -- link speed ----------------------------------------------------------------------------


def check_link_speed(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    tree = build_tree(machine)
    endpoints = judged_endpoints(machine, tree)
    gen_findings = {label for f in earlier if f.id == "pcie-gen-below-max" for label in f.subjects}
    for label, bdf, kind in endpoints:
        device = tree.devices[bdf]
        own = device.link
        for hop in tree.hops(bdf):
            finding = _speed_finding(machine, tree, label, bdf, kind, own, hop, gen_findings)
            if finding is not None:
                if kind == "gpu":
                    link_cause(earlier, "pcie-gen-below-max", label, finding.key)
                yield finding
                break  # the topmost slow hop explains the ones below it
    other = _other_slow_links(machine, tree, covered_bdfs(tree, endpoints))
    if other is not None:
        yield other


def _speed_finding(machine, tree, label, bdf, kind, own, hop: Hop, gen_findings: set[str]) -> Finding | None:
    own_cap = own.cap_speed_gts if own is not None else None
    if hop.sta_speed_gts is None or hop.cap_speed_gts is None:
        return None
    own_link = hop.lower.bdf == bdf
    if hop.sta_speed_gts < hop.cap_speed_gts:
        if own_link and kind == "gpu":
            if label in gen_findings:
                return None  # nvidia-smi's reading already says it, with the idle caveat
            busy = gpu_busy(machine, label)
            severity = "fail" if busy else "info"
            state = "while busy (P0)" if busy else ("while idle or in an unknown state" if busy is None else "while idle")
            explanation = (f"{label}'s link ({hop.name}) runs at {format_speed(hop.sta_speed_gts)} of "
                           f"{format_speed(hop.cap_speed_gts)} {state}. ")
            explanation += ("A busy GPU should run its link at full speed: the link trained down."
                            if busy else "GPUs drop their link to 2.5 GT/s when idle to save power and return to full "
                            "speed under load, so this reading alone is not a fault; re-check under load.")
            remedy = ("Re-check under load; if it stays low, reseat the card and riser and set the slot's PCIe "
                      "generation to Auto/Gen{} in the BIOS.".format(gen_from_speed(hop.cap_speed_gts) or "max"))
        else:
            severity = "fail" if not own_link or kind == "nic" else "warn"
            where = (f"the link between the {role_words(tree, hop.upper.bdf)} {hop.upper.bdf} and "
                     f"{hop.lower.bdf}" if hop.upper is not None else f"the link of {hop.lower.bdf}")
            explanation = (f"{where} on {label}'s path runs at {format_speed(hop.sta_speed_gts)} although both ends "
                           f"can do {format_speed(hop.cap_speed_gts)}. Bridges and NICs do not slow their links to "
                           "save power the way idle GPUs do, so this link trained down"
                           + (": every device below it shares the slower link." if not own_link else "."))
            remedy = ("Reseat the switch card, cable or riser; check retimers and the BIOS PCIe generation setting "
                      "for the slot; update BIOS and switch firmware.")
        full, got = link_gbs(hop.cap_speed_gts, hop.sta_width or hop.cap_width), link_gbs(hop.sta_speed_gts,
                                                                                          hop.sta_width or hop.cap_width)
        if full is not None and got is not None:
            explanation += f" Theoretical: {got:g} GB/s per direction instead of {full:g} GB/s."
        return Finding(
            id="pcie-link-speed-below-capability",
            severity=severity,
            subjects=[label],
            title=f"{label}: link {hop.name} at {format_speed(hop.sta_speed_gts)} of {format_speed(hop.cap_speed_gts)}"
            + (" (idle reading)" if severity == "info" else ""),
            explanation=explanation,
            evidence=evidence_refs(hop.sources),
            remedy=remedy,
            confirm_with=LOAD_RECHECK.replace("<bdf>", bdf) if kind == "gpu" else
            f"sudo lspci -vv -s {hop.lower.bdf} | grep -E 'LnkCap:|LnkSta:'",
            data={"bdf": bdf, "hop": hop.name, "sta_speed_gts": hop.sta_speed_gts, "cap_speed_gts": hop.cap_speed_gts,
                  "own_link": own_link, "busy": gpu_busy(machine, label) if kind == "gpu" else None},
        )
    if own_cap is not None and hop.cap_speed_gts < own_cap and not own_link:
        # A Gen5 card behind a Gen4 port: by design, but it caps the card.
        return Finding(
            id="pcie-link-speed-below-capability",
            severity="info",
            subjects=[label],
            title=f"{label} is capable of {format_speed(own_cap)} but the hop {hop.name} only of "
                  f"{format_speed(hop.cap_speed_gts)}",
            explanation=(f"The link {hop.name} on {label}'s path can run at {format_speed(hop.cap_speed_gts)} at "
                         f"most, below {label}'s {format_speed(own_cap)}: the path, not the card, sets the speed."),
            evidence=evidence_refs(hop.sources),
            remedy="Use a slot or switch of the card's generation where the bandwidth matters.",
            confirm_with=f"sudo lspci -vv -s {hop.lower.bdf} | grep -E 'LnkCap:|LnkSta:'",
            data={"bdf": bdf, "hop": hop.name, "cap_speed_gts": hop.cap_speed_gts, "device_cap_speed_gts": own_cap},
        )
    return None


def _other_slow_links(machine: Machine, tree: PcieTree, covered: set[str]) -> Finding | None:
    hits = []
    for device in machine.pci:
        if device.bdf in covered or device.link is None or not device.link.speed_downgraded:
            continue
        if device.link.sta_width == 0:
            continue  # an empty slot or a link that is down: not a speed question
        if device.bdf is not None and device.is_bridge and tree.has_children(device.bdf):
            continue
        hits.append(device)
    if not hits:
        return None
    return Finding(
        id="pcie-link-speed-below-capability",
        severity="info",
        subjects=["pci"],
        title=f"{counted(len(hits), 'PCIe link')} {'runs' if len(hits) == 1 else 'run'} below "
              f"{'its' if len(hits) == 1 else 'their'} device's top speed: " + ", ".join(device_name(d) for d in hits[:6])
        + (" ..." if len(hits) > 6 else ""),
        explanation=" ".join(
            f"{device_name(d)}: {format_speed(d.link.sta_speed_gts)} of {format_speed(d.link.cap_speed_gts)}."  # type: ignore[union-attr]
            for d in hits[:12])
        + " Idle GPUs drop to 2.5 GT/s to save power, and a port's link runs at the speed of the slower device "
        "below it, so a slower reading is not a fault by itself: re-check GPUs under load.",
        evidence=evidence_refs(*[[d.link.source] for d in hits[:12]]),  # type: ignore[union-attr]
        remedy="Re-read the links while the GPUs are busy; only a link that stays slow under load needs attention.",
        confirm_with=LOAD_RECHECK,
        data={"devices": [d.bdf for d in hits]},
    )


# -- paths -------------------------------------------------------------------------------------


def check_topology_mismatch(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    tree = build_tree(machine)
    gpus = dict(gpu_endpoints(machine, tree))
    equivalent = {"PSB": "PIX", "SOC": "SYS"}
    for link in machine.links:
        if link.origin != "nvidia-smi-topo-matrix" or link.path is None or nvlink_count(link.path):
            continue
        a_bdf, b_bdf = gpus.get(link.a), gpus.get(link.b)
        if a_bdf is None or b_bdf is None:
            continue
        reported = equivalent.get(link.path, link.path)
        if reported not in ("PIX", "PXB", "PHB", "NODE", "SYS"):
            continue
        derived = tree.pair_path(a_bdf, b_bdf, link.a, link.b)
        if derived.path is None or derived.path == reported:
            continue
        host_side = {"PIX", "PXB"}
        # Either side of a switch, or of a socket: both change which TP groups are sound (a PHB pair the tree
        # puts on two sockets would be grouped as if it shared one).
        crosses = (reported in host_side) != (derived.path in host_side) or (reported == "SYS") != (derived.path == "SYS")
        bridge_refs = [tree.devices[b].source for b in derived.bridges[:4] if b in tree.devices]
        yield Finding(
            id="topology-path-mismatch",
            severity="warn" if crosses else "info",
            subjects=[link.a, link.b],
            title=f"{link.a}-{link.b}: nvidia-smi topo -m says {link.path}, the PCIe tree says {derived.path}",
            explanation=(f"The PCIe tree ({derived.reason}) and `nvidia-smi topo -m` ({link.path}) disagree. In a VM "
                         "the guest sees a PCIe tree the hypervisor made up (often flat), while the driver may report "
                         "another path; readings taken on different hosts or at different times disagree too. NCCL "
                         "chooses P2P from the driver's view, so a mismatch can explain P2P that is refused or slower "
                         "than the path class suggests."),
            evidence=evidence_refs([link.source], bridge_refs),
            remedy="Compare with `sudo lspci -tv` and `nvidia-smi topo -m` taken on the bare-metal host; in a VM ask the "
                   "provider for the physical topology (or use a topology-preserving instance type).",
            confirm_with="nvidia-smi topo -m; sudo lspci -tv",
            data={"nvidia_smi": link.path, "pcie_tree": derived.path, "bridges": derived.bridges},
        )


def check_gpu_nic_far(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    tree = build_tree(machine)
    nics = nic_endpoints(machine, tree)
    if not nics:
        return
    for gpu, gpu_bdf in gpu_endpoints(machine, tree):
        paths = [tree.pair_path(gpu_bdf, nic_bdf, gpu, nic) for nic, nic_bdf in nics]
        known = [p for p in paths if p.path in PCIE_PATH_ORDER]
        if not known or len(known) < len(paths) and not any(p.path in ("PIX", "PXB", "PHB") for p in known):
            continue  # some NIC paths unknown: it may be near
        nearest = min(known, key=lambda p: PCIE_PATH_ORDER.index(p.path))  # type: ignore[arg-type]
        if nearest.path not in ("NODE", "SYS"):
            continue
        nic_bdf = dict(nics)[nearest.b]
        sys_path = nearest.path == "SYS"
        yield Finding(
            id="gpu-nic-far",
            severity="warn" if sys_path else "info",
            subjects=[gpu, nearest.b],
            title=f"{gpu}'s nearest NIC {nearest.b} is on "
                  + ("another CPU socket (SYS)" if sys_path else "another root complex of its socket (NODE)"),
            explanation=(f"{gpu} ({gpu_bdf}, root complex {tree.root_complex(gpu_bdf)}, NUMA node "
                         f"{tree.numa_node(gpu_bdf)}) and {nearest.b} ({nic_bdf}, root complex "
                         f"{tree.root_complex(nic_bdf)}, NUMA node {tree.numa_node(nic_bdf)}): {nearest.reason}. "
                         "GPUDirect RDMA from this GPU has to cross "
                         + ("the CPU interconnect, which NCCL avoids (it stages through host memory or routes via "
                            "another GPU with PXN), so multi-node collectives lose bandwidth."
                            if sys_path else "the CPU's internal fabric between root complexes; it works, but slower "
                            "than through a shared switch.")),
            evidence=evidence_refs([tree.devices[gpu_bdf].source, tree.devices[nic_bdf].source]),
            remedy="Put each GPU's rail NIC under the same switch or socket as the GPU, or keep the ranks that use "
                   "this GPU on single-node work; check NCCL's choice with NCCL_DEBUG=INFO (NET/IB/... GDRDMA).",
            confirm_with="nvidia-smi topo -m; sudo lspci -tv",
            data={"gpu_bdf": gpu_bdf, "nic_bdf": nic_bdf, "path": nearest.path},
        )


RULES = (
    Rule("pcie-link-width-limited-by-hop", "warn", "A hop on a GPU's or NIC's PCIe path is narrower than the device",
         check_link_width, kind="fault"),
    Rule("pcie-link-speed-below-capability", "warn", "A PCIe link runs below the speed both ends can do",
         check_link_speed, kind="fault"),
    Rule("acs-redirect-between-gpus", "fail", "ACS redirect on a bridge between two GPUs", check_acs_between_gpus,
         kind="misconfiguration"),
    Rule("acs-redirect-gpu-nic", "fail", "ACS redirect between a GPU and its nearest NIC (breaks GPUDirect RDMA)",
         check_acs_gpu_nic, kind="misconfiguration"),
    Rule("acs-redirect-enabled", "warn", "ACS P2P redirect enabled on bridges", check_acs_enabled,
         kind="misconfiguration"),
    Rule("acs-state-unknown", "info", "ACS settings between GPUs could not be read", check_acs_unknown,
         kind="missing-evidence"),
    Rule("topology-path-mismatch", "warn", "The PCIe tree and nvidia-smi topo -m disagree about a GPU pair",
         check_topology_mismatch, kind="contradiction"),
    Rule("gpu-nic-far", "info", "A GPU's nearest NIC is on another root complex or socket", check_gpu_nic_far,
         kind="design"),
)
