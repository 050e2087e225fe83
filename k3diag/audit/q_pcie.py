"""Checklist questions about the PCIe layer: link width with all cards in, switches, ACS and IOMMU."""

from __future__ import annotations

from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, Answer, worse
from k3diag.audit.context import AuditContext
from k3diag.audit.facts import attr
from k3diag.model.source import quoted_aside
from k3diag.model.words import counted

WIDTH_REQUEST = (
    "nvidia-smi -q ; nvidia-smi --query-gpu=index,pci.bus_id,pstate,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max --format=csv ; sudo lspci -vv   "
    "(run once idle and once while a job loads every GPU, with all cards installed; or simply "
    "`k3diag collect -o bundle.tar.gz`)"
)
SWITCH_REQUEST = "sudo lspci -tv ; sudo lspci -vv ; nvidia-smi topo -m"
ACS_REQUEST = "sudo lspci -vvv   (as root: without root the ACS capability reads <access denied>)"
IOMMU_REQUEST = ("cat /proc/cmdline ; cat /sys/kernel/iommu_groups/*/type | sort | uniq -c ; "
                 "sudo dmesg | grep -i -e DMAR -e IOMMU -e AMD-Vi")


def _gpu_link(machine: Any, gpu: Any) -> dict:
    """Current and maximum width and generation, from nvidia-smi/NVML first, lspci second."""
    pcie = attr(gpu, "pcie")
    device = facts.pci_device(machine, attr(gpu, "bus_id"))
    pci_link = attr(device, "link") if device is not None else None
    width_cur = attr(pcie, "width_current")
    width_max = attr(pcie, "width_max")
    gen_cur = attr(pcie, "gen_current")
    gen_max = attr(pcie, "gen_max")
    refs = [attr(pcie, "source")]
    if pci_link is not None:
        if width_cur is None:
            width_cur = attr(pci_link, "sta_width")
        if width_max is None:
            width_max = attr(pci_link, "cap_width")
        if gen_cur is None:
            gen_cur = facts.gen_from_speed(attr(pci_link, "sta_speed_gts"))
        if gen_max is None:
            gen_max = facts.gen_from_speed(attr(pci_link, "cap_speed_gts"))
        refs.append(attr(pci_link, "source"))
    return {
        "width_current": width_cur,
        "width_max": width_max,
        "gen_current": gen_cur,
        "gen_max": gen_max,
        "gen_device_max": attr(pcie, "gen_device_max"),
        "gen_host_max": attr(pcie, "gen_host_max"),
        "pstate": attr(gpu, "performance_state"),
        "refs": [ref for ref in refs if ref is not None],
    }


def _limiting_bridge(machine: Any, gpu: Any, gpu_width_max: int | None) -> tuple[Any, int] | None:
    """A bridge above the GPU whose link runs narrower than the GPU could (the hop that limits it)."""
    chain = facts.pci_chain(machine, attr(gpu, "bus_id"))
    for device in chain[1:]:
        link = attr(device, "link")
        width = attr(link, "sta_width") if link is not None else None
        if width is not None and gpu_width_max is not None and width < gpu_width_max:
            return device, width
    return None


