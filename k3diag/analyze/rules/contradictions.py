"""When two sources disagree about the same thing, say so with both pieces of evidence.

A disagreement is itself a finding: a VM that flattens its topology, a bundle whose two
readings of one link differ, NVML saying P2P works while NCCL used host memory. The
user must not have to notice these by reading five tools side by side.
"""

from __future__ import annotations

from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.model.machine import Machine
from k3diag.model.topology import pair_key


def check_link_readings(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    """Two sources (or two readings) give one pair different path classes."""
    by_pair: dict[tuple[str, str], list] = {}
    for link in machine.links:
        if link.path is None:
            continue
        by_pair.setdefault(link.key(), []).append(link)
    for pair, links in sorted(by_pair.items()):
        paths = {link.path for link in links}
        if len(paths) < 2:
            continue
        described = "; ".join(f"{link.origin} says {link.path}" for link in links)
        sources = [link.source for link in links if link.source is not None]
        # `for h in a b; do ssh $h nvidia-smi topo -m; done > all.txt`: two machines' outputs in one file, no
        # host named, are read as one machine; that is the likeliest reason when one format contradicts itself.
        one_file = (len({ref.input for ref in sources}) == 1 and len(sources) == len(links)
                    and len({link.origin for link in links}) == 1)
        remedy = ("Both readings are in one file: if it holds the outputs of two machines (a loop over hosts), "
                  "split it per host, or keep each host's prompt line (`user@host:~$ nvidia-smi topo -m`) above "
                  "its output so k3diag can tell them apart. " if one_file else "")
        yield Finding(
            id="link-readings-disagree",
            severity="warn",
            subjects=list(pair),
            title=f"Sources disagree about the path between {pair[0]} and {pair[1]}",
            explanation=(
                f"{described}. Either the readings come from different moments or machines, or one source "
                "sees a flattened view (VMs and containers often present a synthetic PCIe topology)."
            ),
            evidence=[link.source for link in links if link.source is not None],
            remedy=remedy + "Collect again on the host itself (not in a VM) with `k3diag collect -o bundle.tar.gz` "
                   "and compare; trust the physical PCIe tree (`sudo lspci -tv`) over a virtualized view.",
            data={"readings": [{"origin": link.origin, "path": link.path} for link in links]},
        )


def check_pcie_readings(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    """nvidia-smi/NVML and lspci/sysfs disagree about a GPU's current link width."""
    for gpu in machine.sorted_gpus():
        device = machine.pci_device(gpu.bus_id)
        if device is None or device.link is None:
            continue
        gpu_width = gpu.pcie.width_current
        pci_width = device.link.sta_width
        if gpu_width is None or pci_width is None or gpu_width == pci_width:
            continue
        evidence = [ref for ref in (gpu.pcie.source, device.link.source) if ref is not None]
        yield Finding(
            id="pcie-readings-disagree",
            severity="info",
            subjects=[gpu.label],
            title=f"{gpu.label}: the driver and the PCI config space report different link widths",
            explanation=(
                f"The GPU driver reports x{gpu_width} while {device.origin} reports x{pci_width} for {device.bdf}. "
                "Readings taken at different times can differ if the link retrained in between; a persistent "
                "difference points at a flaky link."
            ),
            evidence=evidence,
            remedy=f"Read both again at the same moment: `nvidia-smi -q -i {gpu.index} | grep -A3 'Link Width'` and "
                   f"`sudo lspci -vv -s {device.bdf} | grep LnkSta`.",
        )


def check_p2p_ok_but_nccl_not(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    """NVML / topo -p2p say P2P works for a pair, yet NCCL moved that pair's data through host memory."""
    for finding in earlier:
        if finding.id != "nccl-same-host-pair-not-p2p":
            continue
        gpus = finding.data.get("gpus") if isinstance(finding.data, dict) else None
        if not gpus or len(gpus) != 2:
            continue
        a, b = f"GPU{gpus[0]}", f"GPU{gpus[1]}"
        statuses = [s for s in machine.p2p if pair_key(s.src, s.dst) == pair_key(a, b) and s.capability in ("read", "write", "pcie", "unknown")]
        if not statuses or not all(s.status == "OK" for s in statuses):
            continue
        yield Finding(
            id="p2p-ok-but-nccl-not",
            severity="warn",
            subjects=[a, b],
            title=f"P2P is reported OK between {a} and {b}, yet NCCL did not use it",
            explanation=(
                "The driver reports peer-to-peer as supported for this pair, but NCCL chose another transport. "
                "Usual reasons: NCCL_P2P_LEVEL/NCCL_P2P_DISABLE in the environment, a path NCCL rates beyond its "
                "P2P level (SYS by default on Intel hosts), ACS redirecting peer traffic, or a container without "
                "access to /dev/shm or the IPC namespace."
            ),
            evidence=[s.source for s in statuses if s.source is not None][:2] + list(finding.evidence[:2]),
            causes=[finding.key],
            remedy="Check the NCCL settings in the log (`grep 'set by environment' job.log`), then run "
                   "`NCCL_P2P_LEVEL=SYS NCCL_DEBUG=INFO all_reduce_perf -g 2` on that pair to see whether P2P is chosen.",
        )


RULES = (
    Rule("link-readings-disagree", "warn", "Sources disagree about the path between two endpoints", check_link_readings,
         kind="contradiction"),
    Rule("pcie-readings-disagree", "info", "Driver and config space report different link widths", check_pcie_readings,
         kind="contradiction"),
    Rule("p2p-ok-but-nccl-not", "warn", "P2P reported OK but NCCL did not use it", check_p2p_ok_but_nccl_not,
         kind="fault"),
)
