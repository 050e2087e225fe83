"""ACS findings: redirect on a bridge between GPUs or between a GPU and its nearest NIC, redirect
enabled elsewhere, and ACS settings that could not be read (see `rules/pcie.py` for the rest)."""

from __future__ import annotations

from itertools import combinations
from typing import Iterable

from k3diag.analyze.finding import Finding
from k3diag.analyze.rules.pcie_common import (
    IOMMU_CAUSE,
    device_name,
    endpoint_bdfs,
    evidence_refs,
    join_words,
    label_key,
    nvlinked,
    role_words,
)
from k3diag.model.machine import Machine
from k3diag.model.pci import PORT_ROOT
from k3diag.model.pcie_tree import PcieTree, build_tree, gpu_endpoints, nic_endpoints
from k3diag.model.topology import PCIE_PATH_ORDER
from k3diag.model.words import counted


def _redirect_severity(tree: PcieTree, bridge: str, machine: Machine) -> str:
    if tree.role(bridge) == PORT_ROOT:
        mode = machine.host.iommu_mode
        return "info" if mode in ("passthrough", "off") else "warn"
    return "fail"


def _acs_remedy(bridges: list[str]) -> str:
    first = bridges[0]
    more = f" (and likewise for {', '.join(bridges[1:])})" if len(bridges) > 1 else ""
    return (f"`sudo setpci -s {first} ECAP_ACS+0x6.w=0000`{more} turns the redirect off until the next reboot (put it "
            "in a boot-time unit to keep it); for good, disable ACS, or VT-d/AMD-Vi (the IOMMU) if no VM passthrough "
            "needs it, in the BIOS. Booting with `iommu=pt` keeps redirected peer traffic out of IOMMU translation "
            "but does not turn the redirect off. NCCL documents the same steps.")