def answer_pcie_x16(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="pcie-x16",
        question="Does every GPU run at PCIe x16 with all cards installed?",
        seed="每張 GPU 實際運行在 PCIe x16 還是 x8；四張卡同時安裝後是否會降速",
        verdict=UNKNOWN,
        summary="",
    )
    gpus = facts.gpus(machine)
    if not gpus:
        answer.summary = "The bundle shows no GPU, so link widths cannot be checked."
        answer.request = WIDTH_REQUEST
        return answer
    verdict = PASS
    unknown: list[str] = []
    narrow: list[str] = []
    per_gpu: dict[str, dict] = {}
    refs: list = []
    ok_refs: list = []
    for gpu in gpus:
        link = _gpu_link(machine, gpu)
        label = gpu.label
        per_gpu[label] = {key: value for key, value in link.items() if key != "refs"}
        cur, top = link["width_current"], link["width_max"]
        gen_cur, gen_max = link["gen_current"], link["gen_max"]
        if cur is None:
            unknown.append(label)
            answer.details.append(f"{label}: link width unknown")
            continue
        text = f"{label}: x{cur}" + (f" Gen{gen_cur}" if gen_cur else "")
        text += f" (max x{top}" + (f" Gen{gen_max}" if gen_max else "") + ")" if top else ""
        status = PASS
        if top is not None and cur < top:
            status = FAIL
            narrow.append(label)
            text += f": runs x{cur} though it can do x{top}, losing half or more of its host bandwidth"
            lost = facts.link_gbps(gen_max or gen_cur, top)
            have = facts.link_gbps(gen_max or gen_cur, cur)
            if lost and have:
                text += f" ({have:g} of {lost:g} GB/s per direction)"
        elif cur < 16 and (top is None or top < 16):
            status = WARN
            narrow.append(label)
            text += ": the link is at most x" + str(top or cur) + ", half of a x16 slot"
        limiting = _limiting_bridge(machine, gpu, top or cur)
        if limiting is not None:
            device, width = limiting
            status = worse(status, FAIL if top and width < top else WARN)
            text += f"; the bridge {attr(device, 'bdf')} above it runs x{width}"
            refs.append(attr(attr(device, "link"), "source"))
            if label not in narrow:
                narrow.append(label)
        host_max, device_max = link["gen_host_max"], link["gen_device_max"]
        if host_max and device_max and host_max < device_max:
            status = worse(status, WARN)
            text += f"; the slot allows Gen{host_max} for a Gen{device_max} GPU"
        if gen_cur and gen_max and gen_cur < gen_max:
            pstate = str(link["pstate"] or "")
            if pstate == "P0":
                status = worse(status, WARN)
                text += f"; Gen{gen_cur} below Gen{gen_max} while busy (P0)"
            elif pstate:
                text += f"; Gen{gen_cur} now is the idle power-saving speed ({pstate}), not a fault"
            else:
                text += (f"; Gen{gen_cur} now, not judged: idle GPUs drop their link speed and the reading "
                         "does not say whether this one was busy")
        verdict = worse(verdict, status)
        answer.details.append(text)
        # Quote the GPUs that are wrong; one line is enough to show how the good ones were read.
        (refs if status != PASS else ok_refs).extend(link["refs"][:2] if status != PASS else link["refs"][:1])
    full = [gpu.label for gpu in gpus if gpu.label not in narrow and gpu.label not in unknown]
    count = len(gpus)
    if verdict == PASS and unknown:
        verdict = UNKNOWN
    answer.verdict = verdict
    answer.data = {"gpus": per_gpu, "narrow": narrow, "unknown": unknown}
    answer.evidence = facts.dedupe_refs(refs + ok_refs[:1], limit=10)
    unseen = machine.unseen_attached_gpus()
    if unseen:  # `nvidia-smi -q -i 0`: the other attached GPUs' links are not in the evidence
        installed = f"{count} of the {count + unseen} attached GPUs are in the evidence"
    else:
        installed = f"with all {count} GPUs of the bundle installed" if count > 1 else "the bundle's only GPU"
    if verdict == PASS and unseen:
        verdict = answer.verdict = UNKNOWN
        answer.summary = (f"{', '.join(full)} {'runs' if len(full) == 1 else 'run'} at full link width; the other "
                          f"{counted(unseen, 'attached GPU')} {'is' if unseen == 1 else 'are'} not in the evidence"
                          f"{quoted_aside(machine.attached_count_source())}: "
                          "the output was filtered (`-i`).")
        answer.request = WIDTH_REQUEST
    elif verdict == PASS:
        answer.summary = f"Every GPU runs at its full link width ({installed})."
    elif verdict == UNKNOWN:
        answer.summary = (f"{len(full)} of {count} GPUs run at full width; the width of {', '.join(unknown)} "
                          "is not in the evidence.")
        answer.request = WIDTH_REQUEST
    else:
        verb = "does" if len(narrow) == 1 else "do"
        answer.summary = f"{', '.join(narrow)} {verb} not run at x16 ({installed})."
        answer.request = (f"Ask the vendor to reseat or move {'the card' if len(narrow) == 1 else 'the cards'} to a x16 "
                          "slot wired to the CPU (check the "
                          "board manual's lane map: slots often drop to x8 when a neighbour is populated), then "
                          "re-run: " + WIDTH_REQUEST)
        if unknown:
            answer.details.append(f"unknown: {', '.join(unknown)}")
    if any("Gen" in line and ("idle" in line or "not judged" in line) for line in answer.details):
        answer.details.append("Generation is judged only under load: GPUs drop to 2.5 GT/s when idle. Re-check with "
                              "`nvidia-smi -q` while all_reduce_perf runs.")
    return answer


