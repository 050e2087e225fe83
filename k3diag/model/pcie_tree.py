"""The PCIe tree: who hangs under whom, each GPU's path from its root port down, and what it says.

Built from `machine.pci` on demand (it is cheap), from whichever source gave the parents:
sysfs parent chains and `lspci -tv` set `parent` directly; `lspci -vv` alone gives bridges'
bus ranges (`Bus: primary=.., secondary=.., subordinate=..`), so a device on bus B hangs
under the bridge whose secondary bus is B. Port roles that no source stated are inferred
from the shape of the tree, as the PCIe topology fixes them: a bridge with no parent is a
root port, a bridge under a root port or a downstream port is a switch upstream port, a
bridge under an upstream port is a downstream port.

Each physical link appears twice in the sources: as the LnkCap/LnkSta of the
downstream-facing port above it (root port or switch downstream port) and of the device
below it (endpoint or switch upstream port). A hop joins the two; the link between a
switch's upstream port and its downstream ports is internal to the switch chip and is no hop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.pci import (
    PORT_DOWNSTREAM,
    PORT_ENDPOINT,
    PORT_ROOT,
    PORT_UPSTREAM,
    VENDOR_AMD,
    VENDOR_MELLANOX,
    VENDOR_NVIDIA,
    PciDevice,
)
from k3diag.model.source import SourceRef
from k3diag.model.ids import normalize_bdf
from k3diag.model.shared import shared

# Path classes as `nvidia-smi topo -m` names them, best first.
PATH_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_MAX_DEPTH = 32


@dataclass
class Hop:
    """One physical link on a device's path: the port above it and the device below it."""

    upper: PciDevice | None  # the root port or switch downstream port; None when not in the evidence
    lower: PciDevice  # the endpoint or switch upstream port
    cap_speed_gts: float | None = None  # what both ends can do: the smaller capability
    cap_width: int | None = None
    sta_speed_gts: float | None = None  # what the link runs at
    sta_width: int | None = None
    upper_cap_width: int | None = None
    lower_cap_width: int | None = None
    upper_cap_speed_gts: float | None = None
    lower_cap_speed_gts: float | None = None
    sources: list[SourceRef] = field(default_factory=list)

    @property
    def name(self) -> str:
        upper = self.upper.bdf if self.upper is not None else "?"
        return f"{upper} -> {self.lower.bdf}"


@dataclass
class PairPath:
    """The PCIe path between two devices, classed as `nvidia-smi topo -m` classes it, and why."""

    a: str
    b: str
    path: str | None  # PIX | PXB | PHB | NODE | SYS | None when the evidence cannot tell
    common: str | None  # bdf of the lowest common bridge, if any
    bridges: list[str] = field(default_factory=list)  # bridges P2P traffic between a and b passes
    reason: str = ""


def _bus_span(bridge: PciDevice) -> int:
    return (bridge.subordinate_bus or 255) - (bridge.secondary_bus or 0)


