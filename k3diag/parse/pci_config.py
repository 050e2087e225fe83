"""PCI configuration space, decoded: header, PCIe capability link fields, ACS extended capability.

A pure function of the bytes a sysfs `config` file holds. Offsets are the PCI Express Base
Specification's register layout, named as the Linux `pci_regs.h` header (and pcicrawler)
name them. Unprivileged reads of `config` return only the first 64 bytes (the header), so the
capability list is absent; a config file shorter than expected or full of garbage is decoded
as far as it goes and every problem becomes a warning, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.pci import ACS_FLAGS

# Type 0/1 header --------------------------------------------------------------------
PCI_VENDOR_ID = 0x00
PCI_DEVICE_ID = 0x02
PCI_COMMAND = 0x04
PCI_STATUS = 0x06
PCI_STATUS_CAP_LIST = 0x10
PCI_CLASS_REVISION = 0x08  # revision at 0x08, prog-if 0x09, subclass 0x0a, base class 0x0b
PCI_CLASS_DEVICE = 0x0A  # 16-bit class + subclass
PCI_HEADER_TYPE = 0x0E
PCI_HEADER_TYPE_MASK = 0x7F
PCI_HEADER_TYPE_NORMAL = 0
PCI_HEADER_TYPE_BRIDGE = 1
PCI_PRIMARY_BUS = 0x18
PCI_SECONDARY_BUS = 0x19
PCI_SUBORDINATE_BUS = 0x1A
PCI_CAPABILITY_LIST = 0x34
PCI_STD_HEADER_SIZEOF = 64
PCI_CFG_SPACE_SIZE = 256
PCI_CFG_SPACE_EXP_SIZE = 4096

# Capability list ----------------------------------------------------------------------
PCI_CAP_LIST_ID = 0
PCI_CAP_LIST_NEXT = 1
PCI_CAP_ID_EXP = 0x10

# PCI Express capability (offsets from the capability start) ---------------------------
PCI_EXP_FLAGS = 0x02
PCI_EXP_FLAGS_TYPE = 0x00F0
PCI_EXP_LNKCAP = 0x0C
PCI_EXP_LNKCAP_SLS = 0x0000000F  # max link speed
PCI_EXP_LNKCAP_MLW = 0x000003F0  # max link width
PCI_EXP_LNKCAP_PN = 0xFF000000  # port number
PCI_EXP_LNKCTL = 0x10
PCI_EXP_LNKSTA = 0x12
PCI_EXP_LNKSTA_CLS = 0x000F  # current link speed
PCI_EXP_LNKSTA_NLW = 0x03F0  # negotiated link width
PCI_EXP_LNKCAP2 = 0x2C
PCI_EXP_LNKCAP2_SLS = 0x000000FE  # supported link speeds vector, bit 1 = 2.5 GT/s
PCI_EXP_LNKCTL2 = 0x30
PCI_EXP_LNKCTL2_TLS = 0x000F  # target link speed
PCI_EXP_LNKSTA2 = 0x32
PCI_EXP_CAP_SIZE_V2 = 0x3C

# Extended capabilities ----------------------------------------------------------------
PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000D
PCI_ACS_CAP = 0x04
PCI_ACS_CTRL = 0x06
# ACS capability/control bits, in the order lspci prints them.
PCI_ACS_SV = 0x0001  # source validation
PCI_ACS_TB = 0x0002  # translation blocking
PCI_ACS_RR = 0x0004  # P2P request redirect
PCI_ACS_CR = 0x0008  # P2P completion redirect
PCI_ACS_UF = 0x0010  # upstream forwarding
PCI_ACS_EC = 0x0020  # P2P egress control
PCI_ACS_DT = 0x0040  # direct translated P2P
ACS_BITS: tuple[tuple[str, int], ...] = tuple(
    zip(ACS_FLAGS, (PCI_ACS_SV, PCI_ACS_TB, PCI_ACS_RR, PCI_ACS_CR, PCI_ACS_UF, PCI_ACS_EC, PCI_ACS_DT))
)

# Link speed encodings (LnkCap/LnkSta/LnkCtl2 value, LnkCap2 vector bit index) -> GT/s.
SPEED_GTS: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

# Device/port type field of the PCIe capability flags, named as lspci names them.
PORT_TYPES: dict[int, str] = {
    0x0: "Endpoint",
    0x1: "Legacy Endpoint",
    0x4: "Root Port",
    0x5: "Upstream Port",
    0x6: "Downstream Port",
    0x7: "PCI-Express to PCI/PCI-X Bridge",
    0x8: "PCI/PCI-X to PCI-Express Bridge",
    0x9: "Root Complex Integrated Endpoint",
    0xA: "Root Complex Event Collector",
}

# A capability list longer than this is a loop in garbage, not a real device.
_MAX_CAPS = 48


@dataclass
class PcieCapability:
    offset: int
    port_type: str | None = None
    cap_speed_gts: float | None = None
    cap_width: int | None = None
    port_number: int | None = None
    sta_speed_gts: float | None = None
    sta_width: int | None = None
    supported_speeds_gts: list[float] = field(default_factory=list)  # from LnkCap2
    target_speed_gts: float | None = None  # LnkCtl2


@dataclass
class AcsCapability:
    offset: int
    cap: dict[str, bool] = field(default_factory=dict)
    ctl: dict[str, bool] = field(default_factory=dict)


@dataclass
class ConfigSpace:
    length: int
    vendor_id: int | None = None
    device_id: int | None = None
    class_code: int | None = None  # base class << 8 | subclass
    header_type: int | None = None
    primary_bus: int | None = None
    secondary_bus: int | None = None
    subordinate_bus: int | None = None
    pcie: PcieCapability | None = None
    acs: AcsCapability | None = None
    # Whether the standard capability list (bytes 64-255) and the extended capabilities
    # (256-4095) were there to read: both False for an unprivileged 64-byte read.
    capabilities_readable: bool = False
    extended_readable: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def is_bridge(self) -> bool:
        return self.header_type == PCI_HEADER_TYPE_BRIDGE


def _u8(data: bytes, offset: int) -> int | None:
    return data[offset] if 0 <= offset < len(data) else None


def _u16(data: bytes, offset: int) -> int | None:
    if offset < 0 or offset + 2 > len(data):
        return None
    return int.from_bytes(data[offset:offset + 2], "little")


def _u32(data: bytes, offset: int) -> int | None:
    if offset < 0 or offset + 4 > len(data):
        return None
    return int.from_bytes(data[offset:offset + 4], "little")


def decode_config(data: bytes) -> ConfigSpace:
    """Decode what the bytes hold; never raises."""
    data = bytes(data or b"")
    space = ConfigSpace(length=len(data))
    if len(data) < 4:
        space.warnings.append(f"the config space is {len(data)} bytes long, too short to hold even the vendor id")
        return space
    vendor = _u16(data, PCI_VENDOR_ID)
    if vendor in (0xFFFF, 0x0000):
        # All ones is what a read returns when the device does not answer (fallen off the bus).
        space.warnings.append(f"vendor id reads {vendor:#06x}: the device did not answer the config read "
                              "(removed, powered off or fallen off the bus)")
        return space
    space.vendor_id = vendor
    space.device_id = _u16(data, PCI_DEVICE_ID)
    space.class_code = _u16(data, PCI_CLASS_DEVICE)
    header = _u8(data, PCI_HEADER_TYPE)
    if header is not None:
        space.header_type = header & PCI_HEADER_TYPE_MASK
        if space.header_type == PCI_HEADER_TYPE_BRIDGE:
            space.primary_bus = _u8(data, PCI_PRIMARY_BUS)
            space.secondary_bus = _u8(data, PCI_SECONDARY_BUS)
            space.subordinate_bus = _u8(data, PCI_SUBORDINATE_BUS)
    if len(data) < PCI_STD_HEADER_SIZEOF:
        space.warnings.append(f"the config space is {len(data)} bytes long, shorter than the 64-byte header")
        return space
    if len(data) <= PCI_STD_HEADER_SIZEOF:
        space.warnings.append("only the first 64 bytes of the config space were readable (an unprivileged read): "
                              "the PCIe link and ACS capabilities are not in them; read it as root")
        return space
    space.capabilities_readable = True
    space.extended_readable = len(data) >= PCI_CFG_SPACE_EXP_SIZE
    _walk_capabilities(data, space)
    if space.extended_readable:
        _walk_extended(data, space)
    elif len(data) >= PCI_CFG_SPACE_SIZE and space.pcie is not None:
        space.warnings.append(f"the config space is {len(data)} bytes long: the extended capabilities (ACS among "
                              "them) start at byte 256 and need the full 4096 bytes")
    return space


def _walk_capabilities(data: bytes, space: ConfigSpace) -> None:
    status = _u16(data, PCI_STATUS)
    if status is None or not status & PCI_STATUS_CAP_LIST:
        return
    pointer = _u8(data, PCI_CAPABILITY_LIST)
    seen: set[int] = set()
    while pointer:
        pointer &= 0xFC  # the two low bits are reserved
        if pointer < PCI_STD_HEADER_SIZEOF or pointer >= min(len(data), PCI_CFG_SPACE_SIZE):
            space.warnings.append(f"a capability pointer ({pointer:#04x}) points outside the capability area")
            return
        if pointer in seen or len(seen) >= _MAX_CAPS:
            space.warnings.append("the capability list loops; the config space looks corrupt")
            return
        seen.add(pointer)
        cap_id = _u8(data, pointer + PCI_CAP_LIST_ID)
        if cap_id == PCI_CAP_ID_EXP and space.pcie is None:
            space.pcie = _decode_pcie(data, pointer)
        pointer = _u8(data, pointer + PCI_CAP_LIST_NEXT) or 0


def _decode_pcie(data: bytes, offset: int) -> PcieCapability:
    cap = PcieCapability(offset=offset)
    flags = _u16(data, offset + PCI_EXP_FLAGS)
    if flags is not None:
        cap.port_type = PORT_TYPES.get((flags & PCI_EXP_FLAGS_TYPE) >> 4)
    lnkcap = _u32(data, offset + PCI_EXP_LNKCAP)
    if lnkcap is not None:
        cap.cap_speed_gts = SPEED_GTS.get(lnkcap & PCI_EXP_LNKCAP_SLS)
        width = (lnkcap & PCI_EXP_LNKCAP_MLW) >> 4
        cap.cap_width = width or None
        cap.port_number = (lnkcap & PCI_EXP_LNKCAP_PN) >> 24
    lnksta = _u16(data, offset + PCI_EXP_LNKSTA)
    if lnksta is not None:
        cap.sta_speed_gts = SPEED_GTS.get(lnksta & PCI_EXP_LNKSTA_CLS)
        cap.sta_width = (lnksta & PCI_EXP_LNKSTA_NLW) >> 4  # 0 is meaningful: link down
    lnkcap2 = _u32(data, offset + PCI_EXP_LNKCAP2)
    if lnkcap2:
        vector = (lnkcap2 & PCI_EXP_LNKCAP2_SLS) >> 1
        cap.supported_speeds_gts = [SPEED_GTS[bit + 1] for bit in range(7) if vector >> bit & 1 and bit + 1 in SPEED_GTS]
    lnkctl2 = _u16(data, offset + PCI_EXP_LNKCTL2)
    if lnkctl2:
        cap.target_speed_gts = SPEED_GTS.get(lnkctl2 & PCI_EXP_LNKCTL2_TLS)
    return cap


def _walk_extended(data: bytes, space: ConfigSpace) -> None:
    offset = PCI_EXT_CAP_START
    seen: set[int] = set()
    while offset:
        offset &= 0xFFC
        if offset < PCI_EXT_CAP_START or offset + 4 > len(data):
            space.warnings.append(f"an extended capability pointer ({offset:#05x}) points outside the config space")
            return
        if offset in seen or len(seen) >= _MAX_CAPS:
            space.warnings.append("the extended capability list loops; the config space looks corrupt")
            return
        seen.add(offset)
        header = _u32(data, offset) or 0
        if header in (0, 0xFFFFFFFF):
            return  # no extended capabilities (or a device that stopped answering)
        cap_id = header & 0xFFFF
        if cap_id == PCI_EXT_CAP_ID_ACS and space.acs is None:
            space.acs = _decode_acs(data, offset)
        offset = header >> 20


def _decode_acs(data: bytes, offset: int) -> AcsCapability:
    acs = AcsCapability(offset=offset)
    cap = _u16(data, offset + PCI_ACS_CAP)
    ctl = _u16(data, offset + PCI_ACS_CTRL)
    if cap is not None:
        acs.cap = {name: bool(cap & bit) for name, bit in ACS_BITS}
    if ctl is not None:
        acs.ctl = {name: bool(ctl & bit) for name, bit in ACS_BITS}
    return acs


# Encoders: the same layout the decoder reads, used to build fixture config files and tests.


def speed_code(speed_gts: float | None) -> int:
    for code, value in SPEED_GTS.items():
        if speed_gts is not None and abs(value - speed_gts) < 1e-6:
            return code
    return 0


def port_type_code(name: str | None) -> int:
    for code, value in PORT_TYPES.items():
        if value == name:
            return code
    return 0


def acs_word(flags: dict[str, bool]) -> int:
    return sum(bit for name, bit in ACS_BITS if flags.get(name))


def build_config(
    vendor_id: int,
    device_id: int,
    class_code: int,
    *,
    bridge_buses: tuple[int, int, int] | None = None,
    port_type: str | None = None,
    cap_speed_gts: float | None = None,
    cap_width: int | None = None,
    sta_speed_gts: float | None = None,
    sta_width: int | None = None,
    port_number: int = 0,
    target_speed_gts: float | None = None,
    acs_cap: dict[str, bool] | None = None,
    acs_ctl: dict[str, bool] | None = None,
    revision: int = 0x01,
) -> bytes:
    """A 4096-byte config space with a power-management, MSI and PCIe capability and, when
    asked, AER and ACS extended capabilities: the register layout of the PCIe specification."""
    space = bytearray(PCI_CFG_SPACE_EXP_SIZE)

    def put(offset: int, value: int, size: int) -> None:
        space[offset:offset + size] = value.to_bytes(size, "little")

    put(PCI_VENDOR_ID, vendor_id, 2)
    put(PCI_DEVICE_ID, device_id, 2)
    put(PCI_COMMAND, 0x0406 if bridge_buses is None else 0x0407, 2)  # memory + bus master (+ I/O)
    put(PCI_STATUS, PCI_STATUS_CAP_LIST, 2)
    put(PCI_CLASS_REVISION, revision, 1)
    put(PCI_CLASS_DEVICE, class_code, 2)
    put(PCI_HEADER_TYPE, PCI_HEADER_TYPE_BRIDGE if bridge_buses else PCI_HEADER_TYPE_NORMAL, 1)
    if bridge_buses:
        put(PCI_PRIMARY_BUS, bridge_buses[0], 1)
        put(PCI_SECONDARY_BUS, bridge_buses[1], 1)
        put(PCI_SUBORDINATE_BUS, bridge_buses[2], 1)
    put(PCI_CAPABILITY_LIST, 0x40, 1)
    # Power management (id 0x01) -> MSI (id 0x05) -> PCI Express (id 0x10)
    put(0x40, 0x01, 1)
    put(0x41, 0x50, 1)
    put(0x42, 0x0003, 2)
    put(0x50, 0x05, 1)
    put(0x51, 0x70, 1)
    put(0x52, 0x0080, 2)
    exp = 0x70
    put(exp + PCI_CAP_LIST_ID, PCI_CAP_ID_EXP, 1)
    put(exp + PCI_CAP_LIST_NEXT, 0x00, 1)
    put(exp + PCI_EXP_FLAGS, 0x0002 | (port_type_code(port_type) << 4), 2)
    put(exp + PCI_EXP_LNKCAP, speed_code(cap_speed_gts) | ((cap_width or 0) << 4) | (port_number << 24), 4)
    dl_active = 0x2000 if port_type in ("Root Port", "Downstream Port") and sta_width else 0
    put(exp + PCI_EXP_LNKSTA, speed_code(sta_speed_gts) | ((sta_width or 0) << 4) | dl_active, 2)
    max_code = speed_code(cap_speed_gts)
    put(exp + PCI_EXP_LNKCAP2, sum(1 << code for code in range(1, max_code + 1)), 4)
    put(exp + PCI_EXP_LNKCTL2, speed_code(target_speed_gts if target_speed_gts is not None else cap_speed_gts), 2)
    # Extended: AER (id 0x0001) at 0x100, then ACS at 0x148 when present.
    acs_offset = 0x148 if acs_cap is not None else 0
    put(0x100, 0x0001 | (2 << 16) | (acs_offset << 20), 4)
    if acs_cap is not None:
        put(acs_offset, PCI_EXT_CAP_ID_ACS | (1 << 16), 4)
        put(acs_offset + PCI_ACS_CAP, acs_word(acs_cap), 2)
        put(acs_offset + PCI_ACS_CTRL, acs_word(acs_ctl or {}), 2)
    return bytes(space)
