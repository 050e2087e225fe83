"""GPUDirect RDMA and the NICs for multi-node traffic."""

from __future__ import annotations

import re
from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, Answer
from k3diag.audit.context import AuditContext
from k3diag.audit.facts import attr
from k3diag.model.topology import endpoint_sort_key, path_rank

GDR_REQUEST = (
    "lsmod | grep -e nvidia_peermem -e nv_peer_mem ; nvidia-smi topo -m ; ibv_devinfo ; "
    "a two-node run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET ./build/all_reduce_perf -b 8M -e 8G -f 2 -g 8 "
    "(look for NET/IB/.../GDRDMA)"
)
NIC_REQUEST = (
    "ibv_devinfo ; ibstat ; lspci | grep -i -e mellanox -e infiniband -e ethernet ; nvidia-smi topo -m ; "
    "and ask which network switch (model, port speed) the nodes connect to"
)
_PEERMEM_RE = re.compile(r"\b(nvidia_peermem|nv_peer_mem)\b")
_GDR_ENABLED_RE = re.compile(r"GPU Direct RDMA Enabled|GDRDMA|DMA-BUF enabled|dmabuf.*enabled", re.I)
_GDR_DISABLED_RE = re.compile(r"GPU Direct RDMA Disabled", re.I)
_NET_IB_RE = re.compile(r"NET/IB\s*:\s*Using\s*(?P<devs>.*)|via NET/IB|Using network IB")
_NET_SOCKET_RE = re.compile(r"via NET/Socket|NET/IB\s*:\s*No device found|Using network Socket", re.I)
_NIC_CLASS_RE = re.compile(r"Infiniband controller|Ethernet controller|Network controller", re.I)
_RDMA_NIC_RE = re.compile(r"Mellanox|ConnectX|BlueField|InfiniBand|Omni-Path|Broadcom.*(?:NetXtreme-E|BCM57)|"
                          r"Intel.*E810|EFA|Cornelis|Thor", re.I)


def _nearest_nic_paths(machine: Any) -> dict[str, tuple[str, Any]]:
    """For each GPU, its best path class to any NIC, and the link that shows it."""
    best: dict[str, tuple[str, Any]] = {}
    for (gpu, nic), link in facts.nic_links(machine).items():
        if link.path is None:
            continue
        if gpu not in best or path_rank(link.path) < path_rank(best[gpu][1].path):
            best[gpu] = (nic, link)
    return best


def _gdr_connections(machine: Any) -> tuple[list[Any], list[Any]]:
    """NCCL NET connections with and without GDRDMA."""
    with_gdr: list[Any] = []
    without: list[Any] = []
    for run in facts.nccl_runs(machine):
        for conn in attr(run, "connections", []) or []:
            if str(attr(conn, "transport") or "").upper() != "NET":
                continue
            via = str(attr(conn, "via") or "")
            (with_gdr if "GDRDMA" in via.upper() else without).append(conn)
    return with_gdr, without


def answer_gpudirect_rdma(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="gpudirect-rdma",
        question="Is GPUDirect RDMA supported (the NIC reads and writes GPU memory directly)?",
        seed="是否支持 GPU Direct RDMA",
        verdict=UNKNOWN,
        summary="",
    )
    nearest = _nearest_nic_paths(machine)
    with_gdr, without = _gdr_connections(machine)
    enabled_lines = facts.raw_text_search(ctx.evidence, _GDR_ENABLED_RE)
    disabled_lines = facts.raw_text_search(ctx.evidence, _GDR_DISABLED_RE)
    peermem = facts.raw_text_search(ctx.evidence, _PEERMEM_RE)
    refs: list = []
    for gpu, (nic, link) in sorted(nearest.items(), key=lambda item: endpoint_sort_key(item[0])):
        answer.details.append(f"{gpu}: nearest NIC {nic} via {link.path}")
    near = [gpu for gpu, (_, link) in nearest.items() if link.path in facts.GOOD_PCIE_PATHS]
    far = [gpu for gpu, (_, link) in nearest.items() if link.path not in facts.GOOD_PCIE_PATHS]
    refs.extend(link.source for _, link in list(nearest.values())[:2])
    if peermem:
        answer.details.append("the peer-memory kernel module appears in the evidence: " + peermem[0].text)
        refs.append(peermem[0])
    answer.data = {"gpus_near_nic": sorted(near, key=endpoint_sort_key), "gpus_far_from_nic":
                   sorted(far, key=endpoint_sort_key), "nccl_gdrdma_connections": len(with_gdr),
                   "nccl_net_without_gdrdma": len(without), "peermem_seen": bool(peermem)}
    if with_gdr or (enabled_lines and not disabled_lines):
        answer.verdict = PASS
        refs.extend([attr(c, "source") for c in with_gdr[:2]] + enabled_lines[:2])
        answer.summary = ("Yes: NCCL moved data with GPUDirect RDMA (GDRDMA)"
                          + (f" on {len(with_gdr)} connection(s)" if with_gdr else "") + ".")
        if far:
            answer.details.append(f"{', '.join(sorted(far, key=endpoint_sort_key))} have no NIC on their own "
                                  "switch or root complex: their RDMA traffic crosses the CPU")
    elif disabled_lines or (without and near):
        answer.verdict = WARN if not disabled_lines else FAIL
        refs.extend(disabled_lines[:2] + [attr(c, "source") for c in without[:2]])
        answer.summary = ("NCCL's network traffic does not use GPUDirect RDMA"
                          + (" (it reported GPU Direct RDMA disabled)" if disabled_lines else "")
                          + ": data is staged through host memory.")
        answer.request = ("load the peer-memory module (`sudo modprobe nvidia_peermem`), check ACS/IOMMU on the NIC "
                          "path, and re-run: " + GDR_REQUEST)
    elif near:
        answer.verdict = WARN
        answer.summary = (f"Probably: {len(near)} GPU(s) share a PCIe switch with a NIC (PIX/PXB), which GPUDirect "
                          "RDMA needs, but no multi-node run in the bundle shows it in use.")
        answer.request = GDR_REQUEST
    elif far:
        answer.verdict = WARN
        answer.summary = ("Unlikely to perform: every GPU reaches its nearest NIC only through the CPU "
                          "(PHB/NODE/SYS), so RDMA traffic crosses the host bridge.")
        answer.request = GDR_REQUEST
    else:
        nics = attr(machine, "nics", {}) or {}
        answer.summary = ("The bundle shows NICs but not their distance to the GPUs."
                          if nics else "The bundle shows no RDMA NIC and no multi-node NCCL run.")
        answer.request = GDR_REQUEST
    answer.evidence = facts.dedupe_refs(refs, limit=8)
    return answer


