"""Platform findings: the IOMMU translating GPU DMA, PCIe AER errors and NVIDIA Xid errors.

The facts come from sysfs (IOMMU group types), /proc/cmdline, and the kernel log; they live
in `machine.extras["platform"]` (`k3diag.model.pci.PlatformState`) and `machine.host`.
"""

from __future__ import annotations

from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.model.machine import Machine
from k3diag.model.pci import DmesgEvent, platform_state
from k3diag.model.pcie_tree import build_tree
from k3diag.model.ids import normalize_bdf

# Xid meanings from NVIDIA's Xid catalog, with how bad each is for a serving host.
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("Graphics Engine Exception (usually an application fault)", "info"),
    31: ("GPU memory page fault (usually an application fault)", "info"),
    32: ("Invalid or corrupted push buffer stream (PCIe or driver corruption)", "warn"),
    38: ("Driver firmware error", "warn"),
    43: ("GPU stopped processing (application reset)", "info"),
    45: ("Preemptive cleanup after a previous error", "info"),
    48: ("Double-bit ECC error", "fail"),
    61: ("Internal micro-controller breakpoint/warning", "fail"),
    62: ("Internal micro-controller halt", "fail"),
    63: ("ECC page retirement or row remapping recording event", "warn"),
    64: ("ECC page retirement or row remapping failure", "fail"),
    68: ("NVDEC0 exception", "warn"),
    69: ("Graphics engine class error", "warn"),
    74: ("NVLink error", "fail"),
    79: ("GPU has fallen off the bus", "fail"),
    92: ("High single-bit ECC error rate", "warn"),
    94: ("Contained ECC error", "warn"),
    95: ("Uncontained ECC error", "fail"),
    109: ("Context switch timeout", "warn"),
    119: ("GSP RPC timeout", "fail"),
    120: ("GSP error", "fail"),
    121: ("C2C link corrected error", "warn"),
    140: ("Unrecovered ECC error", "fail"),
    143: ("GPU initialization failure", "fail"),
    145: ("NVLink error (newer drivers)", "fail"),
    149: ("NVLink/NVSwitch fabric error", "fail"),
    154: ("GPU recovery action required", "fail"),
}


def _gpu_label(machine: Machine, bdf: str | None) -> str | None:
    if bdf is None:
        return None
    gpu = machine.gpu_by_bus_id(bdf)
    return gpu.label if gpu is not None else None


# -- IOMMU ------------------------------------------------------------------------------------


