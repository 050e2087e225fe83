"""NIC and GPUDirect RDMA findings: RDMA ports down or slower than their peers, MTU and link-layer mismatches,
GPUDirect RDMA impossible (no peer-memory module, no DMA-BUF) or not eligible for a GPU (its NICs are beyond
`NCCL_NET_GDR_LEVEL`), the NIC each GPU should use, and NVSwitch management ports left out of the NIC count.

Ports are compared only with ports of the same link layer, and NVSwitch management ports (HGX B200 mlx5 devices
whose VPD says `SW_MNG`) are never compared or counted: they are the NVLink fabric's, not the network's.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.analyze.gdr import gdr_report
from k3diag.model.fabric import IbPort
from k3diag.model.machine import Machine
from k3diag.model.words import counted

_PORT_CONFIRM = "ibstat; ibv_devinfo; cat /sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer}"


def _network_ports(machine: Machine) -> list[IbPort]:
    management = {nic.rdma_device for nic in machine.nics.values() if nic.management_port}
    return [port for _, port in sorted(machine.fabric.ib_ports.items()) if port.device not in management]


def check_management_ports(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    ports = [nic for nic in machine.nics.values() if nic.management_port]
    if not ports:
        return
    names = ", ".join(sorted(nic.rdma_device for nic in ports))
    network = [nic for nic in machine.nics.values() if not nic.management_port]
    yield Finding(
        id="nic-management-port",
        severity="info",
        subjects=sorted(nic.name for nic in ports),
        title=f"{names} {'is an NVSwitch management port' if len(ports) == 1 else 'are NVSwitch management ports'}, "
              "not network NICs",
        explanation=(f"The Vital Product Data of {names} says `SW_MNG`: on HGX B200-class boards these ConnectX "
                     "functions connect the host to the NVSwitch trays for Fabric Manager and NVLSM. They carry no "
                     f"network traffic and are left out of NIC counts, GPU-NIC pairing and GPUDirect RDMA "
                     f"({counted(len(network), 'network NIC')} {'remains' if len(network) == 1 else 'remain'}). Do not pass them through to a VM or bind them to "
                     "vfio-pci: Fabric Manager needs them."),
        evidence=[nic.management_source for nic in ports if nic.management_source is not None][:4],
        confirm_with="for d in /sys/class/infiniband/*; do echo $d; grep -a -o SW_MNG $d/device/vpd; done",
        remedy="Nothing to fix; size the network from the other NICs.",
        data={"management_ports": sorted(nic.rdma_device for nic in ports)},
    )


def check_port_down(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    ports = _network_ports(machine)
    active = [port for port in ports if port.state == "active"]
    hca = {nic.rdma_device: nic.hca_type for nic in machine.nics.values()}
    for port in ports:
        if port.state != "down":
            continue
        peers = [p for p in active if p.link_layer == port.link_layer or None in (p.link_layer, port.link_layer)]
        # A down port among active ones of the same adapter model is a rail lost (cable, transceiver, switch
        # port); a port disabled on purpose, or of another adapter (a spare Ethernet card), only warns.
        twins = [p for p in peers if hca.get(p.device) and hca.get(p.device) == hca.get(port.device)]
        disabled = (port.physical_state or "").lower() == "disabled"
        yield Finding(
            id="ib-port-down",
            severity="fail" if twins and not disabled else "warn",
            subjects=[port.key],
            title=f"RDMA port {port.key} is down"
                  + (f" ({port.physical_state})" if port.physical_state else "")
                  + (f" while {counted(len(peers), 'other port')} {'is' if len(peers) == 1 else 'are'} active" if peers else ""),
            explanation=(
                f"{port.device} port {port.port} reports state Down"
                + (f", physical state {port.physical_state}" if port.physical_state else "")
                + ". NCCL skips it, so the GPUs nearest to it send their multi-node traffic through another NIC "
                "(across PCIe switches or the CPU) and that rail's bandwidth is lost."
                + ("" if peers else " No port of this host is active: a host with only down ports has no RDMA "
                   "network (if this NIC is not meant to be cabled, ignore it).")
            ),
            evidence=[port.source] if port.source is not None else [],
            confirm_with=_PORT_CONFIRM,
            remedy=("Check the cable and the switch port (`Physical state: Disabled` means the port is disabled "
                    "on this side or the switch; `Polling` means no link partner), the subnet manager for "
                    f"InfiniBand, and `mlxlink -d {port.device} -p {port.port}` for the link's own view."),
            data=port.to_json(),
        )


def check_rate_below_peers(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    ports = [p for p in _network_ports(machine) if p.state == "active" and p.rate_gbps]
    by_layer: dict[str | None, list[IbPort]] = {}
    for port in ports:
        by_layer.setdefault(port.link_layer, []).append(port)
    for layer, group in by_layer.items():
        if len(group) < 2:
            continue
        typical, count = Counter(p.rate_gbps for p in group).most_common(1)[0]
        best = max(p.rate_gbps or 0 for p in group)
        reference = typical if count > 1 else best
        for port in group:
            if (port.rate_gbps or 0) >= reference:
                continue
            yield Finding(
                id="ib-port-rate-below-peers",
                severity="warn",
                subjects=[port.key],
                title=f"RDMA port {port.key} runs at {port.rate_gbps:g} Gb/s where its peers run at {reference:g}",
                explanation=(f"The other active {layer or 'RDMA'} ports on this host run at {reference:g} Gb/s; "
                             f"{port.key} trained at {port.rate_gbps:g} Gb/s ({port.rate_text or 'rate as printed'}). "
                             "A collective over all rails runs at the slowest rail's pace, so this one port caps "
                             "the whole node's multi-node bandwidth."),
                evidence=[ref for ref in (port.source,) if ref is not None],
                confirm_with=_PORT_CONFIRM + "; mlxlink -d " + port.device,
                remedy=("Reseat or replace the cable/transceiver, check the switch port's configured speed, and "
                        "compare `mlxlink` on both ends; a lower width (2X instead of 4X) points at a bad lane."),
                data={"rate_gbps": port.rate_gbps, "peers_gbps": reference},
            )


def check_mtu_link_layer(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    ports = [p for p in _network_ports(machine) if p.state == "active"]
    layers = Counter(p.link_layer for p in ports if p.link_layer)
    if len(layers) > 1:
        minority = min(layers, key=lambda layer: layers[layer])
        odd = [p for p in ports if p.link_layer == minority]
        yield Finding(
            id="ib-link-layer-mixed",
            severity="warn",
            subjects=sorted(p.key for p in odd),
            title=f"Active RDMA ports mix link layers: {', '.join(f'{n} {l}' for l, n in sorted(layers.items()))}",
            explanation=("Some active ports run InfiniBand and others Ethernet (RoCE). NCCL uses both kinds unless "
                         "told otherwise, and InfiniBand and RoCE rails do not talk to each other: ranks on "
                         "different fabrics fail to connect or fall back to sockets. A storage or management port on "
                         "Ethernet is fine if NCCL_IB_HCA leaves it out."),
            evidence=[p.source for p in odd if p.source is not None][:4],
            confirm_with="ibv_devinfo | grep -e hca_id -e link_layer",
            remedy=(f"Set NCCL_IB_HCA to the compute rails only (`NCCL_IB_HCA="
                    f"{','.join(sorted({p.device for p in ports if p.link_layer != minority}))}` leaves out the "
                    f"{minority} ones), or configure every compute port to the same link layer "
                    f"(`mlxconfig -d {odd[0].device} set LINK_TYPE_P{odd[0].port}=...`: 1 InfiniBand, 2 Ethernet)."),
        )
    by_layer: dict[str | None, list[IbPort]] = {}
    for port in ports:
        if port.active_mtu:
            by_layer.setdefault(port.link_layer, []).append(port)
    for layer, group in by_layer.items():
        mtus = Counter(p.active_mtu for p in group)
        if len(mtus) < 2:
            continue
        typical = mtus.most_common(1)[0][0]
        odd = [p for p in group if p.active_mtu != typical]
        yield Finding(
            id="ib-mtu-mismatch",
            severity="warn",
            subjects=sorted(p.key for p in odd),
            title=f"Active {layer or 'RDMA'} ports disagree on MTU: "
                  + ", ".join(f"{p.key} {p.active_mtu}" for p in odd[:4]) + f" where the others use {typical}",
            explanation=("RDMA messages are cut into MTU-sized packets; a port with a smaller active MTU than its "
                         "peers (often RoCE on an Ethernet MTU of 1500, so 1024) sends four times the packets and "
                         "loses bandwidth, and two ends that disagree negotiate down to the smaller one."),
            evidence=[p.source for p in odd if p.source is not None][:4],
            confirm_with="ibv_devinfo | grep -e hca_id -e active_mtu; ip link show",
            remedy="Raise the MTU of the netdev behind the RoCE port (`ip link set <dev> mtu 9000`, and on the switch) "
                   "so active_mtu reaches 4096; on InfiniBand check the subnet manager's partition MTU.",
            data={"typical": typical, "odd": {p.key: p.active_mtu for p in odd}},
        )


def _no_gdr_nic_subject(names: list[str], of: int) -> str:
    """`GPU3 has no NIC`, `GPU0, GPU1 ... and 2 more have no NIC`, `All 8 GPUs lack a NIC`: never a bare
    `...` standing for GPUs in a title."""
    if len(names) == of and of > 2:
        return f"All {of} GPUs lack a NIC"
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"{shown} {'has' if len(names) == 1 else 'have'} no NIC"


def check_gdr(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    report = gdr_report(machine)
    if report is None or not report.pairs:
        return
    gpus = sorted({pair.gpu for pair in report.pairs})
    peer = machine.fabric.peer_memory
    if report.possible is False:
        evidence = list(peer.sources[:2])
        for run in machine.nccl:
            evidence.extend(g.source for g in run.gdr if not g.enabled and g.source is not None)
        yield Finding(
            id="gdr-not-possible",
            severity="fail",
            subjects=["host"],
            title="GPUDirect RDMA is not possible: no peer-memory module and no DMA-BUF",
            explanation=(f"{report.possible_reason[0].upper()}{report.possible_reason[1:]}. Without one of them the "
                         "NIC cannot read or write GPU memory: NCCL stages every multi-node transfer through host "
                         "memory (no `/GDRDMA` on its NET lines), which costs bandwidth and adds a copy per message."),
            evidence=evidence[:4],
            confirm_with="lsmod | grep -e nvidia_peermem -e nv_peer_mem; cat /sys/module/nvidia_peermem/version",
            remedy=("`modprobe nvidia-peermem` (shipped with the driver since R470; load it at boot via "
                    "/etc/modules-load.d), or use the open kernel modules on a kernel with DMA-BUF (5.12+) and "
                    "NCCL 2.13+; in Kubernetes enable the GPU Operator's `driver.rdma.enabled`."),
        )
    if report.possible is None and peer.checked and not (peer.nvidia_peermem or peer.nv_peer_mem):
        yield Finding(
            id="gdr-peermem-missing",
            severity="warn",
            subjects=["host"],
            title="No peer-memory module is loaded: GPUDirect RDMA depends on DMA-BUF",
            explanation=(f"{report.possible_reason[0].upper()}{report.possible_reason[1:]}. If DMA-BUF is not "
                         "usable either (proprietary kernel modules on an older kernel, NCCL before 2.13, a "
                         "container without the DMA-BUF device), NCCL stages every multi-node transfer through host "
                         "memory. NCCL prints `DMA-BUF is available on GPU device N` at INFO level when it is."),
            evidence=peer.sources[:3],
            confirm_with="lsmod | grep -e nvidia_peermem -e nv_peer_mem; uname -r; "
                         "NCCL_DEBUG=INFO ./all_reduce_perf -g 1 2>&1 | grep -i -e dma-buf -e 'GPU Direct'",
            remedy="`modprobe nvidia-peermem` (and load it at boot), or confirm DMA-BUF in NCCL's INFO output.",
        )
    mapping: list[str] = []
    far: list = []
    for gpu in gpus:
        best = report.best_for(gpu)
        eligible = [p for p in report.pairs_of(gpu) if p.eligible]
        if best is None:
            mapping.append(f"GPU{gpu}: no NIC path known")
            continue
        if best.eligible:
            mapping.append(f"GPU{gpu} -> {best.device} ({best.path})")
        elif best.eligible is None:
            mapping.append(f"GPU{gpu} -> {best.device} ({best.path}, GDR unknown)")
        else:
            mapping.append(f"GPU{gpu} -> {best.device} ({best.path}, no GDR)")
        if eligible or best.eligible is None or report.possible is False:
            continue
        far.append(best)
    if far:
        paths = sorted({pair.path or "" for pair in far}, key=lambda p: (p not in ("SYS", "SOC"), p))
        listing = "; ".join(f"GPU{pair.gpu} -> {pair.device} over {pair.path}" for pair in far)
        subjects = [f"GPU{pair.gpu}" for pair in far]
        yield Finding(
            id="gpu-no-gdr-nic",
            severity="info",
            subjects=subjects,
            title=f"{_no_gdr_nic_subject(subjects, len(gpus))} within GPUDirect RDMA reach (nearest over {'/'.join(paths)})",
            explanation=(f"NCCL uses GPUDirect RDMA only over paths no worse than NCCL_NET_GDR_LEVEL ({report.level}, "
                         f"{report.level_source}). Nearest NICs: {listing}. Traffic of these GPUs to other nodes is "
                         "staged through host memory, or relayed by a GPU next to a NIC (PXN), at lower bandwidth "
                         "than from a GPU under the NIC's PCIe switch. This is how the machine is built: keep "
                         "multi-node ranks on GPUs next to a NIC, or accept the cost."),
            evidence=[pair.source for pair in far if pair.source is not None][:6],
            confirm_with="nvidia-smi topo -m   # GPU rows, NIC columns",
            remedy=("Put a NIC under the same PCIe switch as each GPU (rail-optimized layout), or measure "
                    "`NCCL_NET_GDR_LEVEL=PHB` (it helps on some CPUs, hurts on others)."),
            data={"nearest": [pair.to_json() for pair in far], "level": report.level},
        )
    yield Finding(
        id="gdr-nic-map",
        severity="info",
        subjects=["host"],
        title="GPUDirect RDMA reach per GPU: " + "; ".join(mapping[:4]) + ("; ..." if len(mapping) > 4 else ""),
        explanation=("For every GPU, the NIC NCCL should pair it with (the nearest network NIC) and whether "
                     f"GPUDirect RDMA applies (path within NCCL_NET_GDR_LEVEL {report.level}, {report.level_source}; "
                     f"{report.possible_reason}): " + "; ".join(mapping) + "."
                     + (f" Left out as NVSwitch management ports: {', '.join(n.rdma_device for n in report.management_ports)}."
                        if report.management_ports else "")),
        evidence=[pair.source for pair in report.pairs if pair.best and pair.source is not None][:8],
        confirm_with="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH ./all_reduce_perf -b 8M -e 1G -g 8  "
                     "# NET/IB/x/GDRDMA per channel",
        remedy="Run one rank per GPU and let NCCL pick these NICs (leave NCCL_IB_HCA unset or list them all).",
        data={"level": report.level, "possible": report.possible, "pairs": report.to_json()},
    )


def _only(finding_id: str, check):
    def run(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
        return (finding for finding in check(machine, earlier) if finding.id == finding_id)
    run.__name__ = f"{check.__name__}[{finding_id}]"
    return run


RULES = (
    Rule("nic-management-port", "info", "NVSwitch management ports are not network NICs", check_management_ports, kind="info"),
    Rule("ib-port-down", "fail", "An RDMA port is down", check_port_down, kind="fault"),
    Rule("ib-port-rate-below-peers", "warn", "An RDMA port is slower than its peers", check_rate_below_peers, kind="fault"),
    Rule("ib-link-layer-mixed", "warn", "Active RDMA ports mix InfiniBand and Ethernet",
         _only("ib-link-layer-mixed", check_mtu_link_layer), kind="misconfiguration"),
    Rule("ib-mtu-mismatch", "warn", "Active RDMA ports disagree on MTU", _only("ib-mtu-mismatch", check_mtu_link_layer), kind="misconfiguration"),
    Rule("gdr-not-possible", "fail", "GPUDirect RDMA impossible: no peer-memory module or DMA-BUF",
         _only("gdr-not-possible", check_gdr), kind="misconfiguration"),
    Rule("gdr-peermem-missing", "warn", "No peer-memory module; GPUDirect RDMA depends on DMA-BUF",
         _only("gdr-peermem-missing", check_gdr), kind="misconfiguration"),
    Rule("gpu-no-gdr-nic", "info", "A GPU has no NIC within GPUDirect RDMA reach", _only("gpu-no-gdr-nic", check_gdr), kind="design"),
    Rule("gdr-nic-map", "info", "The NIC each GPU should use, and whether GPUDirect RDMA applies",
         _only("gdr-nic-map", check_gdr), kind="info"),
)