class PcieTree:
    def __init__(self, devices: list[PciDevice]) -> None:
        self.devices: dict[str, PciDevice] = {}
        for device in devices:
            if device.bdf and device.bdf not in self.devices:
                self.devices[device.bdf] = device
        self._by_secondary: dict[tuple[int, int], list[PciDevice]] = {}
        for device in self.devices.values():
            if device.is_bridge and device.secondary_bus is not None:
                domain = device.domain  # a property that parses the bus id: read once a device
                if domain is not None:
                    self._by_secondary.setdefault((domain, device.secondary_bus), []).append(device)
        self._narrowest: dict[tuple[int, int], PciDevice] = {}  # bus -> `_narrowest_bridge` of all
        self._parents: dict[str, str | None] = {}
        self._roles: dict[str, str | None] = {}
        self._children: dict[str, set[str]] | None = None  # parent bdf -> child bdfs, built on first use

    # -- structure ----------------------------------------------------------------
    def device(self, bdf: str | None) -> PciDevice | None:
        if not bdf:
            return None
        return self.devices.get(normalize_bdf(bdf))

    def parent(self, bdf: str) -> str | None:
        if bdf in self._parents:
            return self._parents[bdf]
        device = self.devices.get(bdf)
        parent: str | None = None
        if device is not None:
            if device.parent:
                parent = normalize_bdf(device.parent)
            else:
                domain, bus = device.domain, device.bus  # properties that parse the bus id: read once
                if domain is not None and bus is not None:
                    best = self._narrowest_bridge((domain, bus), bdf)
                    if best is not None:
                        parent = best.bdf
        if parent == bdf:
            parent = None
        self._parents[bdf] = parent
        return parent

    def _narrowest_bridge(self, bus: tuple[int, int], bdf: str) -> PciDevice | None:
        """The first bridge onto `bus` with the narrowest bus range, `bdf` itself left out.

        Remembered per bus: the devices on a bus all ask, and each asking scanned every bridge onto
        it (32 devices x 5,000 bridges in a generated 5,000-root-port output). The first narrowest
        of all is also the first narrowest without any other bridge, so only a bridge asking about
        its own bus needs the second search."""
        bridges = self._by_secondary.get(bus)
        if not bridges:
            return None
        best = self._narrowest.get(bus)
        if best is None:
            best = self._narrowest[bus] = min(bridges, key=_bus_span)
        if best.bdf != bdf:
            return best
        others = [bridge for bridge in bridges if bridge.bdf != bdf]
        return min(others, key=_bus_span) if others else None

    def children(self, bdf: str) -> set[str]:
        """The devices whose parent is `bdf` (every device's parent is looked up once, then indexed)."""
        if self._children is None:
            index: dict[str, set[str]] = {}
            for name in self.devices:
                parent = self.parent(name)
                if parent is not None:
                    index.setdefault(parent, set()).add(name)
            self._children = index
        return self._children.get(bdf, set())

    def has_children(self, bdf: str) -> bool:
        return bool(self.children(bdf))

    def ancestors(self, bdf: str) -> list[str]:
        """Bridges above the device, nearest first (cycle-safe)."""
        chain: list[str] = []
        seen = {bdf}
        current = self.parent(bdf)
        while current and current not in seen and len(chain) < _MAX_DEPTH:
            chain.append(current)
            seen.add(current)
            current = self.parent(current)
        return chain

    def path(self, bdf: str) -> list[str]:
        """The device's path from the top bridge down to the device itself."""
        return list(reversed(self.ancestors(bdf))) + [bdf]

    def role(self, bdf: str) -> str | None:
        """Root Port, Upstream Port, Downstream Port, Endpoint...: stated by a source or inferred."""
        if bdf in self._roles:
            return self._roles[bdf]
        role: str | None = None
        # Walk the path top-down so each bridge's role is known before its children's.
        for name in self.path(bdf):
            if name in self._roles:
                role = self._roles[name]
                continue
            device = self.devices.get(name)
            parent = self.parent(name)
            parent_role = self._roles.get(parent) if parent else None
            if device is not None and device.port_type in (PORT_ROOT, PORT_UPSTREAM, PORT_DOWNSTREAM):
                role = device.port_type
            elif device is not None and not device.is_bridge:
                role = device.port_type or PORT_ENDPOINT
            elif parent is None:
                role = PORT_ROOT  # a bridge on a root bus
            elif parent_role in (PORT_ROOT, PORT_DOWNSTREAM):
                role = PORT_UPSTREAM
            elif parent_role == PORT_UPSTREAM:
                role = PORT_DOWNSTREAM
            else:
                role = None
            self._roles[name] = role
        return role

    def root_complex(self, bdf: str) -> str | None:
        """The host bridge a device hangs under: `0000:40` (sysfs `pci0000:40`, or the root bus)."""
        chain = self.path(bdf)
        top = self.devices.get(chain[0])
        for name in chain:
            device = self.devices.get(name)
            if device is not None and device.host_bridge:
                return device.host_bridge
        if top is None or top.domain is None or top.bus is None:
            return None
        return f"{top.domain:04x}:{top.bus:02x}"

    def numa_node(self, bdf: str) -> int | None:
        for name in [bdf] + self.ancestors(bdf):
            device = self.devices.get(name)
            if device is not None and device.numa_node is not None:
                return device.numa_node
        return None

    # -- links --------------------------------------------------------------------
    def hops(self, bdf: str) -> list[Hop]:
        """The physical links from the root port down to the device, top first."""
        chain = self.path(bdf)
        hops: list[Hop] = []
        for upper_bdf, lower_bdf in zip(chain, chain[1:]):
            upper_role, lower_role = self.role(upper_bdf), self.role(lower_bdf)
            if upper_role == PORT_UPSTREAM and lower_role in (PORT_DOWNSTREAM, None):
                continue  # inside the switch chip
            hops.append(self._hop(self.devices.get(upper_bdf), self.devices[lower_bdf]))
        if len(chain) == 1 and self.devices.get(bdf) is not None and self.devices[bdf].link is not None:
            # Only the device itself is known (no bridge above it in the evidence).
            hops.append(self._hop(None, self.devices[bdf]))
        return hops

    @staticmethod
    def _hop(upper: PciDevice | None, lower: PciDevice) -> Hop:
        hop = Hop(upper=upper, lower=lower)
        up = upper.link if upper is not None else None
        low = lower.link
        hop.upper_cap_width = up.cap_width if up else None
        hop.lower_cap_width = low.cap_width if low else None
        hop.upper_cap_speed_gts = up.cap_speed_gts if up else None
        hop.lower_cap_speed_gts = low.cap_speed_gts if low else None
        widths = [w for w in (hop.upper_cap_width, hop.lower_cap_width) if w]
        speeds = [s for s in (hop.upper_cap_speed_gts, hop.lower_cap_speed_gts) if s]
        hop.cap_width = min(widths) if widths else None
        hop.cap_speed_gts = min(speeds) if speeds else None
        for link in (low, up):
            if link is None:
                continue
            if hop.sta_width is None and link.sta_width:
                hop.sta_width = link.sta_width
            if hop.sta_speed_gts is None and link.sta_speed_gts is not None:
                hop.sta_speed_gts = link.sta_speed_gts
        for link in (up, low):
            if link is not None:
                for ref in (link.cap_source, link.source):
                    if ref is not None and ref not in hop.sources:
                        hop.sources.append(ref)
        return hop

    # -- pairs --------------------------------------------------------------------
    def pair_path(self, a_bdf: str, b_bdf: str, a: str = "", b: str = "") -> PairPath:
        a_up = self.ancestors(a_bdf)
        b_up = self.ancestors(b_bdf)
        common = next((bridge for bridge in a_up if bridge in b_up), None)
        result = PairPath(a=a or a_bdf, b=b or b_bdf, path=None, common=common)
        if common is not None:
            a_leg = a_up[: a_up.index(common)]
            b_leg = b_up[: b_up.index(common)]
            result.bridges = a_leg + [bridge for bridge in b_leg if bridge not in a_leg]
            if len(a_leg) <= 1 and len(b_leg) <= 1 and self.role(common) != PORT_ROOT:
                result.path = "PIX"
                result.reason = f"both sit below one PCIe switch ({common})"
            else:
                result.path = "PXB"
                result.reason = f"they meet at {common} after crossing more than one bridge"
            return result
        result.bridges = a_up + [bridge for bridge in b_up if bridge not in a_up]
        rc_a, rc_b = self.root_complex(a_bdf), self.root_complex(b_bdf)
        if rc_a is not None and rc_a == rc_b:
            result.path = "PHB"
            result.reason = f"they meet only in the host bridge {rc_a}"
            return result
        node_a, node_b = self.numa_node(a_bdf), self.numa_node(b_bdf)
        if node_a is not None and node_b is not None:
            if node_a == node_b:
                result.path = "NODE"
                result.reason = f"different host bridges ({rc_a}, {rc_b}) in NUMA node {node_a}"
            else:
                result.path = "SYS"
                result.reason = f"different NUMA nodes ({node_a} and {node_b}): the path crosses the CPU interconnect"
            return result
        result.reason = "the evidence does not say how their host bridges connect (NUMA nodes unknown)"
        return result