def check_iommu_translated(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    if machine.host.iommu_mode != "translated" or not machine.gpus:
        return
    iommu = platform_state(machine).iommu
    nics = [n for n in machine.nics.values()]
    if len(machine.gpus) < 2 and not nics:
        return
    gpu_types = sorted(set(iommu.gpu_group_types.values()))
    basis = (f"the GPUs' IOMMU groups are of type {', '.join(gpu_types)}" if gpu_types else
             f"the IOMMU groups are of type {', '.join(sorted(iommu.group_types))}" if iommu.group_types else
             "the kernel reports `Default domain type: Translated`" if iommu.default_domain == "translated" else
             "the kernel command line forces translation")
    acs = [f for f in earlier if f.id in ("acs-redirect-between-gpus", "acs-redirect-gpu-nic")]
    yield Finding(
        id="iommu-translated",
        severity="fail" if acs else "warn",
        subjects=["iommu"],
        title="The IOMMU translates DMA of the GPUs (not passthrough)",
        explanation=(f"On this host {basis}: every DMA from the GPUs and NICs goes through IOMMU address translation. "
                     "Peer-to-peer between GPUs and GPUDirect RDMA then need IOMMU mappings the CUDA and RDMA stacks "
                     "do not always set up, so P2P can fail, hang or crawl (RCCL warns `Missing \"iommu=pt\"`), and "
                     "translation adds latency to every transfer"
                     + ("; with ACS redirect on (see the ACS findings) the redirected P2P traffic is translated too."
                        if acs else ".")),
        evidence=list(iommu.sources[:6]),
        remedy=("Boot with `iommu=pt` (add it to GRUB_CMDLINE_LINUX, `update-grub`, reboot; keep `intel_iommu=on` on "
                "Intel if VMs need passthrough), or disable the IOMMU (VT-d/AMD-Vi) in the BIOS when no device "
                "passthrough is needed."),
        confirm_with="cat /sys/kernel/iommu_groups/*/type | sort | uniq -c; cat /proc/cmdline",
        data={"group_types": dict(iommu.group_types), "gpu_group_types": dict(iommu.gpu_group_types),
              "cmdline": dict(iommu.cmdline)},
    )


# -- AER --------------------------------------------------------------------------------------


def check_aer(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    events = [e for e in platform_state(machine).events if e.kind == "aer"]
    by_device: dict[str, list[DmesgEvent]] = {}
    for event in events:
        by_device.setdefault(event.bdf or "unknown", []).append(event)
    tree = build_tree(machine)
    gpu_paths = {}
    for gpu in machine.sorted_gpus():
        if gpu.bus_id:
            bdf = normalize_bdf(gpu.bus_id)
            for name in tree.path(bdf) if bdf in tree.devices else [bdf]:
                gpu_paths.setdefault(name, []).append(gpu.label)
    for bdf, items in sorted(by_device.items()):
        fatal = [e for e in items if e.severity == "uncorrected-fatal"]
        nonfatal = [e for e in items if e.severity == "uncorrected-nonfatal"]
        corrected = [e for e in items if e.severity == "corrected"]
        severity = "fail" if fatal else "warn" if nonfatal or len(corrected) >= 5 else "info"
        labels = gpu_paths.get(bdf, [])
        gpu_here = _gpu_label(machine, bdf)
        if gpu_here:
            who = gpu_here
        elif labels:
            who = f"the {tree.role(bdf) or 'bridge'} {bdf} above {', '.join(labels)}".replace("Root Port", "root port")
        else:
            who = bdf
        counts = ", ".join(part for part in (
            f"{len(fatal):,} uncorrected fatal" if fatal else "",
            f"{len(nonfatal):,} uncorrected non-fatal" if nonfatal else "",
            f"{len(corrected):,} corrected" if corrected else "") if part)
        details = sorted({d for e in items for d in e.details})
        # the kernel names the layer in full: `type=Physical Layer`, `type=Transaction Layer`
        kinds = sorted({e.error_type if e.error_type.lower().endswith("layer") else f"{e.error_type} layer"
                        for e in items if e.error_type})
        subjects = ([gpu_here] if gpu_here else []) + [bdf] + [label for label in labels if label != gpu_here]
        yield Finding(
            id="pcie-aer-errors",
            severity=severity,
            subjects=subjects,
            title=f"PCIe AER errors on {who}: {counts}",
            explanation=(f"The kernel logged PCIe Advanced Error Reporting errors for {bdf}"
                         + (f" ({', '.join(kinds)})" if kinds else "")
                         + (f": {', '.join(details)}" if details else "") + ". "
                         + ("An uncorrected fatal error (a Surprise Down is the link dropping) takes the link and every "
                            "device below it offline; GPUs behind it fall off the bus." if fatal else
                            "Corrected errors are retried by the link layer and cost bandwidth; many of them mean a "
                            "marginal link (riser, retimer, seating) that may fail under load.")),
            evidence=[e.source for e in items[:6]],
            remedy=("Reseat the GPU and riser or cable, check power and retimers, update BIOS and device firmware; if "
                    "corrected errors keep coming at Gen4/Gen5, try the slot at a lower PCIe generation in the BIOS."),
            confirm_with="sudo dmesg -T | grep -iE 'AER|PCIe Bus Error'",
            data={"bdf": bdf, "fatal": len(fatal), "nonfatal": len(nonfatal), "corrected": len(corrected),
                  "details": details, "gpus": labels},
        )


# -- Xid --------------------------------------------------------------------------------------


def check_xid(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    events = [e for e in platform_state(machine).events if e.kind in ("xid", "fallen-off-bus")]
    groups: dict[tuple[str, int], list[DmesgEvent]] = {}
    for event in events:
        code = event.code if event.code is not None else 79
        groups.setdefault((event.bdf or "unknown", code), []).append(event)
    tree = build_tree(machine)
    aer = [f for f in earlier if f.id == "pcie-aer-errors"]
    for (bdf, code), items in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1])):
        meaning, severity = XID_MEANINGS.get(code, ("see NVIDIA's Xid catalog", "warn"))
        label = _gpu_label(machine, bdf) if bdf != "unknown" else None
        who = label or (bdf if bdf != "unknown" else "a GPU")
        path = set(tree.path(bdf)) if bdf in tree.devices else {bdf}
        causes = [f.key for f in aer if f.data.get("bdf") in path]
        message = next((e.error_type for e in items if e.error_type), meaning)
        # who the driver blamed (process, MIG instance), as the Xid line said it
        blamed = sorted({d for e in items for d in e.details})
        if blamed:
            message += f" ({'; '.join(blamed[:4])}{'; ...' if len(blamed) > 4 else ''})"
        finding = Finding(
            id="xid-errors",
            severity=severity,
            subjects=[label or bdf] + ([f"Xid{code}"]),
            title=f"{who}: Xid {code} ({meaning})" + (f" x{len(items)}" if len(items) > 1 else ""),
            explanation=(f"The NVIDIA driver logged Xid {code} for {who}"
                         + (f" ({bdf})" if bdf != "unknown" and bdf != who else "") + f": {message}. "
                         + _xid_advice(code)),
            evidence=[e.source for e in items[:6]],
            remedy=_xid_remedy(code),
            confirm_with="sudo dmesg -T | grep -E 'NVRM: Xid|fallen off the bus'; nvidia-smi -q -d ECC,PAGE_RETIREMENT",
            data={"bdf": bdf, "code": code, "count": len(items)},
        )
        finding.causes.extend(causes)
        yield finding


