"""The bulk path's steps of the `lspci -vv` parser: what each kind of line does to the device being read.

`lspci._Parser.run` classifies each distinct line once (`lspci_lines.classify`) and replays its action
here, per occurrence; each step has the effect the per-line path (`_Parser._line`) has on a line of its
kind, step for step (tests hold the two equal on every fixture and on generated outputs).
"""

from __future__ import annotations

from k3diag.model.pci import Acs, PciDevice, PciLink
from k3diag.model.source import MAX_SOURCES_PER_RECORD, SourceRef
from k3diag.parse.lspci_lines import (
    ACS,
    BUS,
    CAPS,
    CLOSE,
    DENIED,
    DRIVER,
    EXACT,
    IOMMU,
    LNKCAP,
    LNKCAP2,
    LNKCTL2,
    LNKSTA,
    NUMA,
    SLOT,
)


def keep_new(device: PciDevice, ref: SourceRef) -> None:
    """`device.add_source(ref)` for a reference the device cannot hold yet (a new one): the cap alone."""
    if len(device.sources) < MAX_SOURCES_PER_RECORD:
        device.sources.append(ref)


class BulkSteps:
    """Mixin of `lspci._Parser`: the `_on_*` step of each action code. The parser provides `current`,
    `anonymous`, `saw_caps`, `acs_listed`, `current_complete`, `result`, `_pos`, `_line_end`, `_counter`,
    `_ref`, and the methods `_close`, `_exact`, `_anonymous`, `_device_for` and `_acs`."""

    def _handlers(self) -> tuple:
        """The `_on_*` step of each action code, indexed by code (None for SKIP)."""
        steps = {CLOSE: self._on_close, EXACT: self._on_exact, DRIVER: self._on_driver, CAPS: self._on_caps,
                 NUMA: self._on_numa, BUS: self._on_bus, LNKCAP: self._on_lnkcap, LNKSTA: self._on_lnksta,
                 LNKCAP2: self._on_lnkcap2, LNKCTL2: self._on_lnkctl2, ACS: self._on_acs, DENIED: self._on_denied,
                 SLOT: self._on_slot, IOMMU: self._on_iommu}
        return tuple(steps.get(code) for code in range(max(steps) + 1))

    # Each `_on_*` has the effect `_line` has on a line of its kind, step for step; `at` is where the
    # `\n` before the line is (the line's number is counted only if asked: `counted_refs`). Only the
    # steps that close a block or read the next line set `_pos`. `keep_new` stands for
    # `PciDevice.add_source`: a line's reference is new and offered once per device, so it is never
    # one the device already holds.
    def _on_close(self, action: tuple, at: int) -> None:
        self._pos = at
        self._close(complete=True)

    def _on_exact(self, action: tuple, at: int) -> None:
        raw = action[1]
        self._pos, self._line_end = at, at + 1 + len(raw)
        self._exact(raw, self._counter.line_at(at + 1))

    def _on_caps(self, action: tuple, at: int) -> None:
        device = self.current
        if device is None:
            return
        self.saw_caps = True
        if action[2] is not None and device.port_type is None:
            device.port_type = action[2]
            keep_new(device, self._ref(at + 1, action[1]))
        if action[3]:
            self.acs_listed = True

    def _on_slot(self, action: tuple, at: int) -> None:
        if self.current is not None:
            self.current.physical_slot = action[2]

    def _on_iommu(self, action: tuple, at: int) -> None:
        if self.current is not None and action[2] is not None:
            self.current.iommu_group = action[2]

    def _on_driver(self, action: tuple, at: int) -> None:
        device = self.current
        if device is not None:
            if action[3]:
                device.driver = action[2]
                keep_new(device, self._ref(at + 1, action[1]))
            self.current_complete = True

    def _on_numa(self, action: tuple, at: int) -> None:
        device = self.current
        if device is not None and action[2] is not None:
            device.numa_node = action[2]
            keep_new(device, self._ref(at + 1, action[1]))

    def _on_denied(self, action: tuple, at: int) -> None:
        ref = self._ref(at + 1, action[1])
        device = self.current if self.current is not None else self._anonymous(ref)
        if not device.access_denied:
            device.access_denied = True
            self.result.denied += 1
            keep_new(device, ref)

    def _on_bus(self, action: tuple, at: int) -> None:
        ref = self._ref(at + 1, action[1])
        device = self.current
        if device is None or self.anonymous:
            device = self._device_for("Bus", ref)
        if action[2] is not None:
            device.primary_bus, device.secondary_bus, device.subordinate_bus = action[2]
            device.is_bridge = True
            keep_new(device, ref)

    def _on_lnkcap(self, action: tuple, at: int) -> None:
        ref = self._ref(at + 1, action[1])
        device = self.current
        if device is None or self.anonymous:
            device = self._device_for("LnkCap", ref)
        link = device.link
        if link is None:
            link = device.link = PciLink()
        values = action[2]
        if values is not None:
            link.cap_speed_gts, link.cap_width = values[0], values[1]
            if values[2] is not None:
                link.port_number = values[2]
        link.cap_source = ref
        keep_new(device, ref)

    def _on_lnksta(self, action: tuple, at: int) -> None:
        ref = self._ref(at + 1, action[1])
        device = self.current
        if device is None or self.anonymous:
            device = self._device_for("LnkSta", ref)
        link = device.link
        if link is None:
            link = device.link = PciLink()
        values = action[2]
        kind = values[0]
        if kind == "ok":
            link.sta_speed_gts, link.sta_width = values[1], values[2]
            if values[3]:
                link.speed_downgraded = values[3] == "downgraded"
            if values[4]:
                link.width_downgraded = values[4] == "downgraded"
        elif kind == "unknown":
            link.sta_width = values[1]
        else:
            self.result.warnings.append(f"line {ref.line}: LnkSta not understood: {values[1]!r}")
        link.source = ref
        keep_new(device, ref)

    def _on_lnkcap2(self, action: tuple, at: int) -> None:
        device = self.current
        if device is None or self.anonymous:
            device = self._device_for("LnkCap2", self._ref(at + 1, action[1]))
        if action[2] is not None:
            link = device.link
            if link is None:
                link = device.link = PciLink()
            link.supported_max_speed_gts = action[2][0]

    def _on_lnkctl2(self, action: tuple, at: int) -> None:
        ref = self._ref(at + 1, action[1])
        device = self.current
        if device is None or self.anonymous:
            device = self._device_for("LnkCtl2", ref)
        if action[2] is not None:
            link = device.link
            if link is None:
                link = device.link = PciLink()
            link.target_speed_gts = action[2][0]
            keep_new(device, ref)

    def _on_acs(self, action: tuple, at: int) -> None:
        ref = self._ref(at + 1, action[1])
        device = self.current
        if device is None or self.anonymous:
            device = self._device_for(action[2], ref)
        flags = action[3]
        if len(flags) < 7:  # cut or wrapped: `_acs` reads the next line and may warn
            self._pos = at
            self._acs(device, action[2], dict(flags), ref, fresh=True)
            return
        acs = device.acs  # `_acs`'s steps when all seven flags are there
        if acs is None:
            acs = device.acs = Acs()
        if action[2] == "ACSCap":
            acs.cap = dict(flags)
        else:
            acs.ctl = dict(flags)
            acs.source = ref
        keep_new(device, ref)