def build_tree(machine: object) -> PcieTree:
    """The machine's PCIe tree. The analysis asks for it a dozen times (each PCIe rule, the paths, the
    planner), and for 5,000 devices a build and its parent lookups cost a tenth of a second: inside
    `model.shared.reading()` (the whole analysis) it is built once per set of devices."""
    devices = list(getattr(machine, "pci", []) or [])
    return shared(machine, "pcie-tree", lambda: PcieTree(devices), guard=tuple(map(id, devices)))


def is_gpu_device(device: PciDevice) -> bool:
    """An NVIDIA or AMD accelerator: a display-class function (VGA, 3D, display) of either vendor."""
    if device.bdf is None or not device.is_display:
        return False
    return device.vendor_id in (VENDOR_NVIDIA, VENDOR_AMD)


def is_fast_nic(device: PciDevice) -> bool:
    """A NIC worth pairing with GPUs (RDMA class): InfiniBand, Mellanox/NVIDIA, or one wide link."""
    if device.bdf is None or not device.is_network:
        return False
    if device.class_code == 0x0207 or device.vendor_id == VENDOR_MELLANOX or device.net_names and any(
        name.startswith(("mlx", "bnxt_re", "irdma", "efa", "ib")) for name in device.net_names
    ):
        return True
    link = device.link
    return link is not None and (link.cap_width or 0) >= 8


