"""The machine drawing as inline SVG: sockets side by side, each with its PCIe tree below it.

Plain tidy-tree layout (leaves in order, parents centred over their children); every text is
escaped because labels come from the bundle.
"""

from __future__ import annotations

from html import escape
from k3diag.model.words import counted

BOX_W = 104
BOX_H = 46
SLOT_W = 116
LEVEL_H = 84
SOCKET_H = 40
MARGIN = 20
SOCKET_GAP = 36

EDGE_COLOURS = {
    "ok": "#2e7d32",
    "downgraded": "#ef6c00",
    "acs": "#c62828",
    "unknown": "#9e9e9e",
}
EDGE_WORDS = {
    "ok": "link at full width",
    "downgraded": "link downgraded (narrower than it can run)",
    "acs": "ACS redirect: peer traffic sent up to the root complex",
    "unknown": "link state unknown",
}
FILL = {"root": "#eceff1", "bridge": "#eceff1", "switch": "#e3f2fd", "gpu": "#e8f5e9", "nic": "#f3e5f5"}
STROKE = {"root": "#607d8b", "bridge": "#90a4ae", "switch": "#1565c0", "gpu": "#2e7d32", "nic": "#6a1b9a"}
_KIND_ORDER = {"root": 0, "bridge": 1, "switch": 2, "gpu": 3, "nic": 4}


def _t(text: object) -> str:
    from k3diag.render.escape import escape_terminal

    return escape(escape_terminal(text), quote=True)  # control characters from the bundle shown, not written


