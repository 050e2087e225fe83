"""Each GPU's PCIe path from its root port down, for the terminal report."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from k3diag.model.machine import Machine


def _hop_text(step: dict) -> str:
    link = step.get("link") or {}
    role = step.get("role") or "device"
    text = f"{role} {step['bdf']}"
    speed, width = link.get("sta_speed_gts"), link.get("sta_width")
    cap_speed, cap_width = link.get("cap_speed_gts"), link.get("cap_width")
    if width is not None or cap_width is not None:
        now = f"{speed:g} GT/s x{width}" if speed is not None and width is not None else f"x{width if width is not None else '?'}"
        cap = f"{cap_speed:g} GT/s x{cap_width}" if cap_speed is not None and cap_width is not None else f"x{cap_width if cap_width is not None else '?'}"
        text += f" [{now} of {cap}]"
    if step.get("acs_redirect"):
        text += " [ACS redirect]"
    return text


def render_pcie_paths(machine: "Machine", console: "Console") -> None:
    if not machine.pci:
        return
    from rich.text import Text

    from k3diag.model.pcie_tree import describe_gpu_paths

    try:
        paths = describe_gpu_paths(machine)
    except Exception as exc:  # keep the rest of the report
        machine.note("pcie-tree", f"GPU PCIe paths could not be drawn ({type(exc).__name__}: {exc})")
        return
    paths = [p for p in paths if len(p.get("path") or []) > 1]
    if not paths:
        return
    console.print(Text("PCIe path of each GPU (root port first; [runs at of capable])", style="bold"))
    for entry in paths:
        where = []
        if entry.get("numa_node") is not None:
            where.append(f"NUMA {entry['numa_node']}")
        if entry.get("root_complex"):
            where.append(f"root complex {entry['root_complex']}")
        head = f"  {entry['gpu']} {entry['bdf']}" + (f" ({', '.join(where)})" if where else "")
        console.print(Text(head))
        console.print(Text("    " + " > ".join(_hop_text(step) for step in entry["path"])))
        if entry.get("narrowest_hop"):
            console.print(Text(f"    narrowest hop: {entry['narrowest_hop']}", style="dim"))
    console.print()