def gpu_endpoints(machine: object, tree: PcieTree) -> list[tuple[str, str]]:
    """(label, bdf) of every GPU the tree holds, GPU index order."""
    out: list[tuple[str, str]] = []
    for gpu in machine.sorted_gpus():  # type: ignore[attr-defined]
        if gpu.bus_id:
            bdf = normalize_bdf(gpu.bus_id)
            if bdf in tree.devices:
                out.append((gpu.label, bdf))
    return out


def nic_endpoints(machine: object, tree: PcieTree) -> list[tuple[str, str]]:
    """(label, bdf) of the fast NICs: named as the NIC records name them, else by bdf.

    One entry per card: a dual-port NIC's second function sits where the first does. Four PCIe rules ask
    for them, and each asking looked at every device of the tree (5,000 of them): inside
    `model.shared.reading()` they are found once per tree and set of NIC records."""
    nics = tuple((nic.name, nic.bus_id) for nic in getattr(machine, "nics", {}).values())
    return list(shared(machine, "nic-endpoints", lambda: _nic_endpoints(machine, tree), guard=(tree, nics)))


def _nic_endpoints(machine: object, tree: PcieTree) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen_slots: set[str] = set()
    named: dict[str, str] = {}
    for nic in getattr(machine, "nics", {}).values():
        if nic.bus_id:
            named[normalize_bdf(nic.bus_id)] = nic.name
    for device in tree.devices.values():
        if not is_fast_nic(device) and device.bdf not in named:
            continue
        slot = device.bdf[:-2] if device.bdf else ""
        if slot in seen_slots:
            continue
        seen_slots.add(slot)
        label = named.get(device.bdf) or next((n for n in device.net_names if not n.startswith(("eth", "en", "ib"))),
                                              None) or device.bdf
        out.append((label, device.bdf))
    return sorted(out, key=lambda item: item[1])


def derived_links(machine: object) -> list:
    """The path class of every GPU pair as the PCIe tree alone tells it (origin `pcie-tree`).

    Not added to `machine.links` by the mergers: a renderer or the planner can use them where no
    tool reported a pair (AMD or sysfs-only evidence), and `topology-path-mismatch` compares them
    with `nvidia-smi topo -m`."""
    from itertools import combinations

    from k3diag.model.topology import Link

    tree = build_tree(machine)
    out = []
    for (a, a_bdf), (b, b_bdf) in combinations(gpu_endpoints(machine, tree), 2):
        pair = tree.pair_path(a_bdf, b_bdf, a, b)
        if pair.path is None:
            continue
        source = next((tree.devices[x].source for x in pair.bridges if x in tree.devices
                       and tree.devices[x].source is not None), None)
        out.append(Link(a=a, b=b, path=pair.path, origin="pcie-tree", source=source))
    return out


def describe_gpu_paths(machine: object) -> list[dict]:
    """Each GPU's path from its root port down, hop by hop, as plain data for `k3diag topo`."""
    tree = build_tree(machine)
    out: list[dict] = []
    for label, bdf in gpu_endpoints(machine, tree):
        steps = []
        for name in tree.path(bdf):
            device = tree.devices.get(name)
            link = device.link if device is not None else None
            steps.append({
                "bdf": name,
                "role": tree.role(name),
                "description": device.description if device is not None else None,
                "link": link.to_json() if link is not None else None,
                "acs_redirect": device.acs.redirects_p2p if device is not None and device.acs is not None else None,
            })
        hops = tree.hops(bdf)
        narrowest = min((h for h in hops if (h.sta_width or h.cap_width)), default=None,
                        key=lambda h: h.sta_width or h.cap_width or 99)
        out.append({
            "gpu": label,
            "bdf": bdf,
            "root_complex": tree.root_complex(bdf),
            "numa_node": tree.numa_node(bdf),
            "path": steps,
            "narrowest_hop": narrowest.name if narrowest is not None else None,
        })
    return out
