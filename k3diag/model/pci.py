"""The PCIe layer: devices, their links and ACS settings, the bridge tree, IOMMU state.

Owned by the PCIe/platform work; the core only needs the records below to exist so the
report can carry them. Extend freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")


@dataclass
class PciLink:
    cap_speed_gts: float | None = None
    cap_width: int | None = None
    sta_speed_gts: float | None = None
    sta_width: int | None = None
    # As printed by lspci when it prints the markers, else computed from the numbers.
    speed_downgraded: bool | None = None
    width_downgraded: bool | None = None
    target_speed_gts: float | None = None  # LnkCtl2
    source: SourceRef | None = None

    def to_json(self) -> dict:
        return {
            "cap_speed_gts": self.cap_speed_gts,
            "cap_width": self.cap_width,
            "sta_speed_gts": self.sta_speed_gts,
            "sta_width": self.sta_width,
            "speed_downgraded": self.speed_downgraded,
            "width_downgraded": self.width_downgraded,
            "target_speed_gts": self.target_speed_gts,
        }


@dataclass
class Acs:
    cap: dict[str, bool] = field(default_factory=dict)
    ctl: dict[str, bool] = field(default_factory=dict)
    source: SourceRef | None = None

    @property
    def redirects_p2p(self) -> bool | None:
        if not self.ctl:
            return None
        return bool(self.ctl.get("ReqRedir") or self.ctl.get("CmpltRedir"))

    def to_json(self) -> dict:
        return {"cap": dict(self.cap), "ctl": dict(self.ctl), "redirects_p2p": self.redirects_p2p}


@dataclass
class PciDevice:
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

    def to_json(self) -> dict:
        return {
            "bdf": self.bdf,
            "description": self.description,
            "class": self.class_name,
            "vendor_id": self.vendor_id,
            "device_id": self.device_id,
            "link": self.link.to_json() if self.link else None,
            "acs": self.acs.to_json() if self.acs else None,
            "numa_node": self.numa_node,
            "physical_slot": self.physical_slot,
            "driver": self.driver,
            "parent": self.parent,
            "is_bridge": self.is_bridge,
            "access_denied": self.access_denied,
            "iommu_group": self.iommu_group,
            "origin": self.origin,
        }