def render_svg(data: dict) -> str:
    sockets = data.get("sockets") or []
    nodes = {node["id"]: node for node in data.get("nodes") or []}
    if not sockets or not nodes:
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="420" height="60" role="img" '
                'aria-label="no topology"><text x="10" y="35" font-size="14" fill="#555">'
                'No GPU topology in the evidence to draw.</text></svg>')
    children: dict[str, list[str]] = {}
    for node in nodes.values():
        parent = node.get("parent") or node.get("socket")
        children.setdefault(parent, []).append(node["id"])
    for key in children:
        children[key].sort(key=lambda nid: (_KIND_ORDER.get(nodes[nid]["kind"], 9), _natural(nodes[nid]["label"])))

    # Sockets are stacked as rows (a dual-socket 8-GPU server stays about 600 px wide, readable
    # beside the checklist); each row is its socket's tree laid out left to right.
    positions: dict[str, tuple[float, float]] = {}
    rows: list[tuple[dict, float, float, float]] = []  # socket, top, bottom, right edge
    top = MARGIN + 18

    def depth_of(node_id: str) -> int:
        kids = children.get(node_id, [])
        return 1 + max((depth_of(kid) for kid in kids), default=0)

    nvlink = data.get("nvlink")
    width = 560
    for socket in sockets:
        cursor = MARGIN
        levels = max((depth_of(kid) for kid in children.get(socket["id"], [])), default=1)

        def place(node_id: str, depth: int) -> float:
            nonlocal cursor
            kids = children.get(node_id, [])
            if not kids:
                x = cursor + SLOT_W / 2
                cursor += SLOT_W
            else:
                xs = [place(kid, depth + 1) for kid in kids]
                x = (xs[0] + xs[-1]) / 2
            positions[node_id] = (x, top + SOCKET_H + (depth - 1) * LEVEL_H + 38)
            return x

        for kid in children.get(socket["id"], []):
            place(kid, 1)
        right = max(cursor, MARGIN + SLOT_W)
        bottom = top + SOCKET_H + levels * LEVEL_H + (34 if nvlink else 0)
        rows.append((socket, top, bottom, right))
        width = max(width, int(right + MARGIN))
        top = bottom + SOCKET_GAP
    height = int(top - SOCKET_GAP + 150)

    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'style="max-width:100%;height:auto" role="img" aria-label="machine topology" '
        f'font-family="DejaVu Sans, Arial, sans-serif">'
    ]
    socket_tops: dict[str, float] = {}
    for socket, row_top, _bottom, right in rows:
        socket_tops[socket["id"]] = row_top
        out.append(f'<rect x="{MARGIN}" y="{row_top:.0f}" width="{right - MARGIN:.0f}" height="{SOCKET_H}" rx="6" '
                   f'fill="#37474f"/>')
        out.append(f'<text x="{(MARGIN + right) / 2:.0f}" y="{row_top + 25:.0f}" text-anchor="middle" font-size="14" '
                   f'font-weight="bold" fill="#ffffff">{_t(socket["label"])}</text>')
    # GPU pairs across sockets: a dashed line joining the socket bars down the left edge
    crossing = data.get("crossing") or {}
    pairs = crossing.get("pairs") or 0
    if pairs and len(rows) > 1:
        x = MARGIN - 10
        y1 = rows[0][1] + SOCKET_H / 2
        y2 = rows[-1][1] + SOCKET_H / 2
        out.append(f'<path d="M{MARGIN},{y1:.0f} H{x} V{y2:.0f} H{MARGIN}" fill="none" stroke="#6a1b9a" '
                   f'stroke-width="5" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{MARGIN}" y="{MARGIN + 6}" font-size="12" fill="#6a1b9a">SYS: {counted(pairs, "GPU pair")} '
                   f'cross the CPU interconnect (UPI/xGMI)</text>')
    # edges
    for edge in data.get("edges") or []:
        parent, child = edge["from"], edge["to"]
        if child not in positions:
            continue
        cx, cy_mid = positions[child]
        if parent in positions:
            px, py_mid = positions[parent]
            py = py_mid + BOX_H / 2
        elif parent in socket_tops:
            px, py = cx, socket_tops[parent] + SOCKET_H
        else:
            continue
        cy = cy_mid - BOX_H / 2
        state = edge.get("state") or "unknown"
        colour = EDGE_COLOURS.get(state, EDGE_COLOURS["unknown"])
        dash = ' stroke-dasharray="7 4"' if state in ("acs", "unknown") else ""
        widthpx = 4 if state in ("downgraded", "acs") else 2.5
        out.append(f'<path d="M{px:.0f},{py:.0f} C{px:.0f},{(py + cy) / 2:.0f} {cx:.0f},{(py + cy) / 2:.0f} '
                   f'{cx:.0f},{cy:.0f}" fill="none" stroke="{colour}" stroke-width="{widthpx}"{dash}>'
                   f'<title>{_t(EDGE_WORDS.get(state, state))}</title></path>')
        if edge.get("label"):
            out.append(f'<text x="{cx + 5:.0f}" y="{(py + cy) / 2 + 4:.0f}" font-size="11" fill="{colour}">'
                       f'{_t(edge["label"])}</text>')
    # nodes
    for node_id, (x, y) in positions.items():
        node = nodes[node_id]
        kind = node.get("kind", "bridge")
        state = node.get("state")
        stroke = EDGE_COLOURS["downgraded"] if state == "downgraded" else STROKE.get(kind, "#607d8b")
        fill = "#fff3e0" if state == "downgraded" else FILL.get(kind, "#eceff1")
        tooltip = node.get("name") or node.get("sub") or node["label"]
        out.append(f'<g><title>{_t(tooltip)}</title>'
                   f'<rect x="{x - BOX_W / 2:.0f}" y="{y - BOX_H / 2:.0f}" width="{BOX_W}" height="{BOX_H}" rx="6" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="2"/>'
                   f'<text x="{x:.0f}" y="{y - 4:.0f}" text-anchor="middle" font-size="13" font-weight="bold" '
                   f'fill="#212121">{_t(_clip(node["label"], 16))}</text>'
                   f'<text x="{x:.0f}" y="{y + 13:.0f}" text-anchor="middle" font-size="10.5" fill="#424242">'
                   f'{_t(_clip(node.get("sub") or "", 20))}</text></g>')
    # NVLink bar under each row's GPUs
    if nvlink:
        for socket, _row_top, bottom, _right in rows:
            row_gpus = [n for n in positions if nodes[n].get("kind") == "gpu" and nodes[n].get("socket") == socket["id"]]
            if not row_gpus:
                continue
            xs = [positions[n][0] for n in row_gpus]
            y = max(positions[n][1] for n in row_gpus) + BOX_H / 2 + 8
            x1, x2 = min(xs) - BOX_W / 2, max(xs) + BOX_W / 2
            out.append(f'<rect x="{x1:.0f}" y="{y:.0f}" width="{x2 - x1:.0f}" height="22" rx="11" '
                       f'fill="#c8e6c9" stroke="#2e7d32" stroke-width="2"/>')
            out.append(f'<text x="{(x1 + x2) / 2:.0f}" y="{y + 15:.0f}" text-anchor="middle" font-size="12" '
                       f'fill="#1b5e20">{_t(nvlink)}</text>')
    # legend
    ly = height - 128
    out.append(f'<text x="{MARGIN}" y="{ly}" font-size="12" font-weight="bold" fill="#212121">Links</text>')
    for row, state in enumerate(("ok", "downgraded", "acs", "unknown")):
        y = ly + 18 + row * 18
        dash = ' stroke-dasharray="7 4"' if state in ("acs", "unknown") else ""
        out.append(f'<line x1="{MARGIN}" y1="{y - 4}" x2="{MARGIN + 36}" y2="{y - 4}" stroke="{EDGE_COLOURS[state]}" '
                   f'stroke-width="4"{dash}/>')
        out.append(f'<text x="{MARGIN + 44}" y="{y}" font-size="11.5" fill="#212121">{_t(EDGE_WORDS[state])}</text>')
    y = ly + 18 + 4 * 18
    out.append(f'<line x1="{MARGIN}" y1="{y - 4}" x2="{MARGIN + 36}" y2="{y - 4}" stroke="#6a1b9a" stroke-width="4" '
               f'stroke-dasharray="6 4"/>')
    source = data.get("source")
    basis = {
        "pcie-tree": "drawn from the PCIe tree (lspci/sysfs)",
        "mixed": "drawn from the PCIe tree where the bundle has it, else from NUMA nodes and path classes",
    }.get(str(source), "drawn from NUMA nodes and path classes (no PCIe tree in the bundle)")
    out.append(f'<text x="{MARGIN + 44}" y="{y}" font-size="11.5" fill="#212121">SYS: GPU pairs across CPU sockets'
               f'</text>')
    out.append(f'<text x="{MARGIN}" y="{y + 20}" font-size="11" font-style="italic" fill="#546e7a">{_t(basis)}</text>')
    out.append("</svg>")
    return "".join(out)


def _clip(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _natural(text: str) -> tuple:
    import re

    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(text)))