def answer_pcie_switch(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="pcie-switch",
        question="Is there a PCIe switch between the GPUs and the CPU?",
        seed="是否存在 PCIe Switch",
        verdict=UNKNOWN,
        summary="",
    )
    ports = [device for device in attr(machine, "pci", []) or [] if facts.is_switch_port(device, machine)]
    # One switch chip shows as an upstream port and several downstream ports; count the chips.
    switches = [d for d in ports if "downstream" not in str(facts.port_role(machine, d) or "").lower()] or ports
    gpus = facts.gpus(machine)
    behind: dict[str, list[str]] = {}
    refs: list = []
    for gpu in gpus:
        chain = facts.pci_chain(machine, attr(gpu, "bus_id"))[1:]
        for position, device in enumerate(chain):
            if facts.is_switch_port(device, machine):
                # name the switch by its upstream port when the chain shows it
                upper = chain[position + 1] if position + 1 < len(chain) else None
                chip = upper if upper is not None and facts.is_switch_port(upper, machine) else device
                behind.setdefault(str(attr(chip, "bdf")), []).append(gpu.label)
                refs.append(attr(chip, "source"))
                break
    links = facts.gpu_links(machine)
    bridged = sorted({f"{a}-{b}" for (a, b), link in links.items() if link.path in ("PIX", "PXB", "PSB")})
    nvlinked = [key for key, link in links.items() if link.nvlinks]
    all_nv = bool(links) and len(nvlinked) == len(links)
    answer.data = {"switch_ports": [attr(d, "bdf") for d in ports], "gpus_behind": behind,
                   "bridged_pairs": bridged}
    if ports:
        answer.verdict = PASS
        refs.extend(attr(d, "source") for d in switches[:4])
        if behind:
            groups = "; ".join(f"{', '.join(labels)} behind {bdf}" for bdf, labels in sorted(behind.items()))
            answer.summary = f"Yes: {counted(len(behind), 'PCIe switch', 'PCIe switches')} above GPUs; {groups}."
        else:
            answer.summary = (f"Yes: {counted(len(switches), 'PCIe switch', 'PCIe switches')} in the PCIe tree (which GPUs sit behind "
                              "them is not in the evidence).")
        for device in switches[:12]:
            link = attr(device, "link")
            width = attr(link, "sta_width") if link is not None else None
            answer.details.append(f"{attr(device, 'bdf')}: {attr(device, 'description') or 'switch port'}"
                                  + (f", link x{width}" if width else ""))
    elif bridged:
        answer.verdict = PASS
        answer.summary = (f"Yes, by the path classes: {counted(len(bridged), 'GPU pair')} "
                          f"{'connects' if len(bridged) == 1 else 'connect'} through PCIe bridges "
                          "without the host bridge (PIX/PXB), which on a server means a PCIe switch.")
        answer.details.append("pairs: " + ", ".join(bridged[:16]))
        refs.extend(link.source for link in links.values() if link.path in ("PIX", "PXB", "PSB"))
    elif all_nv:
        answer.verdict = PASS
        answer.summary = ("No PCIe switch joins the GPUs: every pair talks over NVLink"
                          + (" (NVSwitch when every pair shows the same NV#)" if len(gpus) >= 8 else "") + ".")
        refs.extend(link.source for link in list(links.values())[:2])
    elif links and all(link.path in ("PHB", "NODE", "SYS") for link in links.values()):
        answer.verdict = PASS
        answer.summary = ("No: every GPU pair goes through a CPU host bridge (PHB/NODE/SYS), so each GPU hangs on "
                          "its own root port without a switch.")
        refs.extend(link.source for link in list(links.values())[:2])
    else:
        answer.verdict = UNKNOWN
        answer.summary = "The evidence has neither a PCIe tree nor GPU path classes."
        answer.request = SWITCH_REQUEST
    answer.evidence = facts.dedupe_refs(refs, limit=6)
    return answer


