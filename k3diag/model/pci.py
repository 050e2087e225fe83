"""The PCIe layer: devices, their links and ACS settings, the bridge tree, IOMMU state.

Owned by the PCIe/platform work; the core only needs the records below to exist so the
report can carry them. Everything here is plain data: the tree that joins devices lives in
`k3diag.model.pcie_tree`, the parsers in `k3diag.parse.lspci*`, `sysfs_snapshot`, `dmesg`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import MAX_SOURCES_PER_RECORD, SourceRef

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")

# Theoretical one-direction bandwidth of an x16 link in GB/s, by link speed in GT/s
# (8b/10b for 2.5 and 5 GT/s, 128b/130b for 8-32 GT/s, FLIT mode for 64 GT/s).
X16_GBS_BY_SPEED: dict[float, float] = {2.5: 4.0, 5.0: 8.0, 8.0: 15.75, 16.0: 31.5, 32.0: 63.0, 64.0: 121.0}
GEN_BY_SPEED: dict[float, int] = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

# PCIe port types as lspci names them in `Express (v2) <type>`; the config-space decoder
# produces the same strings so both sources compare.
PORT_ROOT = "Root Port"
PORT_UPSTREAM = "Upstream Port"
PORT_DOWNSTREAM = "Downstream Port"
PORT_ENDPOINT = "Endpoint"
PORT_LEGACY_ENDPOINT = "Legacy Endpoint"

VENDOR_NVIDIA = "10de"
VENDOR_AMD = "1002"
VENDOR_MELLANOX = "15b3"


def gen_from_speed(speed_gts: float | None) -> int | None:
    if speed_gts is None:
        return None
    return GEN_BY_SPEED.get(float(speed_gts))


def link_gbs(speed_gts: float | None, width: int | None) -> float | None:
    """Theoretical one-direction GB/s of a link, or None when speed or width is unknown."""
    if speed_gts is None or width is None or width <= 0:
        return None
    per_x16 = X16_GBS_BY_SPEED.get(float(speed_gts))
    if per_x16 is None:
        return None
    return round(per_x16 * width / 16, 2)


def format_speed(speed_gts: float | None) -> str:
    if speed_gts is None:
        return "unknown speed"
    return f"{speed_gts:g} GT/s"


@dataclass
class PciLink:
    """A device's PCIe link: what it can do (LnkCap), what it runs at (LnkSta), and the lines that said so."""

    cap_speed_gts: float | None = None
    cap_width: int | None = None
    sta_speed_gts: float | None = None
    sta_width: int | None = None
    # As printed by lspci when it prints the markers, else computed from the numbers.
    speed_downgraded: bool | None = None
    width_downgraded: bool | None = None
    target_speed_gts: float | None = None  # LnkCtl2
    supported_max_speed_gts: float | None = None  # LnkCap2 "Supported Link Speeds: 2.5-16GT/s"
    port_number: int | None = None  # LnkCap "Port #N"
    source: SourceRef | None = None  # the LnkSta line (what the link runs at)
    cap_source: SourceRef | None = None  # the LnkCap line

    def recompute_downgrades(self) -> None:
        """Derive the downgrade flags from the numbers; markers only fill what numbers cannot tell."""
        if self.cap_speed_gts is not None and self.sta_speed_gts is not None:
            self.speed_downgraded = self.sta_speed_gts < self.cap_speed_gts
        if self.cap_width is not None and self.sta_width is not None:
            self.width_downgraded = self.sta_width < self.cap_width

    @property
    def cap_gbs(self) -> float | None:
        return link_gbs(self.cap_speed_gts, self.cap_width)

    @property
    def sta_gbs(self) -> float | None:
        return link_gbs(self.sta_speed_gts, self.sta_width)

    def to_json(self) -> dict:
        return {
            "cap_speed_gts": self.cap_speed_gts,
            "cap_width": self.cap_width,
            "sta_speed_gts": self.sta_speed_gts,
            "sta_width": self.sta_width,
            "speed_downgraded": self.speed_downgraded,
            "width_downgraded": self.width_downgraded,
            "target_speed_gts": self.target_speed_gts,
            "supported_max_speed_gts": self.supported_max_speed_gts,
        }


