"""GPUDirect RDMA and the NICs for multi-node traffic."""

from __future__ import annotations

import re
from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, Answer
from k3diag.audit.context import AuditContext
from k3diag.audit.facts import attr
from k3diag.model.topology import endpoint_sort_key, path_rank
from k3diag.model.words import counted

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


def _management_ports(machine: Any) -> set[str]:
    """NICs that are NVSwitch management ports (VPD SW_MNG): never network NICs."""
    return {name for name, nic in (attr(machine, "nics", {}) or {}).items() if attr(nic, "management_port")}


def _nearest_nic_paths(machine: Any) -> dict[str, tuple[str, Any]]:
    """For each GPU, its best path class to any network NIC, and the link that shows it."""
    best: dict[str, tuple[str, Any]] = {}
    management = _management_ports(machine)
    for (gpu, nic), link in facts.nic_links(machine).items():
        if link.path is None or nic in management:
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
    report = _gdr_report(machine)
    if report is not None:
        answer.details = [_gdr_line(report, gpu) for gpu in sorted({p.gpu for p in report.pairs})]
        answer.data["gdr"] = report.to_json()
        answer.data["gdr_level"] = report.level
        answer.data["gdr_possible"] = report.possible
        peer_memory = attr(attr(machine, "fabric"), "peer_memory")
        refs.extend((attr(peer_memory, "sources", []) or [])[:2])
    if report is not None and report.possible is False and not with_gdr:
        answer.verdict = FAIL
        answer.summary = (f"No: {report.possible_reason}, so NCCL stages every multi-node transfer through host "
                          "memory.")
        answer.request = "load the peer-memory module (`sudo modprobe nvidia_peermem`) and re-run: " + GDR_REQUEST
        answer.evidence = facts.dedupe_refs(refs, limit=8)
        return answer
    if with_gdr or (enabled_lines and not disabled_lines):
        answer.verdict = PASS
        refs.extend([attr(c, "source") for c in with_gdr[:2]] + enabled_lines[:2])
        answer.summary = ("Yes: NCCL moved data with GPUDirect RDMA (GDRDMA)"
                          + (f" on {counted(len(with_gdr), 'connection')}" if with_gdr else "") + ".")
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
    elif near and report is not None and report.possible and all(
            (report.best_for(g) and report.best_for(g).eligible) for g in {p.gpu for p in report.pairs}):
        answer.verdict = PASS
        answer.summary = (f"Yes: {report.possible_reason[0].upper()}{report.possible_reason[1:]}, and every GPU has a "
                          f"network NIC within NCCL_NET_GDR_LEVEL {report.level} (the details list which).")
    elif near:
        answer.verdict = WARN
        answer.summary = (f"Probably: {counted(len(near), 'GPU')} {'shares' if len(near) == 1 else 'share'} a PCIe switch with a NIC (PIX/PXB), which GPUDirect "
                          "RDMA needs, but no multi-node run in the bundle shows it in use"
                          + (f" ({report.possible_reason})" if report is not None and report.possible is None else "")
                          + ".")
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


def _gdr_report(machine: Any) -> Any:
    try:
        from k3diag.analyze.gdr import gdr_report

        return gdr_report(machine)
    except Exception:  # the audit answers from the other facts
        return None


def _gdr_line(report: Any, gpu: int) -> str:
    best = report.best_for(gpu)
    if best is None:
        return f"GPU{gpu}: no path to a network NIC is known"
    verdict = {True: "GPUDirect RDMA eligible", False: "no GPUDirect RDMA", None: "GPUDirect RDMA unknown"}
    return f"GPU{gpu}: use {best.device} ({best.path}): {verdict[best.eligible]}: {best.reason}"


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
    management_buses = {attr(nics[n], "bus_id") for n in _management_ports(machine)} - {None}
    devices = [d for d in _nic_devices(machine) if attr(d, "bdf") not in management_buses]
    ib_lines = facts.raw_text_search(ctx.evidence, _NET_IB_RE)
    socket_lines = facts.raw_text_search(ctx.evidence, _NET_SOCKET_RE)
    runs = facts.nccl_runs(machine)
    net_transports = {str(attr(c, "via") or "").split("/")[1] if "/" in str(attr(c, "via") or "") else ""
                      for run in runs for c in (attr(run, "connections", []) or [])
                      if str(attr(c, "transport") or "").upper() == "NET"}
    refs: list = []
    management = sorted(_management_ports(machine), key=endpoint_sort_key)
    names = sorted((n for n in nics if n not in management), key=endpoint_sort_key)
    down_ports: list = []
    for name in names:
        nic = nics[name]
        device = attr(nic, "device")
        numa = attr(nic, "numa_node")
        ports = attr(nic, "ports", []) or []
        port_text = "; ".join(
            f"port {attr(p, 'port')} {attr(p, 'state') or 'state unknown'}"
            + (f" {attr(p, 'rate_gbps'):g} Gb/s" if attr(p, "rate_gbps") else "")
            + (f" {attr(p, 'link_layer')}" if attr(p, "link_layer") else "")
            + (f" MTU {attr(p, 'active_mtu')}" if attr(p, "active_mtu") else "") for p in ports)
        answer.details.append(f"{name}" + (f" = {device}" if device and device != name else "")
                              + (f", NUMA node {numa}" if numa is not None else "")
                              + (f": {port_text}" if port_text else ""))
        refs.extend(facts.refs_of(nic)[:1])
        down_ports.extend(p for p in ports if attr(p, "state") == "down")
    if management:
        answer.details.append(f"not counted as NICs (NVSwitch management ports, VPD SW_MNG): {', '.join(management)}")
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
                   "nccl_net": sorted(t for t in net_transports if t), "management_ports": management,
                   "ports_down": [attr(p, "key") for p in down_ports]}
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
        answer.summary = (counted(count, "RDMA-capable NIC") if count else "RDMA NICs")\
            + (" and NCCL used them (NET/IB)" if uses_ib else "") + \
            "; the switch is not in the evidence: ask the vendor for it."
        gpus = len(facts.gpus(machine))
        if down_ports:
            answer.verdict = WARN
            answer.summary = (f"{counted(count, 'RDMA-capable NIC')}, but {counted(len(down_ports), 'port')} "
                              f"{'is' if len(down_ports) == 1 else 'are'} down ("
                              + ", ".join(attr(p, "key") for p in down_ports[:4]) + "): those rails carry nothing"
                              "; the switch is not in the evidence: ask the vendor for it.")
            refs.extend(attr(p, "source") for p in down_ports[:2])
            answer.evidence = facts.dedupe_refs(refs, limit=8)
        elif count and gpus and count * 2 < gpus:
            answer.verdict = WARN
            answer.summary = (f"Only {counted(count, 'RDMA-capable NIC')} for {gpus} GPUs: fewer than one per two GPUs limits "
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
