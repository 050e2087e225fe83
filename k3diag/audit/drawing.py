"""What the machine drawing shows: CPU sockets, root ports, switches, GPUs and NICs, and link states.

Built from the PCIe tree when the model has one (devices joined by `parent`), else from each
GPU's NUMA node and the path classes between GPUs (PIX/PXB groups drawn as an inferred
switch). The result is plain data; `audit.svg` turns it into a picture.
"""

from __future__ import annotations

from typing import Any

from k3diag.audit import facts
from k3diag.audit.facts import attr
from k3diag.model.topology import endpoint_sort_key, gpu_index

OK = "ok"
DOWNGRADED = "downgraded"
ACS = "acs"
UNKNOWN = "unknown"


def _socket_label(machine: Any, node: int | None) -> tuple[str, str]:
    if node is None:
        return "socket-unknown", "CPU / NUMA node unknown"
    package = facts.package_of_numa(machine, node)
    if package is not None:
        return f"socket-{package}", f"CPU socket {package}"
    return f"numa-{node}", f"NUMA node {node}"


def _gpu_sub(machine: Any, gpu: Any) -> tuple[str, str]:
    """Link text under a GPU box, and whether the link is downgraded."""
    pcie = attr(gpu, "pcie")
    cur, top = attr(pcie, "width_current"), attr(pcie, "width_max")
    gen = attr(pcie, "gen_max") or attr(pcie, "gen_current")
    device = facts.pci_device(machine, attr(gpu, "bus_id"))
    link = attr(device, "link") if device is not None else None
    if cur is None and link is not None:
        cur, top = attr(link, "sta_width"), attr(link, "cap_width")
        gen = gen or facts.gen_from_speed(attr(link, "cap_speed_gts"))
    if cur is None:
        return "link unknown", UNKNOWN
    text = f"x{cur}" + (f" Gen{gen}" if gen else "")
    if top and cur < top:
        return text + f" (of x{top})", DOWNGRADED
    return text, OK


def drawing_data(machine: Any, findings: list[Any] | None = None) -> dict:
    gpus = facts.gpus(machine)
    links = facts.gpu_links(machine)
    nv = [link for link in links.values() if link.nvlinks]
    nvlink_text = None
    if nv:
        fewest = min(link.nvlinks for link in nv)
        same = len({link.nvlinks for link in nv}) == 1
        nvlink_text = (f"NVLink: NV{fewest}{'' if same else '+'} between every GPU pair" if len(nv) == len(links)
                       else f"NVLink on {len(nv)} of {len(links)} GPU pairs")
    crossings = sorted({tuple(sorted((_gpu_socket(machine, a), _gpu_socket(machine, b))))
                        for (a, b), link in links.items() if link.path == "SYS"})
    sys_pairs = sum(1 for link in links.values() if link.path == "SYS")
    data: dict = {"sockets": [], "nodes": [], "edges": [], "nvlink": nvlink_text,
                  "crossing": {"pairs": sys_pairs, "sockets": [list(c) for c in crossings]}, "source": "none"}
    if not gpus:
        return data
    in_tree = [gpu for gpu in gpus if facts.pci_chain(machine, attr(gpu, "bus_id"))[1:]]
    rest = [gpu for gpu in gpus if gpu not in in_tree]
    if in_tree:
        _from_tree(machine, in_tree, data)
    if rest or not in_tree:
        # GPUs the PCIe tree does not reach hang under their NUMA node (PIX/PXB groups under an
        # inferred switch), so a partial lspci never hides a GPU from the picture.
        _from_numa(machine, rest, links, data)
    data["source"] = "pcie-tree" if not rest else ("mixed" if in_tree else "numa")
    return data


def _gpu_socket(machine: Any, label: str) -> str:
    index = gpu_index(label)
    gpu = (attr(machine, "gpus", {}) or {}).get(index)
    node = facts.gpu_numa(machine, gpu) if gpu is not None else None
    return _socket_label(machine, node)[0]


def _add_socket(data: dict, socket_id: str, label: str) -> None:
    if not any(s["id"] == socket_id for s in data["sockets"]):
        data["sockets"].append({"id": socket_id, "label": label})