@dataclass
class Acs:
    """A port's Access Control Services: the flags it supports (ACSCap) and those turned on (ACSCtl)."""

    cap: dict[str, bool] = field(default_factory=dict)
    ctl: dict[str, bool] = field(default_factory=dict)
    source: SourceRef | None = None  # the ACSCtl line (or the config file it was decoded from)

    @property
    def redirects_p2p(self) -> bool | None:
        if not self.ctl:
            return None
        return bool(self.ctl.get("ReqRedir") or self.ctl.get("CmpltRedir"))

    def to_json(self) -> dict:
        return {"cap": dict(self.cap), "ctl": dict(self.ctl), "redirects_p2p": self.redirects_p2p}


@dataclass
class PciDevice:
    """One PCI function as `lspci -vv`, sysfs or a config-space dump describes it."""

    bdf: str | None  # normalized 0000:bb:dd.f; None for a header-less excerpt
    description: str | None = None
    class_name: str | None = None
    vendor_id: str | None = None
    device_id: str | None = None
    link: PciLink | None = None
    acs: Acs | None = None
    numa_node: int | None = None
    physical_slot: str | None = None
    driver: str | None = None
    parent: str | None = None  # bdf of the upstream bridge, when known
    secondary_bus: int | None = None
    subordinate_bus: int | None = None
    is_bridge: bool = False
    access_denied: bool = False  # capabilities unreadable without root
    iommu_group: int | None = None
    origin: str = "lspci-vv"
    source: SourceRef | None = None
    # Added by the PCIe layer -------------------------------------------------------
    class_code: int | None = None  # 16-bit base class + subclass, 0x0302 for a 3D controller
    port_type: str | None = None  # PORT_* above, from `Express (v2) <type>` or the config space
    primary_bus: int | None = None
    # True when the capability list was read in full (root), False when it could not be
    # (non-root lspci, 64-byte config file), None when the input does not say (an excerpt).
    capabilities_read: bool | None = None
    host_bridge: str | None = None  # sysfs `pci0000:00`: the root complex the device hangs under
    net_names: list[str] = field(default_factory=list)  # sysfs net/ and infiniband/ names (mlx5_0, ib0)
    sources: list[SourceRef] = field(default_factory=list)  # every line a fact came from

    @property
    def domain(self) -> int | None:
        if not self.bdf or len(self.bdf) < 12:
            return None
        try:
            return int(self.bdf[:4], 16)
        except ValueError:
            return None

    @property
    def bus(self) -> int | None:
        if not self.bdf:
            return None
        try:
            return int(self.bdf[-7:-5], 16)
        except ValueError:
            return None

    @property
    def base_class(self) -> int | None:
        return None if self.class_code is None else self.class_code >> 8

    @property
    def is_display(self) -> bool:
        return self.base_class == 0x03

    @property
    def is_network(self) -> bool:
        return self.base_class == 0x02

    @property
    def acs_state_known(self) -> bool:
        """Whether the absence of an ACS capability means 'no ACS' rather than 'not read'."""
        return self.acs is not None or self.capabilities_read is True

    def add_source(self, ref: SourceRef | None) -> None:
        # Identity first: the same line object is offered many times while a block is parsed.
        # Capped (see MAX_SOURCES_PER_RECORD): the first blocks' lines are all a finding quotes.
        if ref is None or len(self.sources) >= MAX_SOURCES_PER_RECORD:
            return
        if not any(known is ref for known in self.sources) and ref not in self.sources[-8:]:
            self.sources.append(ref)

    def to_json(self) -> dict:
        return {
            "bdf": self.bdf,
            "description": self.description,
            "class": self.class_name,
            "class_code": f"{self.class_code:04x}" if self.class_code is not None else None,
            "vendor_id": self.vendor_id,
            "device_id": self.device_id,
            "link": self.link.to_json() if self.link else None,
            "acs": self.acs.to_json() if self.acs else None,
            "numa_node": self.numa_node,
            "physical_slot": self.physical_slot,
            "driver": self.driver,
            "parent": self.parent,
            "is_bridge": self.is_bridge,
            "port_type": self.port_type,
            "secondary_bus": self.secondary_bus,
            "subordinate_bus": self.subordinate_bus,
            "access_denied": self.access_denied,
            "capabilities_read": self.capabilities_read,
            "iommu_group": self.iommu_group,
            "host_bridge": self.host_bridge,
            "origin": self.origin,
        }


