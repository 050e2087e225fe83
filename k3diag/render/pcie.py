"""Each GPU's PCIe path from its root port down, for the terminal report's details."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3diag.model.machine import Machine
    from k3diag.render.plain import Out


def _hop_text(step: dict) -> str:
    link = step.get("link") or {}
    role = step.get("role") or "device"
    text = f"{role} {step['bdf']}"
    speed, width = link.get("sta_speed_gts"), link.get("sta_width")
    cap_speed, cap_width = link.get("cap_speed_gts"), link.get("cap_width")

    def side(gts, lanes) -> str:
        if gts is not None and lanes is not None:
            return f"{gts:g} GT/s x{lanes}"
        return f"x{lanes}" if lanes is not None else "width not read"

    if width is not None or cap_width is not None:
        text += f" [{side(speed, width)} of {side(cap_speed, cap_width)}]"
    if step.get("acs_redirect"):
        text += " [ACS redirect]"
    return text


def render_pcie_paths(machine: "Machine", out: "Out") -> None:
    if not machine.pci:
        return
    from k3diag.model.pcie_tree import describe_gpu_paths

    try:
        paths = describe_gpu_paths(machine)
    except Exception as exc:  # keep the rest of the report
        machine.note("pcie-tree", f"GPU PCIe paths could not be drawn ({type(exc).__name__}: {exc})")
        return
    paths = [p for p in paths if len(p.get("path") or []) > 1]
    if not paths:
        return
    out.line("PCIe path of each GPU (root port first; [runs at of capable]):", "bold")
    for entry in paths:
        where = []
        if entry.get("numa_node") is not None:
            where.append(f"NUMA {entry['numa_node']}")
        if entry.get("root_complex"):
            where.append(f"root complex {entry['root_complex']}")
        out.line(f"{entry['gpu']} {entry['bdf']}" + (f" ({', '.join(where)})" if where else ""), indent=2)
        out.line(" > ".join(_hop_text(step) for step in entry["path"]), indent=4, wrap=True, hang=2)
        if entry.get("narrowest_hop"):
            out.line(f"narrowest hop: {entry['narrowest_hop']}", "dim", indent=4)
    out.line()