def answer_acs_iommu(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="acs-iommu",
        question="How are ACS and the IOMMU set?",
        seed="ACS 和 IOMMU 如何配置",
        verdict=UNKNOWN,
        summary="",
    )
    known = facts.acs_known_bridges(machine)
    redirecting = facts.acs_redirect_bridges(machine)
    gpu_paths: dict[str, list[str]] = {}
    for gpu in facts.gpus(machine):
        for device in facts.pci_chain(machine, attr(gpu, "bus_id"))[1:]:
            gpu_paths.setdefault(str(attr(device, "bdf")), []).append(gpu.label)
    links = facts.gpu_links(machine)
    all_nv = bool(links) and all(link.nvlinks for link in links.values())
    denied = [d for d in attr(machine, "pci", []) or [] if attr(d, "access_denied")]
    refs: list = []
    verdict = PASS
    problems: list[str] = []
    requests: list[str] = []

    acs_state = "unknown"
    if redirecting:
        acs_state = "redirect"
        on_gpu_path = [d for d in redirecting if str(attr(d, "bdf")) in gpu_paths]
        for device in redirecting[:8]:
            labels = gpu_paths.get(str(attr(device, "bdf")), [])
            answer.details.append(
                f"ACS ReqRedir/CmpltRedir on at {attr(device, 'bdf') or 'a bridge'}"
                + (f" above {', '.join(labels)}" if labels else "")
                + f" ({attr(device, 'description') or 'bridge'})")
            refs.append(attr(attr(device, "acs"), "source"))
        if on_gpu_path or not gpu_paths:
            severity = WARN if all_nv else FAIL
            problems.append("ACS redirects peer-to-peer requests up to the root complex"
                            + (" (GPUs talk over NVLink, so only GPU-NIC traffic suffers)" if all_nv else
                               ": PCIe P2P between GPUs crawls or hangs NCCL"))
        else:
            severity = WARN
            problems.append("ACS redirect is on at bridges that are not above a GPU (may still break GPU-NIC RDMA)")
        verdict = worse(verdict, severity)
        first = attr(redirecting[0], "bdf") or "BDF"
        requests.append(f"disable ACS redirect: `sudo setpci -s {first} ECAP_ACS+0x6.w=0000` per bridge (until "
                        "reboot) or turn off ACS/VT-d in the BIOS, then show `sudo lspci -vvv | grep ACSCtl`")
    elif known:
        acs_state = "off"
        answer.details.append(f"ACS redirect is off on {'the' if len(known) == 1 else 'all'} "
                              f"{counted(len(known), 'bridge')} whose ACS control was read")
        refs.extend(attr(attr(d, "acs"), "source") for d in known[:2])
    else:
        if denied:
            answer.details.append(f"{counted(len(denied), 'device')} read without root: ACS state <access denied>")
        requests.append(ACS_REQUEST)

    mode = facts.iommu_mode(machine)
    host = attr(machine, "host")
    cmdline = attr(host, "kernel_cmdline")
    refs.extend(facts.iommu_refs(machine)[:3])
    if mode == "translated":
        verdict = worse(verdict, WARN)
        problems.append("the IOMMU translates DMA: peer-to-peer and RDMA go through address translation "
                        "(slower, and P2P may fail)")
        requests.append("boot with `iommu=pt` (or `intel_iommu=off`/`amd_iommu=off` if no VM needs it)")
        answer.details.append("IOMMU: translated DMA" + (f" (kernel command line: {cmdline})" if cmdline else ""))
    elif mode in ("passthrough", "off"):
        answer.details.append(f"IOMMU: {mode}" + (f" (kernel command line: {cmdline})" if cmdline else ""))
    else:
        answer.details.append("IOMMU mode: not in the evidence")
        requests.append(IOMMU_REQUEST)

    answer.data = {"acs": acs_state, "acs_redirect_bridges": [attr(d, "bdf") for d in redirecting],
                   "acs_bridges_read": len(known), "iommu_mode": mode}
    if verdict == PASS and (acs_state == "unknown" or mode is None):
        verdict = UNKNOWN
    answer.verdict = verdict
    if problems:
        answer.summary = facts.sentence("; ".join(problems))
    elif verdict == PASS:
        answer.summary = f"ACS redirect is off and the IOMMU is {mode}: peer traffic takes the direct path."
    else:
        parts = []
        parts.append("ACS redirect off" if acs_state == "off" else "ACS state unknown")
        parts.append(f"IOMMU {mode}" if mode else "IOMMU mode unknown")
        answer.summary = ", ".join(parts) + "."
    answer.request = " ; ".join(requests) or None
    answer.evidence = facts.dedupe_refs(refs, limit=8)
    return answer