def check_acs_between_gpus(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    tree = build_tree(machine)
    gpus = gpu_endpoints(machine, tree)
    by_bridge: dict[str, list[tuple[str, str]]] = {}
    for (a, a_bdf), (b, b_bdf) in combinations(gpus, 2):
        if nvlinked(machine, a, b):
            continue
        pair = tree.pair_path(a_bdf, b_bdf, a, b)
        for bridge in _redirect_relevant(tree, pair):
            device = tree.devices.get(bridge)
            if device is not None and device.acs is not None and device.acs.redirects_p2p:
                by_bridge.setdefault(bridge, []).append((a, b))
    bdfs = endpoint_bdfs(machine, tree)
    for bridge, pairs in sorted(by_bridge.items()):
        yield _acs_finding(machine, tree, "acs-redirect-between-gpus", bridge, pairs, nic=False, bdfs=bdfs)


def _redirect_relevant(tree: PcieTree, pair) -> list[str]:
    """Bridges whose ACS redirect changes the route of this pair's peer traffic.

    Below a shared switch the redirect turns a direct path into a trip to the root complex.
    Between root ports of one host bridge the traffic goes through the root complex anyway;
    redirect there sends it through the IOMMU's checks. Across host bridges or sockets the
    route does not change."""
    if pair.path in ("PIX", "PXB"):
        return list(pair.bridges)
    if pair.path == "PHB":
        return [bridge for bridge in pair.bridges if tree.role(bridge) == PORT_ROOT]
    return []


def check_acs_gpu_nic(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    tree = build_tree(machine)
    nics = nic_endpoints(machine, tree)
    by_bridge: dict[str, list[tuple[str, str]]] = {}
    for gpu, gpu_bdf in gpu_endpoints(machine, tree):
        paths = [tree.pair_path(gpu_bdf, nic_bdf, gpu, nic) for nic, nic_bdf in nics]
        known = [p for p in paths if p.path is not None]
        if not known:
            continue
        best = min(PCIE_PATH_ORDER.index(p.path) for p in known if p.path in PCIE_PATH_ORDER)
        for pair in known:
            if PCIE_PATH_ORDER.index(pair.path) != best:
                continue  # GPUDirect RDMA uses the nearest NIC
            for bridge in _redirect_relevant(tree, pair):
                device = tree.devices.get(bridge)
                if device is not None and device.acs is not None and device.acs.redirects_p2p:
                    by_bridge.setdefault(bridge, []).append((pair.a, pair.b))
    bdfs = endpoint_bdfs(machine, tree)
    for bridge, pairs in sorted(by_bridge.items()):
        yield _acs_finding(machine, tree, "acs-redirect-gpu-nic", bridge, pairs, nic=True, bdfs=bdfs)


def _acs_finding(machine: Machine, tree: PcieTree, rule_id: str, bridge: str, pairs: list[tuple[str, str]],
                 nic: bool, bdfs: dict[str, str]) -> Finding:
    device = tree.devices[bridge]
    role = role_words(tree, bridge)
    members = sorted({name for pair in pairs for name in pair}, key=label_key)
    gpus = [m for m in members if m.startswith("GPU")]
    others = [m for m in members if not m.startswith("GPU")]
    below = [m for m in members if bridge in tree.ancestors(bdfs.get(m) or "")]
    where = f"the {role} above {join_words(below)}" if below else f"the {role} on the path of {join_words(members)}"
    ctl = device.acs.ctl if device.acs is not None else {}
    on = [flag for flag in ("ReqRedir", "CmpltRedir") if ctl.get(flag)]
    mode = machine.host.iommu_mode
    translated = mode == "translated"
    if nic:
        title = f"ACS request redirect is on at {bridge}, {where}: GPUDirect RDMA between {join_words(gpus)} and " \
                f"{join_words(others)} goes through the root complex"
        impact = ("GPUDirect RDMA (the NIC reading and writing GPU memory directly) is redirected up to the root "
                  "complex: it slows down, fails, or NCCL falls back to staging through host memory.")
    else:
        title = f"ACS request redirect is on at {bridge}, {where}: peer-to-peer traffic between {join_words(members)} is " \
                "sent up to the root complex"
        impact = ("Peer-to-peer requests between " + ", ".join(f"{a}-{b}" for a, b in pairs)
                  + " are redirected upstream instead of crossing the switch directly: NCCL and vLLM/SGLang custom "
                  "all-reduce may hang or crawl, and p2pBandwidthLatencyTest shows P2P enabled slower than disabled.")
    explanation = (f"ACSCtl of {bridge} ({device.description or role}) has {' and '.join(f'{f}+' for f in on)}. "
                   + impact + (" The IOMMU translates DMA on this host, so the redirected traffic is also translated, "
                               "which CUDA peer mappings do not expect." if translated else ""))
    finding = Finding(
        id=rule_id,
        severity=_redirect_severity(tree, bridge, machine),
        subjects=members + [bridge],
        title=title,
        explanation=explanation,
        evidence=evidence_refs([device.acs.source if device.acs else None], [device.source]),
        remedy=_acs_remedy([bridge]),
        confirm_with=f"sudo lspci -vvv -s {bridge} | grep -E 'ACSCap|ACSCtl'",
        data={"bridge": bridge, "role": tree.role(bridge), "pairs": [list(p) for p in pairs],
              "iommu_mode": mode},
    )
    if translated:
        finding.causes.append(IOMMU_CAUSE)
    return finding


def check_acs_enabled(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    """Every redirecting bridge not already named as lying between GPUs or a GPU and its NIC."""
    named = {f.data.get("bridge") for f in earlier if f.id in ("acs-redirect-between-gpus", "acs-redirect-gpu-nic")}
    tree = build_tree(machine)
    hits = [d for d in machine.pci if d.acs is not None and d.acs.redirects_p2p and (d.bdf is None or d.bdf not in named)]
    if not hits:
        return
    gpus = gpu_endpoints(machine, tree)
    placed = [d for d in hits if d.bdf is not None]
    unplaced = len(hits) - len(placed)
    if not gpus or unplaced:
        severity = "warn"
        context = ("No GPU positions are known from this evidence, so these bridges may sit above GPUs; "
                   if not gpus else f"{unplaced} of them come from lines without a device header, so where they sit "
                   "is unknown; ")
    else:
        severity = "info"
        context = ("None of them is on a path the GPUs use for PCIe peer-to-peer here (pairs joined by NVLink do not "
                   "use it) or between a GPU and its nearest NIC; ")
    yield Finding(
        id="acs-redirect-enabled",
        severity=severity,
        subjects=[device_name(d) for d in hits[:8]] if placed else ["pci"],
        title=f"ACS P2P redirect (ReqRedir+/CmpltRedir+) is on at {counted(len(hits), 'bridge')}",
        explanation=context + "peer-to-peer traffic between devices below a redirecting port goes up to the root "
        "complex, which breaks or slows GPU P2P and GPUDirect RDMA when GPUs or NICs sit below it. Ports: "
        + ", ".join(device_name(d) for d in hits[:16]) + ("..." if len(hits) > 16 else "") + ".",
        evidence=evidence_refs([d.acs.source for d in hits[:10] if d.acs is not None]),
        remedy=_acs_remedy([d.bdf for d in placed] or ["<bridge>"]),
        confirm_with="sudo lspci -vvv | grep -E '^[0-9a-f]|ACSCtl'",
        data={"bridges": [d.bdf for d in hits], "unplaced": unplaced},
    )


def check_acs_unknown(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    tree = build_tree(machine)
    gpus = gpu_endpoints(machine, tree)
    unknown: dict[str, set[str]] = {}
    unplaced: list[str] = []
    for (a, a_bdf), (b, b_bdf) in combinations(gpus, 2):
        if nvlinked(machine, a, b):
            continue
        pair = tree.pair_path(a_bdf, b_bdf, a, b)
        if pair.path is None:
            unplaced.append(f"{a}-{b}")
            continue
        for bridge in _redirect_relevant(tree, pair):
            device = tree.devices.get(bridge)
            if device is None or not device.acs_state_known:
                unknown.setdefault(bridge, set()).update((a, b))
    if not unknown and not unplaced:
        return
    members = sorted({m for names in unknown.values() for m in names} | {x for p in unplaced for x in p.split("-")},
                     key=label_key)
    denied = [d for d in machine.pci if d.access_denied]
    short = [b for b in unknown if tree.devices.get(b) is not None and tree.devices[b].capabilities_read is False]
    why = []
    if unknown:
        why.append(f"the ACS settings of {join_words(sorted(unknown))} between {join_words(members)} were not read")
    if unplaced:
        why.append("the bridges between " + ", ".join(unplaced) + " are not in the evidence, so neither their path "
                   "nor their ACS settings are known")
    cause = ("lspci ran without root: `Capabilities: <access denied>`" if denied else
             "the config space was readable only in its first bytes, without root" if short else
             "the evidence does not include them")
    yield Finding(
        id="acs-state-unknown",
        severity="info",
        subjects=members,
        title=f"ACS state unknown between {join_words(members)}: run `sudo lspci -vv` on this host and analyze again",
        explanation="; ".join(why) + f" ({cause}). ACS redirect on a bridge between GPUs is a leading cause of NCCL "
        "P2P hangs and slow all-reduce on PCIe servers, so it is worth settling.",
        evidence=evidence_refs([d.source for d in denied[:4]]),
        remedy="Run `sudo lspci -vvv` (or `sudo k3diag collect`) so the ACS capability of every bridge is readable.",
        confirm_with="sudo lspci -vvv | grep -E '^[0-9a-f]|ACSCtl'",
        data={"bridges": sorted(unknown), "unplaced_pairs": unplaced},
    )