def _xid_advice(code: int) -> str:
    if code == 79:
        return ("The GPU stopped answering on the PCIe bus: every process using it fails and only a reset or reboot "
                "brings it back. Causes are power (cables, PSU), heat, a failing link (see AER errors), or the card.")
    if code in (48, 63, 64, 92, 94, 95, 140):
        return "GPU memory errors: watch the ECC and row-remapping counters; a GPU that keeps logging them needs RMA."
    if code in (74, 145, 149):
        return "NVLink errors degrade or cut GPU-to-GPU bandwidth and can hang collectives."
    if code in (13, 31, 43, 45):
        return "Usually a fault in the application (bad kernel, out-of-bounds access), not the hardware."
    return "Check NVIDIA's Xid documentation for this code."


def _xid_remedy(code: int) -> str:
    if code == 79:
        return ("Check the GPU's power cables and PSU headroom, cooling and seating; update the system BIOS, VBIOS and "
                "driver; run a burn-in (gpu-burn/DCGM diag level 3) after a reboot. Repeated Xid 79 on one slot with "
                "AER errors on its port points at the slot or riser.")
    if code in (48, 63, 64, 92, 94, 95, 140):
        return "Reset the GPU to apply pending row remaps (`nvidia-smi -r` or reboot); RMA if errors recur."
    if code in (74, 145, 149):
        return "Run `nvidia-smi nvlink -s` and `nvidia-smi nvlink -e`; reseat the NVLink bridge or contact the vendor."
    return "If it recurs without an application at fault, collect `nvidia-bug-report.sh` and contact the vendor."


RULES = (
    Rule("iommu-translated", "warn", "The IOMMU translates GPU DMA (not passthrough)", check_iommu_translated,
         kind="misconfiguration"),
    Rule("pcie-aer-errors", "warn", "PCIe AER errors in the kernel log", check_aer, kind="fault"),
    Rule("xid-errors", "warn", "NVIDIA Xid errors in the kernel log", check_xid, kind="fault"),
)