def _nic_devices(machine: Any) -> list[Any]:
    out = []
    for device in attr(machine, "pci", []) or []:
        text = f"{attr(device, 'class_name') or ''} {attr(device, 'description') or ''}"
        if _NIC_CLASS_RE.search(text):
            out.append(device)
    return out


def answer_multi_node_network(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="multi-node-network",
        question="Which NICs (and switches) carry multi-node traffic?",
        seed="跨節點網絡使用什麼網卡和交換機",
        verdict=UNKNOWN,
        summary="",
    )
    nics = attr(machine, "nics", {}) or {}
    devices = _nic_devices(machine)
    ib_lines = facts.raw_text_search(ctx.evidence, _NET_IB_RE)
    socket_lines = facts.raw_text_search(ctx.evidence, _NET_SOCKET_RE)
    runs = facts.nccl_runs(machine)
    net_transports = {str(attr(c, "via") or "").split("/")[1] if "/" in str(attr(c, "via") or "") else ""
                      for run in runs for c in (attr(run, "connections", []) or [])
                      if str(attr(c, "transport") or "").upper() == "NET"}
    refs: list = []
    names = sorted(nics, key=endpoint_sort_key)
    for name in names:
        nic = nics[name]
        device = attr(nic, "device")
        numa = attr(nic, "numa_node")
        answer.details.append(f"{name}" + (f" = {device}" if device and device != name else "")
                              + (f", NUMA node {numa}" if numa is not None else ""))
        refs.extend(facts.refs_of(nic)[:1])
    rdma_devices = []
    for device in devices:
        link = attr(device, "link")
        width = attr(link, "sta_width") if link is not None else None
        speed = attr(link, "sta_speed_gts") if link is not None else None
        answer.details.append(f"{attr(device, 'bdf')}: {attr(device, 'description')}"
                              + (f" (PCIe x{width} {speed:g} GT/s)" if width and speed else ""))
        refs.append(attr(device, "source"))
        if _RDMA_NIC_RE.search(str(attr(device, "description") or "")):
            rdma_devices.append(device)
    rdma_names = [n for n in names if re.match(r"(mlx\d|ibp|bnxt_re|irdma|efa|rdma|hfi)", str(
        attr(nics[n], "device") or n))]
    answer.details.append("switch: the network switch is not visible from a server; ask the vendor for the model "
                          "and port speed")
    answer.data = {"nics": names, "rdma_nics": rdma_names, "nic_pci_devices": [attr(d, "bdf") for d in devices],
                   "nccl_net": sorted(t for t in net_transports if t)}
    if ib_lines:
        refs.append(ib_lines[0])
    if socket_lines:
        refs.append(socket_lines[0])
    answer.evidence = facts.dedupe_refs(refs, limit=8)
    uses_socket = "Socket" in net_transports or bool(socket_lines)
    uses_ib = "IB" in net_transports or bool(ib_lines)
    if uses_socket and not uses_ib:
        answer.verdict = WARN if (rdma_names or rdma_devices) else FAIL
        answer.summary = ("NCCL fell back to TCP sockets (NET/Socket) for inter-node traffic"
                          + (" although RDMA NICs are present" if rdma_names or rdma_devices else
                             ": no RDMA NIC was found") + "; multi-node tensor or expert parallelism will crawl.")
        answer.request = NIC_REQUEST
    elif rdma_names or rdma_devices or uses_ib:
        answer.verdict = PASS
        count = len(rdma_names) or len(rdma_devices)
        answer.summary = (f"{count} RDMA-capable NIC(s)" if count else "RDMA NICs")\
            + (" and NCCL used them (NET/IB)" if uses_ib else "") + \
            "; the switch is not in the evidence: ask the vendor for it."
        gpus = len(facts.gpus(machine))
        if count and gpus and count * 2 < gpus:
            answer.verdict = WARN
            answer.summary = (f"Only {count} RDMA-capable NIC(s) for {gpus} GPUs: fewer than one per two GPUs limits "
                              "multi-node bandwidth" + (" (NCCL used them: NET/IB)" if uses_ib else "")
                              + "; the switch is not in the evidence: ask the vendor for it.")
    elif names or devices:
        answer.verdict = WARN
        answer.summary = "Only plain Ethernet NICs are visible; no RDMA NIC for multi-node GPU traffic."
        answer.request = NIC_REQUEST
    else:
        answer.summary = "The bundle shows no NIC."
        answer.request = NIC_REQUEST
    return answer