def _add_node(data: dict, node_id: str, kind: str, label: str, parent: str | None, socket: str,
              sub: str = "", state: str = OK) -> None:
    if any(n["id"] == node_id for n in data["nodes"]):
        return
    data["nodes"].append({"id": node_id, "kind": kind, "label": label, "sub": sub, "parent": parent,
                          "socket": socket, "state": state})


def _add_edge(data: dict, parent: str, child: str, state: str, label: str = "") -> None:
    for edge in data["edges"]:
        if edge["from"] == parent and edge["to"] == child:
            return
    data["edges"].append({"from": parent, "to": child, "state": state, "label": label})


def _from_tree(machine: Any, gpus: list[Any], data: dict) -> None:
    endpoints: list[tuple[str, str, Any]] = [("gpu", gpu.label, gpu) for gpu in gpus]
    for name, nic in sorted((attr(machine, "nics", {}) or {}).items(), key=lambda item: endpoint_sort_key(item[0])):
        if attr(nic, "bus_id"):
            endpoints.append(("nic", name, nic))
    for kind, label, thing in endpoints:
        chain = facts.pci_chain(machine, attr(thing, "bus_id"))
        if not chain:
            continue
        node = attr(thing, "numa_node") if kind == "nic" else facts.gpu_numa(machine, thing)
        if node is None:
            node = next((attr(d, "numa_node") for d in reversed(chain) if attr(d, "numa_node") is not None), None)
        socket_id, socket_label = _socket_label(machine, node)
        _add_socket(data, socket_id, socket_label)
        # Collapse a switch's downstream ports into the switch (its upstream port) so the picture
        # shows one box per switch; the port's ACS state stays on the edge below it.
        bridges = chain[1:]  # nearest first
        ids: list[tuple[str, Any]] = []
        for position in range(len(bridges) - 1, -1, -1):  # top (root port) first
            device = bridges[position]
            above = bridges[position + 1] if position + 1 < len(bridges) else None
            bdf = str(attr(device, "bdf"))
            role = str(facts.port_role(machine, device) or "").lower()
            if ids and above is not None and "downstream" in role and facts.is_switch_port(above, machine):
                ids.append((ids[-1][0], device))  # same box as its upstream port
                continue
            if above is None:
                kind_b = "root"
            elif facts.is_switch_port(device, machine):
                kind_b = "switch"
            else:
                kind_b = "bridge"
            short = {"root": "root port", "switch": "PCIe switch", "bridge": "bridge"}[kind_b]
            parent_id = ids[-1][0] if ids else socket_id
            ids.append((bdf, device))
            link = attr(device, "link")
            width = attr(link, "sta_width") if link is not None else None
            state = DOWNGRADED if link is not None and _downgraded(link) else OK
            _add_node(data, bdf, kind_b, short, parent_id, socket_id,
                      sub=_short_bdf(bdf) + (f" x{width}" if width else ""), state=state)
            _add_edge(data, parent_id, bdf, state if parent_id != socket_id else OK,
                      f"x{width}" if width and parent_id != socket_id else "")
        leaf_id = label if kind == "gpu" else f"nic:{label}"
        parent_id = ids[-1][0] if ids else socket_id
        port = ids[-1][1] if ids else None
        if kind == "gpu":
            sub, state = _gpu_sub(machine, thing)
            name = str(attr(thing, "name") or "")
        else:
            link = attr(chain[0], "link")
            width = attr(link, "sta_width") if link is not None else None
            sub = (str(attr(thing, "device") or "") + (f" x{width}" if width else "")).strip()
            state = DOWNGRADED if link is not None and _downgraded(link) else OK
            name = ""
        acs = attr(port, "acs") if port is not None else None
        edge_state = ACS if acs is not None and attr(acs, "redirects_p2p") else state
        if any(n["id"] == leaf_id for n in data["nodes"]):
            continue
        _add_node(data, leaf_id, kind, label, parent_id, socket_id, sub=sub, state=state)
        if name:
            data["nodes"][-1]["name"] = name
        _add_edge(data, parent_id, leaf_id, edge_state, sub.split(" ")[0] if sub.startswith("x") else "")


