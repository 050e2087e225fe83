"""A virtual machine or a container: the topology the tools print is not (all of) the physical one."""

from __future__ import annotations

from typing import Iterable

from k3diag.analyze.finding import KIND_MISSING_EVIDENCE, Finding, Rule
from k3diag.model.machine import Machine
from k3diag.model.virtual import CONTAINER, VM, VirtualSign, hypervisor_vendor, virtual_signs

VIRTUALIZED_ID = "topology-virtualized"


def machine_signs(machine: Machine) -> list[VirtualSign]:
    """The signs the merges recorded, plus those read from the host facts and the GPUs' bus ids."""
    signs = virtual_signs(machine)
    host = machine.host
    source = host.sources[0] if host.sources else None
    if host.virtualized:
        signs.append(VirtualSign(VM, "the CPU reports the `hypervisor` flag (/proc/cpuinfo)", source))
    for value, what in ((host.sys_vendor, "system vendor"), (host.product_name, "product")):
        if hypervisor_vendor(value):
            signs.append(VirtualSign(VM, f"the {what} is {value} (/sys/class/dmi/id)", source))
    if host.container:
        signs.append(VirtualSign(CONTAINER, f"the collector ran in a {host.container} container (its cgroup)", source))
    signs.extend(_bus_signs(machine))
    return signs


def _bus_signs(machine: Machine) -> list[VirtualSign]:
    """GPUs straight on a root bus (dddd:00:xx.x), or several GPUs on one bus: a hypervisor's emulated PCI bus.
    On bare metal every GPU sits behind its own root or switch port, on a bus of its own."""
    gpus = [gpu for gpu in machine.sorted_gpus() if gpu.bus_id and gpu.bus_id.count(":") == 2]
    if len(gpus) < 1:
        return []
    on_root = [gpu for gpu in gpus if gpu.bus_id.split(":")[1] == "00"]
    signs: list[VirtualSign] = []
    if on_root and len(on_root) == len(gpus):
        first = on_root[0]
        signs.append(VirtualSign(VM, f"every GPU sits straight on a root bus ({first.label} at {first.bus_id})",
                                 first.sources[0] if first.sources else None))
    buses: dict[str, list] = {}
    for gpu in gpus:
        buses.setdefault(gpu.bus_id.rsplit(":", 1)[0], []).append(gpu)
    shared = [group for group in buses.values() if len(group) > 1]
    if shared and not on_root:
        group = shared[0]
        signs.append(VirtualSign(VM, f"{len(group)} GPUs share one PCI bus ({', '.join(g.bus_id for g in group)}), "
                                     "as on an emulated flat bus", group[0].sources[0] if group[0].sources else None))
    return signs


def check_topology_virtualized(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    signs = machine_signs(machine)
    if not signs:
        return
    vm = [sign for sign in signs if sign.kind == VM]
    what = "; ".join(sign.what for sign in (vm or signs)[:4])
    if vm:
        # With no GPU read, "the GPUs are seen through a VM" would contradict the no-gpu-found beside it.
        title = ("The GPUs are seen through a virtual machine: the topology shown is the hypervisor's, not the board's"
                 if machine.gpus else
                 "This host is a virtual machine: a GPU passed through to it shows the hypervisor's topology, not "
                 "the board's")
        cost = ("Which CPU socket, NUMA node and PCIe switch each GPU really sits on is not known from inside the guest: "
                "path classes (PHB, SYS, PIX) and NUMA affinity describe the virtual layout, so TP groups chosen from "
                "them may cross sockets on the host. Peer-to-peer is often refused or routed through the host "
                "(passthrough with IOMMU translation, ACS on the host's bridges), which NCCL then replaces with "
                "copies through host memory.")
        remedy = ("Ask the provider for the physical layout of the instance type (which GPUs share a PCIe switch and a "
                  "socket, whether P2P and GPUDirect are supported), or use an instance type that passes the "
                  "topology through (a full-node or bare-metal type). Measure instead of inferring: run "
                  "p2pBandwidthLatencyTest and nccl-tests inside the guest.")
    else:
        title = "k3diag read this machine from inside a container: parts of sysfs may be hidden"
        cost = ("A container sees the host's GPUs and PCIe links, but its /sys and /proc can be masked, so the PCIe "
                "tree, ACS and IOMMU settings and NUMA files may be missing or partial; what the rules could not see "
                "is unknown, not good.")
        remedy = "Run `k3diag collect` on the host itself (or in a privileged container with /sys mounted) and compare."
    yield Finding(
        id=VIRTUALIZED_ID,
        severity="info",
        kind=KIND_MISSING_EVIDENCE,
        subjects=[],
        title=title,
        explanation=f"Seen here: {what}. {cost}",
        # distinct lines first: two signs can rest on one (Finding drops repeats, but after this cut)
        evidence=list(dict.fromkeys(sign.source for sign in signs if sign.source is not None))[:4],
        remedy=remedy,
        confirm_with=("cat /sys/class/dmi/id/sys_vendor /sys/class/dmi/id/product_name; grep -c hypervisor "
                      "/proc/cpuinfo; cat /proc/1/cgroup; nvidia-smi topo -m; lspci -tv"),
        data={"kind": "vm" if vm else "container", "signs": [sign.what for sign in signs]},
    )


RULES = (
    Rule(VIRTUALIZED_ID, "info", "The topology is virtualized or hidden", check_topology_virtualized,
         kind=KIND_MISSING_EVIDENCE),
)