@dataclass
class DmesgEvent:
    """One kernel message that matters for GPUs: an AER error, an NVIDIA Xid, a GPU off the bus."""

    kind: str  # "aer" | "xid" | "fallen-off-bus" | "sxid" (NVSwitch: severity "fatal" | "non-fatal" | None)
    bdf: str | None  # normalized; an Xid names the GPU as PCI:0000:02:00 (function 0)
    source: SourceRef
    severity: str | None = None  # AER: "corrected" | "uncorrected-nonfatal" | "uncorrected-fatal"
    error_type: str | None = None  # AER: "Data Link Layer"...; Xid: the message text
    code: int | None = None  # Xid number
    details: list[str] = field(default_factory=list)  # AER status bits: "Surprise Down Error"...
    timestamp: float | None = None  # seconds since boot when printed

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "bdf": self.bdf,
            "severity": self.severity,
            "error_type": self.error_type,
            "code": self.code,
            "details": list(self.details),
            "timestamp": self.timestamp,
            "source": self.source.to_json(),
        }


@dataclass
class IommuState:
    """What the kernel does with DMA: translated (a P2P breaker with ACS), passthrough, or off."""

    mode: str | None = None  # "translated" | "passthrough" | "off" | None
    enabled: bool | None = None  # an IOMMU driver is active (DMAR/AMD-Vi units in /sys/class/iommu)
    units: list[str] = field(default_factory=list)  # dmar0, ivhd0 ...
    group_types: dict[str, int] = field(default_factory=dict)  # "DMA-FQ": 40, "identity": 2
    gpu_group_types: dict[str, str] = field(default_factory=dict)  # GPU bdf -> its group's type
    default_domain: str | None = None  # dmesg `iommu: Default domain type: Translated`
    cmdline_mode: str | None = None  # what /proc/cmdline forces: "passthrough" | "off" | "translated"
    cmdline: dict[str, str | None] = field(default_factory=dict)  # intel_iommu, amd_iommu, iommu, ...
    pci_noacs: bool | None = None
    sources: list[SourceRef] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "enabled": self.enabled,
            "units": list(self.units),
            "group_types": dict(self.group_types),
            "gpu_group_types": dict(self.gpu_group_types),
            "default_domain": self.default_domain,
            "cmdline": dict(self.cmdline),
            "pci_noacs": self.pci_noacs,
        }


@dataclass
class PlatformState:
    """The facts of this layer that have no place on a device: kept in `machine.extras["platform"]`."""

    iommu: IommuState = field(default_factory=IommuState)
    events: list[DmesgEvent] = field(default_factory=list)
    # Whether the PCIe capability/ACS reads were complete; sentences saying what is missing.
    privileged: bool | None = None

    def to_json(self) -> dict:
        return {
            "iommu": self.iommu.to_json(),
            "events": [event.to_json() for event in self.events],
            "privileged": self.privileged,
        }


def platform_state(machine: object) -> PlatformState:
    """The machine's platform record, created on first use."""
    extras = getattr(machine, "extras")
    state = extras.get("platform")
    if not isinstance(state, PlatformState):
        state = PlatformState()
        extras["platform"] = state
    return state