def _short_bdf(bdf: str) -> str:
    return bdf[5:] if bdf.startswith("0000:") else bdf


def _downgraded(link: Any) -> bool:
    if attr(link, "width_downgraded"):
        return True
    cur, cap = attr(link, "sta_width"), attr(link, "cap_width")
    return bool(cur and cap and cur < cap)


def _from_numa(machine: Any, gpus: list[Any], links: dict, data: dict) -> None:
    """No PCIe tree: sockets from NUMA nodes; GPUs joined by PIX/PXB hang under an inferred switch."""
    parent_of: dict[str, str] = {}
    label_to_gpu = {gpu.label: gpu for gpu in gpus}
    # union-find over switch-local pairs
    group = {gpu.label: gpu.label for gpu in gpus}

    def find(x: str) -> str:
        while group[x] != x:
            group[x] = group[group[x]]
            x = group[x]
        return x

    for (a, b), link in links.items():
        if link.path in facts.GOOD_PCIE_PATHS and a in group and b in group:
            group[find(a)] = find(b)
    members: dict[str, list[str]] = {}
    for gpu in gpus:
        members.setdefault(find(gpu.label), []).append(gpu.label)
    for root, labels in sorted(members.items(), key=lambda item: endpoint_sort_key(item[1][0])):
        gpu = label_to_gpu[labels[0]]
        socket_id, socket_label = _socket_label(machine, facts.gpu_numa(machine, gpu))
        _add_socket(data, socket_id, socket_label)
        if len(labels) > 1:
            switch_id = "switch-" + "-".join(labels)
            paths = sorted({links[key].path for key in links if key[0] in labels and key[1] in labels})
            _add_node(data, switch_id, "switch", "PCIe switch", socket_id, socket_id,
                      sub="inferred: " + "/".join(p for p in paths if p))
            _add_edge(data, socket_id, switch_id, OK)
            for label in labels:
                parent_of[label] = switch_id
        else:
            parent_of[labels[0]] = socket_id
    for gpu in gpus:
        socket_id, socket_label = _socket_label(machine, facts.gpu_numa(machine, gpu))
        _add_socket(data, socket_id, socket_label)
        sub, state = _gpu_sub(machine, gpu)
        parent = parent_of.get(gpu.label, socket_id)
        _add_node(data, gpu.label, "gpu", gpu.label, parent, socket_id, sub=sub, state=state)
        if attr(gpu, "name"):
            data["nodes"][-1]["name"] = str(attr(gpu, "name"))
        _add_edge(data, parent, gpu.label, state, sub.split(" ")[0] if sub.startswith("x") else "")
    nic_links = facts.nic_links(machine)
    for name, nic in sorted((attr(machine, "nics", {}) or {}).items(), key=lambda item: endpoint_sort_key(item[0])):
        if any(n["id"] == f"nic:{name}" for n in data["nodes"]):
            continue
        nearest = [(gpu, link) for (gpu, nic_name), link in nic_links.items() if nic_name == name]
        parent = None
        socket_id = None
        for gpu_label, link in sorted(nearest, key=lambda item: endpoint_sort_key(item[0])):
            if link.path in facts.GOOD_PCIE_PATHS:
                node = next((n for n in data["nodes"] if n["id"] == gpu_label), None)
                if node is not None:
                    parent = parent_of.get(gpu_label, node["parent"])
                    socket_id = node["socket"]
                    break
        if socket_id is None:
            node = attr(nic, "numa_node")
            if node is None and nearest:
                close = [g for g, link in nearest if link.path in ("PIX", "PXB", "PHB", "NODE")]
                gpu_obj = (attr(machine, "gpus", {}) or {}).get(gpu_index(close[0])) if close else None
                if gpu_obj is not None:
                    node = facts.gpu_numa(machine, gpu_obj)
            socket_id, socket_label = _socket_label(machine, node)
            _add_socket(data, socket_id, socket_label)
            parent = socket_id
        sub = str(attr(nic, "device") or "")
        _add_node(data, f"nic:{name}", "nic", name, parent, socket_id, sub=sub)
        _add_edge(data, parent or socket_id, f"nic:{name}", OK)
