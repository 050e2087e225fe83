"""The sysfs snapshot `k3diag.collect.sysfs` writes (JSON): PCI devices, their links, IOMMU groups.

Pure: the JSON text in, `PciDevice` records out. Link speeds come in both kernel spellings
(`16 GT/s` on older kernels, `16.0 GT/s PCIe` on newer ones, `Unknown` when the kernel cannot
tell); the config space, when the snapshot holds more than its first 64 bytes, adds the port
type, bridge bus numbers, LnkCtl2 target speed and the ACS capability.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from k3diag.model.pci import Acs, PciDevice, PciLink
from k3diag.model.source import SourceRef
from k3diag.parse.ids import normalize_bdf
from k3diag.parse.lspci import CLASS_CODES
from k3diag.parse.pci_config import PCI_CFG_SPACE_EXP_SIZE, decode_config
from k3diag.parse.text import Section

FORMAT = "sysfs-snapshot"
SCHEMA = "k3diag.sysfs-snapshot/1"
_SPEED_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")
_HOST_BRIDGE_RE = re.compile(r"^pci([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})$")
_BDF_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_CLASS_NAMES = {code: name for name, code in reversed(list(CLASS_CODES.items()))}
_VENDOR_NAMES = {"10de": "NVIDIA", "1002": "AMD", "1022": "AMD", "15b3": "Mellanox", "8086": "Intel",
                 "10b5": "PLX", "1000": "Broadcom/LSI", "14e4": "Broadcom", "1d0f": "Amazon"}
TRANSLATED_TYPES = ("DMA", "DMA-FQ")
PASSTHROUGH_TYPES = ("identity",)


@dataclass
class SysfsResult:
    devices: list[PciDevice] = field(default_factory=list)
    iommu_units: list[str] | None = None  # None: /sys/class/iommu was not there to read
    iommu_groups: dict[str, str | None] | None = None  # group -> type
    privileged: bool | None = None
    live: bool = False
    root: str | None = None
    notes: list[str] = field(default_factory=list)  # what could not be known, one sentence each
    warnings: list[str] = field(default_factory=list)
    # RDMA devices and peer-memory modules (k3diag.parse.sysfs_infiniband.SnapshotFabric), None when absent.
    fabric: object | None = None


def sniff(text: str) -> float:
    head = text[:2000]
    if SCHEMA in head:
        return 1.0
    return 0.0


def parse(section: Section, input_name: str) -> SysfsResult:
    result = SysfsResult()
    try:
        data = json.loads(section.text)
    except (ValueError, RecursionError) as exc:
        result.warnings.append(f"{input_name}: not a sysfs snapshot (invalid JSON: {exc})")
        return result
    if not isinstance(data, dict):
        result.warnings.append(f"{input_name}: not a sysfs snapshot (a JSON object was expected)")
        return result
    if data.get("schema") != SCHEMA:
        result.warnings.append(f"{input_name}: unknown snapshot schema {data.get('schema')!r}; read as {SCHEMA}")
    result.privileged = data.get("privileged") if isinstance(data.get("privileged"), bool) else None
    result.live = bool(data.get("live"))
    result.root = str(data.get("root")) if data.get("root") is not None else None
    base = "/sys/bus/pci/devices" if result.live or result.root in (None, "/") else f"{result.root}/sys/bus/pci/devices"
    for note in data.get("notes") or []:
        if isinstance(note, str):
            result.notes.append(note)
    for record in data.get("devices") or []:
        if not isinstance(record, dict):
            result.warnings.append(f"{input_name}: a device record is not an object; skipped")
            continue
        try:
            device = _device(record, input_name, base, result)
        except Exception as exc:  # one odd record must not cost the rest
            result.warnings.append(f"{input_name}: device {record.get('bdf')!r} could not be read "
                                   f"({type(exc).__name__}: {exc})")
            continue
        if device is not None:
            result.devices.append(device)
    iommu = data.get("iommu") if isinstance(data.get("iommu"), dict) else {}
    units = iommu.get("class_iommu")
    if isinstance(units, list):
        result.iommu_units = [str(unit) for unit in units]
    groups = iommu.get("groups")
    if isinstance(groups, dict):
        result.iommu_groups = {str(k): (str(v) if v is not None else None) for k, v in groups.items()}
    if "infiniband" in data or "peer_memory" in data:
        from k3diag.parse.sysfs_infiniband import read as read_fabric

        try:
            result.fabric = read_fabric(data, input_name, result.root)
        except Exception as exc:  # the PCI part stays usable
            result.warnings.append(f"{input_name}: the RDMA part could not be read ({type(exc).__name__}: {exc})")
    return result


def parse_speed(text: str | None) -> float | None:
    """`16.0 GT/s PCIe`, `16 GT/s`, `2.5 GT/s` -> 16.0 / 2.5; `Unknown` -> None."""
    if not text:
        return None
    match = _SPEED_RE.match(text)
    if not match:
        return None
    value = float(match.group(1))
    return value if 0 < value <= 256 else None


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(str(text).strip(), base)
    except ValueError:
        return None


def _device(record: dict, input_name: str, base: str, result: SysfsResult) -> PciDevice | None:
    raw_bdf = str(record.get("bdf") or "")
    if not _BDF_RE.match(raw_bdf):
        result.warnings.append(f"{input_name}: {raw_bdf!r} is not a PCI address; skipped")
        return None
    bdf = normalize_bdf(raw_bdf)
    files = record.get("files") if isinstance(record.get("files"), dict) else {}
    device = PciDevice(bdf=bdf, origin=FORMAT)

    def ref(name: str, value: object) -> SourceRef:
        return SourceRef(input_name, None, f"{base}/{raw_bdf}/{name}: {value}")

    class_value = _int(files.get("class"), 16)
    if class_value is not None:
        device.class_code = class_value >> 8
        device.class_name = _CLASS_NAMES.get(device.class_code)
        device.is_bridge = device.class_code == 0x0604
        device.add_source(ref("class", files.get("class")))
    vendor = _int(files.get("vendor"), 16)
    product = _int(files.get("device"), 16)
    device.vendor_id = f"{vendor:04x}" if vendor is not None else None
    device.device_id = f"{product:04x}" if product is not None else None
    device.description = _describe(device)
    numa = _int(files.get("numa_node"))
    if numa is not None and numa >= 0:
        device.numa_node = numa
        device.add_source(ref("numa_node", numa))
    if isinstance(record.get("driver"), str):
        device.driver = record["driver"]
    group = _int(record.get("iommu_group"))
    device.iommu_group = group
    if isinstance(record.get("net"), list):
        device.net_names = [str(name) for name in record["net"]]
    _place(device, record.get("path"))
    _link(device, files, ref)
    _config(device, record, input_name, base, raw_bdf, result)
    if device.link is not None:
        device.link.recompute_downgrades()
    device.source = device.sources[0] if device.sources else SourceRef(input_name, None, f"{base}/{raw_bdf}")
    return device


def _place(device: PciDevice, path: object) -> None:
    """Parent and host bridge from `devices/pci0000:00/0000:00:01.0/0000:01:00.0`."""
    if not isinstance(path, str):
        return
    parts = [part for part in path.split("/") if part]
    chain = [part.lower() for part in parts if _BDF_RE.match(part)]
    for part in parts:
        host = _HOST_BRIDGE_RE.match(part)
        if host:
            device.host_bridge = f"{int(host.group(1), 16):04x}:{int(host.group(2), 16):02x}"
    if device.bdf in chain:
        index = chain.index(device.bdf)
        if index > 0:
            device.parent = normalize_bdf(chain[index - 1])


def _link(device: PciDevice, files: dict, ref) -> None:
    names = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
    if not any(name in files for name in names):
        return
    link = PciLink()
    link.sta_speed_gts = parse_speed(files.get("current_link_speed"))
    link.sta_width = _int(files.get("current_link_width"))
    link.cap_speed_gts = parse_speed(files.get("max_link_speed"))
    cap_width = _int(files.get("max_link_width"))
    link.cap_width = cap_width if cap_width else None
    if "current_link_width" in files or "current_link_speed" in files:
        link.source = ref("current_link_speed/width",
                          f"{files.get('current_link_speed', '?')}, x{files.get('current_link_width', '?')}")
    if "max_link_width" in files or "max_link_speed" in files:
        link.cap_source = ref("max_link_speed/width",
                              f"{files.get('max_link_speed', '?')}, x{files.get('max_link_width', '?')}")
    device.link = link
    device.add_source(link.source)
    device.add_source(link.cap_source)


def _config(device: PciDevice, record: dict, input_name: str, base: str, raw_bdf: str, result: SysfsResult) -> None:
    hex_text = record.get("config_hex")
    if not isinstance(hex_text, str):
        device.capabilities_read = False if "config" in (record.get("errors") or {}) else None
        return
    try:
        data = bytes.fromhex(hex_text)
    except ValueError:
        result.warnings.append(f"{input_name}: the config space of {raw_bdf} is not hex; ignored")
        return
    space = decode_config(data)
    config_ref = SourceRef(input_name, None, f"{base}/{raw_bdf}/config ({len(data)} bytes)")
    for warning in space.warnings:
        if len(data) > 64:  # the 64-byte case is said once for all devices in the notes
            result.warnings.append(f"{raw_bdf}: {warning}")
    device.capabilities_read = len(data) >= PCI_CFG_SPACE_EXP_SIZE and space.capabilities_readable
    if space.vendor_id is not None and device.vendor_id is None:
        device.vendor_id = f"{space.vendor_id:04x}"
    if space.class_code is not None and device.class_code is None:
        device.class_code = space.class_code
        device.class_name = _CLASS_NAMES.get(space.class_code)
    if space.is_bridge:
        device.is_bridge = True
        device.primary_bus = space.primary_bus
        device.secondary_bus = space.secondary_bus
        device.subordinate_bus = space.subordinate_bus
    pcie = space.pcie
    if pcie is not None:
        device.port_type = pcie.port_type
        link = device.link or PciLink()
        if link.cap_speed_gts is None:
            link.cap_speed_gts = pcie.cap_speed_gts
        if link.cap_width is None:
            link.cap_width = pcie.cap_width
        if link.sta_speed_gts is None:
            link.sta_speed_gts = pcie.sta_speed_gts
        if link.sta_width is None:
            link.sta_width = pcie.sta_width
        link.target_speed_gts = pcie.target_speed_gts
        link.port_number = pcie.port_number
        if pcie.supported_speeds_gts:
            link.supported_max_speed_gts = max(pcie.supported_speeds_gts)
        if link.source is None:
            link.source = config_ref
        if link.cap_source is None:
            link.cap_source = config_ref
        device.link = link
    if space.acs is not None:
        device.acs = Acs(cap=dict(space.acs.cap), ctl=dict(space.acs.ctl), source=SourceRef(
            input_name, None,
            f"{base}/{raw_bdf}/config: ACS control at {space.acs.offset + 6:#x} = "
            + " ".join(f"{name}{'+' if on else '-'}" for name, on in space.acs.ctl.items())))
        device.add_source(device.acs.source)
    device.add_source(config_ref)


def _describe(device: PciDevice) -> str | None:
    parts = []
    if device.class_name:
        parts.append(device.class_name)
    elif device.class_code is not None:
        parts.append(f"class {device.class_code:04x}")
    vendor = _VENDOR_NAMES.get(device.vendor_id or "")
    ids = f"{device.vendor_id}:{device.device_id}" if device.vendor_id and device.device_id else None
    if vendor or ids:
        parts.append(" ".join(part for part in (vendor, f"[{ids}]" if ids else None) if part))
    return ": ".join(parts) if parts else None
