"""NVLink and NVLink-fabric findings: links inactive, the fabric not ready, Fabric Manager trouble, GB200 cliques,
IMEX channels.

Each finding quotes the line that proves it (`nvidia-smi nvlink -s`, the `-q` Fabric block, the Fabric Manager
log, the application's CUDA error). Expectations are SKU-aware: an H100 NVL or H100 PCIe card uses 12 of its 18
NVLinks by design (three bridges of four links; Azure/azurehpc-health-checks#162), so those six inactive links
are said once as information, not as a fault.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.model.fabric import NvLinkReading
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef

# GPUs whose NVLink pairs are bridged cards using 12 of 18 links by design.
_TWELVE_LINK_SKUS = re.compile(r"H100\s+(?:NVL|PCIe)", re.I)
# NVSwitch systems: 8-GPU SXM boards whose NVLinks go through NVSwitches managed by Fabric Manager.
_NVSWITCH_SKUS = re.compile(r"(?:A100|A800|H100|H800|H200|H20|B200|B100|B300)[- ]?(?:SXM|80GB HBM3|HBM3|\b)", re.I)
# Multi-node NVLink (MNNVL) trays: the fabric spans trays, a clique id and cluster UUID are required.
_MNNVL_SKUS = re.compile(r"GB200|GB300|GH200 NVL", re.I)
_FM_CONFIRM = "systemctl status nvidia-fabricmanager; nvidia-smi -q -d FABRIC | grep -A3 Fabric"


def _gpu_name(machine: Machine, index: int) -> str:
    gpu = machine.gpus.get(index)
    return (gpu.name if gpu and gpu.name else "") or ""


def _expected_active(name: str, total: int) -> int | None:
    """Links a GPU of this SKU should have up; None when every link it lists should be."""
    if _TWELVE_LINK_SKUS.search(name) and total == 18:
        return 12
    return None


def _refs(readings: Iterable[NvLinkReading], limit: int = 6) -> list[SourceRef]:
    return [r.source for r in readings if r.source is not None][:limit]


def check_nvlink_inactive(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    fabric = machine.fabric
    status = [r for r in fabric.nvlinks if r.origin == "nvidia-smi-nvlink-status" or r.origin == "nvml"]
    by_gpu: dict[int, list[NvLinkReading]] = {}
    for reading in status:
        if reading.active is not None:
            by_gpu.setdefault(reading.gpu, []).append(reading)
    for gpu, ref in sorted(fabric.nvlinks_all_inactive.items()):
        yield Finding(
            id="nvlink-all-inactive",
            severity="fail",
            subjects=[f"GPU{gpu}"],
            title=f"GPU{gpu} has no NVLink up: every link is inactive",
            explanation=(
                f"`nvidia-smi nvlink -s` cannot read GPU{gpu}'s NVLinks because all of them are inactive. On an "
                "NVSwitch board (HGX/DGX) this GPU then talks to its peers over PCIe only, or not at all: CUDA "
                "initialization fails while the fabric is not set up, and any tensor-parallel group containing it "
                "runs at PCIe speed. On HGX B200 this is what a missing Fabric Manager/NVLSM looks like."
            ),
            evidence=[ref],
            confirm_with=f"nvidia-smi nvlink -s -i {gpu}; {_FM_CONFIRM}",
            causes=["fabric-manager-not-running@fabric"],
            remedy=("Start Fabric Manager (and NVLSM on B200: `nvidia-fabricmanager-start.sh` starts both; the mlx5_ib "
                    "and ib_umad modules must be loaded), wait for `Fabric State: Completed`, then re-check. If other "
                    "GPUs are up and this one stays down, reset it (`nvidia-smi -r -i N`) or open a hardware ticket."),
        )
    counts: dict[int, tuple[int, int]] = {}
    by_design: list[tuple[int, str, int, int, int, list[NvLinkReading]]] = []
    for gpu, readings in sorted(by_gpu.items()):
        active = [r for r in readings if r.active]
        inactive = [r for r in readings if r.active is False]
        counts[gpu] = (len(active), len(readings))
        if not inactive:
            continue
        name = _gpu_name(machine, gpu)
        expected = _expected_active(name, len(readings))
        if expected is not None and len(active) >= expected:
            by_design.append((gpu, name, len(active), len(readings), expected, inactive))
            continue
        links = ", ".join(str(r.link) for r in inactive)
        yield Finding(
            id="nvlink-inactive",
            severity="fail" if not active else "warn",
            subjects=[f"GPU{gpu}"],
            title=f"GPU{gpu} has {len(inactive)} of {len(readings)} NVLinks inactive (link {links})",
            explanation=(
                f"`nvidia-smi nvlink -s` shows link {links} of GPU{gpu} as `<inactive>`"
                f"{' while ' + str(len(active)) + ' are up' if active else ''}. Its NVLink bandwidth to every peer "
                f"drops by the missing links' share ({len(inactive)}/{len(readings)}), and an all-reduce over a "
                "tensor-parallel group containing it runs at that pace."
            ),
            evidence=_refs(inactive),
            confirm_with=f"nvidia-smi nvlink -s -i {gpu}; nvidia-smi nvlink -e -i {gpu}",
            remedy=("Check the error counters (`nvidia-smi nvlink -e`), reset the GPU (`nvidia-smi -r -i N`) or "
                    "restart Fabric Manager on NVSwitch boards; if the link stays down, open a hardware ticket (a "
                    "bridge or baseboard fault). Until then keep this GPU out of the largest TP group."),
            data={"inactive": [r.link for r in inactive], "active": len(active), "listed": len(readings)},
        )
    if by_design:
        gpu, name, active_n, listed, expected, inactive = by_design[0]
        gpus = [f"GPU{item[0]}" for item in by_design]
        yield Finding(
            id="nvlink-partial-by-design",
            severity="info",
            subjects=gpus,
            title=f"{', '.join(gpus)} ({name}) use {active_n} of {listed} NVLinks, as this SKU is built",
            explanation=(
                f"{name} cards are joined in pairs by NVLink bridges that carry {expected} links; the other "
                f"{listed - expected} show as inactive by design. Expect pair bandwidth from {expected} links, and "
                "no NVLink beyond the pair."
            ),
            evidence=[ref for item in by_design[:2] for ref in _refs(item[5], 2)],
            data={"gpus": [item[0] for item in by_design], "active": active_n, "listed": listed,
                  "expected": expected},
        )
    # Fewer links up than the same GPU model's peers, even where the listing itself shows no <inactive>
    # (a cut output, or a driver that lists only the links it trained).
    by_name: dict[str, list[int]] = {}
    for gpu in counts:
        by_name.setdefault(_gpu_name(machine, gpu), []).append(gpu)
    flagged = {f.subjects[0] for f in earlier if f.id in ("nvlink-inactive",)}
    for name, gpus in by_name.items():
        if len(gpus) < 2:
            continue
        typical, _ = Counter(counts[g][0] for g in gpus).most_common(1)[0]
        for gpu in gpus:
            active, listed = counts[gpu]
            if active >= typical or f"GPU{gpu}" in flagged or any(r.active is False for r in by_gpu[gpu]):
                continue
            yield Finding(
                id="nvlink-fewer-than-peers",
                severity="warn",
                subjects=[f"GPU{gpu}"],
                title=f"GPU{gpu} has {active} NVLink{'' if active == 1 else 's'} up where its peers have {typical}",
                explanation=(f"The other {name or 'GPUs'} on this host list {typical} active NVLinks; GPU{gpu} lists "
                             f"{active}. Links it does not list are down or untrained."),
                evidence=_refs(by_gpu[gpu], 2),
                confirm_with=f"nvidia-smi nvlink -s -i {gpu}; nvidia-smi nvlink -e -i {gpu}",
                remedy="Reset the GPU or restart Fabric Manager; open a hardware ticket if the links stay down.",
                data={"active": active, "typical": typical},
            )


def _nvswitch_box(machine: Machine) -> bool:
    """Whether GPUs here reach each other through NVSwitches (so Fabric Manager must run)."""
    gpu_buses = {gpu.bus_id for gpu in machine.gpus.values() if gpu.bus_id}
    if any(r.remote_bus_id and gpu_buses and r.remote_bus_id not in gpu_buses for r in machine.fabric.nvlinks):
        return True
    names = [gpu.name or "" for gpu in machine.gpus.values()]
    if len(names) >= 8 and all(_NVSWITCH_SKUS.search(name) and "PCIe" not in name and "NVL" not in name
                               for name in names):
        return True
    return bool(machine.fabric.fabric_manager.events) or machine.fabric.fabric_manager.running is not None


def check_fabric_not_ready(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    fabric = machine.fabric
    fm = fabric.fabric_manager
    pending = {gpu: state for gpu, state in fabric.gpu_fabric.items()
               if state.state in ("In Progress", "Not Started")}
    evidence: list[SourceRef] = []
    reasons: list[str] = []
    if fabric.system_not_ready:
        evidence.extend(fabric.system_not_ready[:2])
        reasons.append("CUDA failed with error 802 (`system not yet initialized`): the GPUs are not registered with "
                       "the NVLink fabric, which Fabric Manager does")
    if fm.running is False:
        evidence.extend(fm.sources[:1] + [e.source for e in fm.events if e.kind == "service-failed"][:1])
        reasons.append("the nvidia-fabricmanager service is not running")
    if pending:
        for gpu, state in sorted(pending.items())[:2]:
            ref = state.sources.get("state") or state.sources.get("block")
            if ref is not None:
                evidence.append(ref)
        gpus = ", ".join(f"GPU{g}" for g in sorted(pending))
        reasons.append(f"the fabric registration of {gpus} is `{next(iter(pending.values())).state}`")
    if not reasons:
        return
    b200 = any(re.search(r"B200|B100|B300", gpu.name or "") for gpu in machine.gpus.values())
    yield Finding(
        id="fabric-manager-not-running",
        severity="fail",
        subjects=["fabric"],
        title="The NVLink fabric is not ready: " + reasons[0].split(":")[0],
        explanation=(
            "; ".join(reasons) + ". On NVSwitch systems (HGX/DGX A100, H100, H200, B200) CUDA cannot start until "
            "Fabric Manager has programmed the NVSwitches and every GPU reports `Fabric State: Completed`; until "
            "then every CUDA program fails with error 802 (cudaErrorSystemNotReady)."
            + (" On B200 the NVLink subnet manager (NVLSM) must run too, over the mlx5 NVSwitch management ports "
               "(mlx5_ib and ib_umad loaded)." if b200 else "")
        ),
        evidence=evidence,
        confirm_with=_FM_CONFIRM,
        remedy=("Install the nvidia-fabricmanager package of exactly the driver's version and start it "
                "(`systemctl enable --now nvidia-fabricmanager`); on B200 also install nvlsm. Wait for "
                "`nvidia-smi -q | grep -A2 Fabric` to show `State: Completed` / `Status: Success`."),
        data={"pending": sorted(pending), "nvswitch": _nvswitch_box(machine)},
        causes=["fabric-manager-version-mismatch@fabric", "fabric-manager-nothing-to-do@fabric",
                "fabric-manager-topology-mismatch@fabric"],
    )


def check_fm_version_mismatch(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    fm = machine.fabric.fabric_manager
    driver = machine.host.driver_version
    mismatch = [e for e in fm.events if e.kind == "version-mismatch"]
    if mismatch:
        fm_version, seen = fm.driver_interface_version, fm.driver_version_seen
    elif fm.version and driver and fm.version != driver:
        fm_version, seen = fm.version, driver
    else:
        return
    yield Finding(
        id="fabric-manager-version-mismatch",
        severity="fail",
        subjects=["fabric"],
        title=f"Fabric Manager {fm_version} does not match the driver {seen}",
        explanation=(f"Fabric Manager refuses to start unless its version equals the kernel driver's exactly; here it "
                     f"is {fm_version} and the driver is {seen}. Without it the NVSwitches stay unprogrammed and CUDA "
                     "fails with error 802 on every GPU. It happens after a driver update that left the FM package "
                     "behind (or the reverse), or with a driver container shipping another FM build."),
        evidence=[e.source for e in mismatch][:2] or fm.sources[:1],
        confirm_with="nv-fabricmanager --version; cat /proc/driver/nvidia/version; systemctl status nvidia-fabricmanager",
        remedy=(f"Install nvidia-fabricmanager {seen} (the driver's version: `apt install nvidia-fabricmanager-"
                f"{(seen or '').split('.')[0]}={seen}*`, then `apt-mark hold` both) or the driver matching FM, and "
                "restart the service."),
        data={"fabric_manager": fm_version, "driver": seen},
    )


_FM_EVENT_TEXT = {
    "nvswitch-fatal": ("fail", "an NVSwitch fatal error (SXid {detail})",
                       "A fatal NVSwitch error takes the links of that switch down; the GPUs behind it lose NVLink "
                       "bandwidth or the whole fabric until the system is reset."),
    "nvswitch-non-fatal": ("warn", "an NVSwitch non-fatal error (SXid {detail})",
                           "Non-fatal SXids are link-level errors the switch recovered from; repeated ones predict "
                           "a failing link."),
    "nvswitch-error": ("warn", "an NVSwitch error of unknown severity (SXid {detail})",
                       "The NVSwitch driver logged this SXid but the lines that say whether it was fatal are not in "
                       "the log given (a grep that kept only its `Data {...}` line). NVIDIA's SXid catalogue gives "
                       "its severity; a fatal one takes the switch's links down until a reset."),
    "multicast-gpu-missing": ("fail", "a GPU missing from an NVLink multicast team",
                              "Fabric Manager could not find a GPU in the multicast (NVLS) team it was asked to set "
                              "up: NCCL's NVLS all-reduce fails or falls back, usually because a GPU dropped off the "
                              "fabric."),
    "topology-mismatch": ("fail", "an NVSwitch count that matches no supported topology",
                          "Fabric Manager aborted: it found a different number of NVSwitches than any supported "
                          "board has, so a switch is missing (hardware, firmware, or a VM passing through only some)."),
    "nothing-to-do": ("fail", "NV_WARN_NOTHING_TO_DO (no NVSwitch to manage)",
                      "Fabric Manager found no NVSwitch to manage. That is normal on boards without NVSwitches; on "
                      "HGX B200 it means the NVLink subnet manager (NVLSM) or the mlx5 management ports are missing."),
}


def check_nvswitch_errors(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    by_kind: dict[str, list] = {}
    for event in machine.fabric.fabric_manager.events:
        if event.kind in _FM_EVENT_TEXT:
            by_kind.setdefault(event.kind, []).append(event)
    for kind, events in by_kind.items():
        severity, what, why = _FM_EVENT_TEXT[kind]
        if kind == "nothing-to-do" and not any(re.search(r"B200|B100|B300", g.name or "")
                                               for g in machine.gpus.values()):
            severity = "info"  # no NVSwitch to manage is normal off Blackwell NVSwitch boards
        details = sorted({e.detail for e in events if e.detail})
        # the NVSwitch driver's own `SXid (PCI:...)` lines in the kernel log, or Fabric Manager's words
        kernel = all("SXid (PCI:" in e.source.text for e in events)
        reporter = "The kernel log shows" if kernel else "Fabric Manager reports"
        yield Finding(
            id=f"fabric-manager-{kind}",
            severity=severity,
            subjects=["fabric"],
            title=f"{reporter} {what.format(detail=', '.join(details[:4]) or '?').replace(' (SXid ?)', '')}"
                  + (f" ({len(events):,} times)" if len(events) > 1 else ""),
            explanation=why,
            evidence=[e.source for e in events][:4],
            confirm_with=("sudo dmesg -T | grep -E 'SXid|nvswitch'" if kernel else
                          "journalctl -u nvidia-fabricmanager; grep -E 'ERROR|WARN' /var/log/fabricmanager.log"),
            remedy=("Look up the SXid in NVIDIA's NVSwitch error catalogue; reset the system (a fatal SXid needs "
                    "a reboot or `nvidia-smi -r` of the GPUs and switches), and open a hardware ticket if it repeats."
                    if kind.startswith("nvswitch") else
                    "Check that every GPU and NVSwitch is visible (`lspci | grep -i nvidia`), restart Fabric Manager, "
                    "and on B200 install and start nvlsm."),
            data={"count": len(events), "details": details},
        )


def check_gpu_fabric_state(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for gpu, state in sorted(machine.fabric.gpu_fabric.items()):
        if state.state != "Completed":
            continue  # not ready is fabric-manager-not-running's
        name = _gpu_name(machine, gpu)
        mnnvl = bool(_MNNVL_SKUS.search(name)) or (state.clique_id not in (None, 0))
        problems: list[str] = []
        refs: list[SourceRef] = []
        if state.status and state.status.lower() != "success":
            problems.append(f"`Status: {state.status}`")
            refs.append(state.sources.get("status"))
        if mnnvl and state.clique_id == 0:
            problems.append("`CliqueId: 0`")
            refs.append(state.sources.get("clique_id"))
        if mnnvl and state.cluster_uuid_zero:
            problems.append("an all-zero ClusterUUID")
            refs.append(state.sources.get("cluster_uuid"))
        if state.health_summary and state.health_summary.lower() not in ("healthy", "n/a", "not supported"):
            problems.append(f"`Health Summary: {state.health_summary}`")
            refs.append(state.sources.get("health_summary"))
        if not problems:
            continue
        yield Finding(
            id="gpu-fabric-degraded",
            severity="fail",
            subjects=[f"GPU{gpu}"],
            title=f"GPU{gpu}'s NVLink fabric registration completed with {problems[0]}",
            explanation=(
                f"`nvidia-smi -q` shows GPU{gpu}'s fabric as `State: Completed` but with {', '.join(problems)}. A "
                "check that only looks for `N/A` passes this GPU, yet it is not in a usable NVLink domain: on GB200/"
                "GB300 trays multi-node NVLink (MNNVL), NCCL's NVLS and cuMem fabric handles fail or fall back to "
                "the network, and the rack's tensor-parallel groups cannot span trays."
            ),
            evidence=[ref for ref in refs if ref is not None],
            confirm_with=f"nvidia-smi -q -i {gpu} -d FABRIC",
            remedy=("Check the NVLink switch trays and the NMX controller for this compute tray's partition "
                    "(`Insufficient Resources`: the partition lacks switch resources or links), re-register the GPU "
                    "(reset it or reboot the tray), and drain the node until every GPU shows Status Success with a "
                    "non-zero CliqueId and ClusterUUID."),
            data=state.to_json(),
        )


def check_imex_channel(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    refs = machine.fabric.imex_missing
    if not refs:
        return
    yield Finding(
        id="imex-channel-missing",
        severity="fail",
        subjects=["fabric"],
        title="cuMemCreate of fabric memory is not permitted: no IMEX channel",
        explanation=("CUDA refused a fabric-handle allocation (CUDA_ERROR_NOT_PERMITTED in cuMemCreate). Memory "
                     "shared over multi-node NVLink needs the IMEX daemon and a channel device "
                     "(`/dev/nvidia-caps-imex-channels/channel0`) the user can open; without it nvbandwidth's multinode "
                     "tests, NCCL MNNVL and cuMem IPC fail."),
        evidence=refs[:3],
        confirm_with="grep nvidia-caps-imex-channels /proc/devices; ls -l /dev/nvidia-caps-imex-channels/; "
                     "systemctl status nvidia-imex",
        remedy=("Start nvidia-imex on every node of the NVLink domain and create the channel: "
                "`mknod /dev/nvidia-caps-imex-channels/channel0 c $(grep nvidia-caps-imex-channels /proc/devices | "
                "cut -d' ' -f1) 0` (the driver does it with `NVreg_CreateImexChannel0=1`); in Kubernetes request a "
                "ComputeDomain."),
    )


def _only(finding_id: str, check):
    """One rule per finding id (each has its page), from a check that yields several related ids."""
    def run(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
        return (finding for finding in check(machine, earlier) if finding.id == finding_id)
    run.__name__ = f"{check.__name__}[{finding_id}]"
    return run


RULES = (
    Rule("nvlink-all-inactive", "fail", "Every NVLink of a GPU is inactive",
         _only("nvlink-all-inactive", check_nvlink_inactive), kind="fault"),
    Rule("nvlink-inactive", "fail", "NVLinks of a GPU are inactive", _only("nvlink-inactive", check_nvlink_inactive), kind="fault"),
    Rule("nvlink-partial-by-design", "info", "A GPU uses fewer NVLinks than it lists, as its SKU is built",
         _only("nvlink-partial-by-design", check_nvlink_inactive), kind="design"),
    Rule("nvlink-fewer-than-peers", "warn", "A GPU has fewer NVLinks up than GPUs of its model",
         _only("nvlink-fewer-than-peers", check_nvlink_inactive), kind="fault"),
    Rule("fabric-manager-not-running", "fail", "The NVLink fabric is not ready (Fabric Manager, CUDA error 802)",
         check_fabric_not_ready, kind="fault"),
    Rule("fabric-manager-version-mismatch", "fail", "Fabric Manager and driver versions differ",
         check_fm_version_mismatch, kind="misconfiguration"),
    *(Rule(f"fabric-manager-{kind}", severity, f"Fabric Manager reports {what.split(' (')[0]}",
           _only(f"fabric-manager-{kind}", check_nvswitch_errors),
           kind="misconfiguration" if kind == "nothing-to-do" else "fault")
      for kind, (severity, what, _) in _FM_EVENT_TEXT.items()),
    Rule("gpu-fabric-degraded", "fail", "A GPU's fabric registration completed with an error or no clique",
         check_gpu_fabric_state, kind="fault"),
    Rule("imex-channel-missing", "fail", "No IMEX channel for fabric memory", check_imex_channel, kind="misconfiguration"),
)
