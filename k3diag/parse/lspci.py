"""`lspci -vv` (and `-v`, `-vvv`, `-nn`, `-n`, grep excerpts of them): PCI devices, links, ACS.

Devices are blocks that start with a header at column 0 (`1b:00.0 3D controller: NVIDIA ...`,
with or without the domain, `-nn` ids and class codes, `-n` numbers only) followed by indented
lines; a blank line ends a block. Indentation is tabs as lspci prints it or spaces as people
paste it. Lines people paste without a header (`lspci -vv | grep ACSCtl`, a LnkSta quoted in
an issue) still yield facts, on devices whose bdf is None. Downgrades are computed from the
numbers; the `(ok)`/`(downgraded)` markers only count when a number is missing (old pciutils
print no markers, new ones print only `(downgraded)`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.pci import Acs, PciDevice, PciLink
from k3diag.model.source import SourceRef
from k3diag.parse.ids import normalize_bdf
from k3diag.parse.text import MAX_LINE_CHARS, Section, normalize, prompt_command

FORMAT = "lspci-vv"

# Class names from pciutils' pci.ids `C` section (the ones seen on servers).
CLASS_CODES: dict[str, int] = {
    "Non-VGA unclassified device": 0x0000,
    "VGA compatible unclassified device": 0x0001,
    "SCSI storage controller": 0x0100,
    "IDE interface": 0x0101,
    "RAID bus controller": 0x0104,
    "SATA controller": 0x0106,
    "Serial Attached SCSI controller": 0x0107,
    "Non-Volatile memory controller": 0x0108,
    "Mass storage controller": 0x0180,
    "Ethernet controller": 0x0200,
    "Token ring network controller": 0x0201,
    "Infiniband controller": 0x0207,
    "Fabric controller": 0x0208,
    "Network controller": 0x0280,
    "VGA compatible controller": 0x0300,
    "XGA compatible controller": 0x0301,
    "3D controller": 0x0302,
    "Display controller": 0x0380,
    "Multimedia video controller": 0x0400,
    "Multimedia audio controller": 0x0401,
    "Audio device": 0x0403,
    "Multimedia controller": 0x0480,
    "RAM memory": 0x0500,
    "Memory controller": 0x0580,
    "Host bridge": 0x0600,
    "ISA bridge": 0x0601,
    "PCI bridge": 0x0604,
    "CardBus bridge": 0x0607,
    "Bridge": 0x0680,
    "Serial controller": 0x0700,
    "Communication controller": 0x0780,
    "PIC": 0x0800,
    "IOMMU": 0x0806,
    "System peripheral": 0x0880,
    "Generic system peripheral": 0x0880,
    "Co-processor": 0x0B40,
    "USB controller": 0x0C03,
    "SMBus": 0x0C05,
    "Serial bus controller": 0x0C80,
    "Encryption controller": 0x1080,
    "Performance counters": 0x1101,
    "Signal processing controller": 0x1180,
    "Processing accelerators": 0x1200,
    "Non-Essential Instrumentation": 0x1300,
    "Unassigned class": 0xFF00,
}

# Vendor name prefixes as pci.ids spells them, longest first where one is a prefix of another.
VENDOR_PREFIXES: tuple[tuple[str, str], ...] = (
    ("NVIDIA Corporation", "10de"),
    ("nVidia Corporation", "10de"),
    ("Advanced Micro Devices, Inc. [AMD/ATI]", "1002"),
    ("Advanced Micro Devices, Inc. [AMD]", "1022"),
    ("Advanced Micro Devices [AMD]", "1022"),
    ("ATI Technologies Inc", "1002"),
    ("Mellanox Technologies", "15b3"),
    ("Intel Corporation", "8086"),
    ("PLX Technology, Inc.", "10b5"),
    ("Broadcom / LSI", "1000"),
    ("Broadcom Inc. and subsidiaries", "14e4"),
    ("Huawei Technologies Co., Ltd.", "19e5"),
    ("Habana Labs Ltd.", "1da3"),
    ("Microsemi / PMC / IDT", "11f8"),
    ("PMC-Sierra Inc.", "11f8"),
    ("Microchip Technology / SMSC", "1055"),
    ("ASPEED Technology, Inc.", "1a03"),
    ("Samsung Electronics Co Ltd", "144d"),
)


def class_code_for(name: str | None) -> int | None:
    if not name:
        return None
    return CLASS_CODES.get(name.strip())


def vendor_for(description: str | None) -> str | None:
    if not description:
        return None
    for prefix, vendor in VENDOR_PREFIXES:
        if description.startswith(prefix):
            return vendor
    return None


_BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_HEADER_RE = re.compile(rf"(?:^|(?<=\s))(?P<bdf>{_BDF})(?:\s+(?P<rest>\S.*))?$")
# `3D controller [0302]: NVIDIA ...`; the class name has no colon.
_CLASS_RE = re.compile(r"^(?P<class>[A-Za-z0-9][^:\[\]]*?)(?: \[(?P<code>[0-9a-fA-F]{4})\])?: (?P<desc>.*)$")
# `lspci -n`: `21:04.0 0604: 1022:57a3 (prog-if 00 [Normal decode])`
_NUMERIC_RE = re.compile(r"^(?P<code>[0-9a-fA-F]{4}): (?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})(?P<desc>.*)$")
_IDS_RE = re.compile(r"\s*\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
_SUFFIX_RE = re.compile(r"\s*\((?:rev [0-9a-fA-F]+|prog-if [^)]*)\)\s*$")

_SPEED = r"(?P<{name}>[0-9.]+|unknown|Unknown)\s*GT/s"
_LNKCAP_RE = re.compile(
    r"^LnkCap:\s*(?:Port #(?P<port>\d+),\s*)?Speed\s+" + _SPEED.format(name="speed") + r"[^,]*,\s*Width x(?P<width>\d+)"
)
_LNKSTA_RE = re.compile(
    r"^LnkSta:\s*Speed\s+" + _SPEED.format(name="speed") + r"(?:\s*\((?P<smark>ok|downgraded)\))?"
    r"\s*,\s*Width x(?P<width>\d+)(?:\s*\((?P<wmark>ok|downgraded)\))?"
)
# `LnkSta: Speed unknown (downgraded), Width x0 (downgraded)` on a port with nothing behind it
_LNKSTA_UNKNOWN_RE = re.compile(r"^LnkSta:\s*Speed\s+unknown", re.I)
_LNKCAP2_RE = re.compile(r"^LnkCap2:\s*Supported Link Speeds:\s*(?:[0-9.]+-)?(?P<max>[0-9.]+)\s*GT/s")
_LNKCTL2_RE = re.compile(r"^LnkCtl2:\s*Target Link Speed:\s*(?P<speed>[0-9.]+)\s*GT/s")
_ACS_RE = re.compile(r"^ACS(?P<which>Cap|Ctl):\s*(?P<flags>.*)$")
_FLAG_RE = re.compile(r"(?P<name>[A-Za-z][A-Za-z0-9]*)(?P<value>[+-])")
_EXPRESS_RE = re.compile(r"Express (?:\(v\d+\) )?(?P<type>[A-Za-z/ -]+?)(?: \(Slot[+-]\))?, (?:MSI|IRQ)")
_BUS_RE = re.compile(
    r"^Bus: primary=(?P<primary>[0-9a-fA-F]{2}), secondary=(?P<secondary>[0-9a-fA-F]{2}), "
    r"subordinate=(?P<subordinate>[0-9a-fA-F]{2})"
)
_IOMMU_GROUP_RE = re.compile(r"(?:^IOMMU group:\s*|IOMMU group\s+)(?P<group>\d+)")
# The body lines worth a closer look; everything else is skipped with one regex match.
_INTERESTING_RE = re.compile(
    r"\s*(?:Lnk(?:Cap|Sta|Ctl2)|ACSC|Bus: primary|Kernel |NUMA node|Physical Slot|Capabilities|IOMMU group|Flags:)"
)
_KEY_PREFIXES = ("LnkCap:", "LnkSta:", "LnkCap2:", "LnkCtl2:", "ACSCap:", "ACSCtl:", "Bus: primary=")
_SNIFF_KEYS = (
    "LnkCap:", "LnkSta:", "ACSCtl:", "ACSCap:", "Capabilities: [", "Capabilities: <access denied>",
    "Kernel driver in use:", "Control: I/O", "Status: Cap", "Bus: primary=", "NUMA node:", "Physical Slot:",
    "LnkCtl2:", "Kernel modules:",
)


@dataclass
class LspciResult:
    devices: list[PciDevice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denied: int = 0  # devices whose capabilities read <access denied>


def sniff(text: str) -> float:
    headers = 0
    keys = 0
    fieldish = 0
    tree = 0
    lines = 0
    for raw in text.split("\n")[:4000]:
        line = raw.rstrip()
        if not line.strip():
            continue
        lines += 1
        stripped = line.strip()
        if "+-" in line or "\\-" in line:
            tree += 1
        if not line[0].isspace() and not line.startswith(_KEY_PREFIXES) and _header(line) is not None:
            headers += 1
            continue
        if stripped.startswith(_SNIFF_KEYS):
            keys += 1
        if stripped.startswith(_BODY_FIELDS) or _is_flag_line(stripped):
            fieldish += 1
    if lines == 0 or tree > lines // 3:
        return 0.0
    if headers and (keys or fieldish >= 2):
        return 0.95
    if keys and fieldish >= 3 and fieldish * 10 >= lines * 6:
        return 0.8  # an excerpt without a device header
    if keys >= 2 and keys * 2 >= lines:
        return 0.8  # `grep ACSCtl` / `grep Lnk` output
    if keys >= 1 and lines <= 3:
        return 0.6
    if headers >= 2 and headers * 2 >= lines:
        return 0.55  # plain `lspci`: names and classes, no links
    return 0.0


# Field names lspci -vv prints inside a device block; used only to recognize excerpts.
_BODY_FIELDS = (
    "Subsystem:", "Control:", "Status:", "Latency:", "Interrupt:", "NUMA node:", "Region ", "Expansion ROM",
    "Capabilities:", "Flags:", "DevCap", "DevCtl", "DevSta", "LnkCap", "LnkCtl", "LnkSta", "SltCap", "SltCtl",
    "SltSta", "RootCap", "RootCtl", "RootSta", "UESta:", "UEMsk:", "UESvrt:", "CESta:", "CEMsk:", "AERCap:",
    "HeaderLog:", "ACSCap:", "ACSCtl:", "Kernel driver", "Kernel modules", "Bus: primary", "I/O behind",
    "Memory behind", "Prefetchable memory", "Secondary status:", "BridgeCtl:", "Address:", "Masking:",
    "Vector table:", "PBA:", "BAR ", "Physical Slot:", "IOMMU group", "DeviceName:", "MaxPayload",
    "AtomicOps", "Compliance De-emphasis", "Transmit Margin", "EmergencyPowerReduction", "10BitTagComp",
    "PTM", "L1Sub", "LaneErrStat", "Dpc", "Caps:", "Arb:", "Ctrl:", "VC0:", "ErrorSrc:",
)
_FLAG_TOKEN_RE = re.compile(r"^[A-Za-z][\w/]*[+-],?$")


def _is_flag_line(stripped: str) -> bool:
    tokens = stripped.split()
    if len(tokens) < 3:
        return False
    flagged = sum(1 for token in tokens if _FLAG_TOKEN_RE.match(token))
    return flagged * 2 >= len(tokens)


def parse(section: Section, input_name: str) -> LspciResult:
    return _Parser(section, input_name).run()


class _Parser:
    def __init__(self, section: Section, input_name: str) -> None:
        self.section = section
        self.input_name = input_name
        self.result = LspciResult()
        self.current: PciDevice | None = None
        self.current_complete = False
        self.acs_listed = False
        self.saw_caps = False
        self.anonymous = False

    # -- driver -------------------------------------------------------------------
    def run(self) -> LspciResult:
        lines = normalize(self.section.text).split("\n")
        while lines and not lines[-1].strip():
            lines.pop()  # a trailing newline is the end of the file, not the end of a block
        for index, raw in enumerate(lines):
            line_no = self.section.first_line + index
            if len(raw) > MAX_LINE_CHARS:
                self.result.warnings.append(f"line {line_no}: longer than {MAX_LINE_CHARS} characters, skipped")
                continue
            line = raw.rstrip()
            try:
                self._line(line, line_no, lines, index)
            except Exception as exc:  # one odd line must not cost the rest of the file
                self.result.warnings.append(f"line {line_no}: could not be read ({type(exc).__name__}: {exc})")
        self._close(complete=self.current_complete)
        if self.result.denied:
            self.result.warnings.append(
                f"{self.result.denied} device(s) show `Capabilities: <access denied>` (lspci ran without root): their "
                "link speed, width and ACS settings are unknown; `sudo lspci -vv` would show them")
        return self.result

    def _line(self, line: str, line_no: int, lines: list[str], index: int) -> None:
        if not line.strip():
            self._close(complete=True)
            return
        if not line[0].isspace() and not line.startswith(_KEY_PREFIXES):
            header = _header(line)
            if header is not None:
                self._close(complete=True)
                self._open(header, line, line_no)
                return
            if prompt_command(line) is not None:
                self._close(complete=True)
            return  # prose, `....` cuts, separators: not part of any device
        if _INTERESTING_RE.match(line) is None:
            return  # most of a block (DevCap, AER masks, MSI...) says nothing k3diag uses
        stripped = line.strip()
        ref = SourceRef(self.input_name, line_no, line)
        self._body(stripped, ref, lines, index)

    # -- blocks -------------------------------------------------------------------
    def _open(self, header: dict, line: str, line_no: int) -> None:
        ref = SourceRef(self.input_name, line_no, line)
        device = PciDevice(bdf=header["bdf"], origin=FORMAT, source=ref)
        device.class_name = header.get("class_name")
        device.class_code = header.get("class_code")
        device.vendor_id = header.get("vendor_id")
        device.device_id = header.get("device_id")
        device.description = header.get("description")
        if device.class_code == 0x0604:
            device.is_bridge = True
        device.add_source(ref)
        self.current = device
        self.current_complete = False
        self.acs_listed = False
        self.saw_caps = False
        self.anonymous = False
        self.result.devices.append(device)

    def _anonymous(self, ref: SourceRef) -> PciDevice:
        device = PciDevice(bdf=None, origin=FORMAT, source=ref)
        self.current = device
        self.current_complete = False
        self.acs_listed = False
        self.saw_caps = False
        self.anonymous = True
        self.result.devices.append(device)
        return device

    def _close(self, complete: bool) -> None:
        device = self.current
        if device is None:
            return
        if device.link is not None:
            device.link.recompute_downgrades()
        if device.access_denied:
            device.capabilities_read = False
        elif self.acs_listed and device.acs is None:
            device.capabilities_read = None  # `lspci -v` names ACS without its settings
            self.result.warnings.append(
                f"{device.bdf or 'a device'}: the ACS capability is listed without its settings (`lspci -v`); "
                "`sudo lspci -vv` shows ACSCtl")
        elif self.saw_caps and (complete or device.driver is not None) and not self.anonymous:
            device.capabilities_read = True
        self.current = None

    # -- body lines -----------------------------------------------------------------
    def _device_for(self, key: str, ref: SourceRef) -> PciDevice:
        """The device a key line belongs to; grep excerpts repeat keys, one device per repeat."""
        device = self.current
        if device is None:
            return self._anonymous(ref)
        if self.anonymous and _already_has(device, key):
            self._close(complete=False)
            return self._anonymous(ref)
        return device

    def _body(self, stripped: str, ref: SourceRef, lines: list[str], index: int) -> None:
        if stripped.startswith("Kernel driver in use:") or stripped.startswith("Kernel modules:"):
            if self.current is not None:
                if stripped.startswith("Kernel driver in use:"):
                    self.current.driver = stripped.split(":", 1)[1].strip() or None
                    self.current.add_source(ref)
                self.current_complete = True
            return
        if stripped.startswith(_KEY_PREFIXES):
            self._key_line(stripped, ref, lines, index)
            return
        device = self.current
        if device is None:
            if stripped.startswith("Capabilities: <access denied>"):
                device = self._anonymous(ref)
            else:
                return
        if stripped.startswith("NUMA node:"):
            value = stripped.split(":", 1)[1].strip()
            if re.fullmatch(r"-?\d+", value) and int(value) >= 0:
                device.numa_node = int(value)
                device.add_source(ref)
        elif stripped.startswith("Physical Slot:"):
            device.physical_slot = stripped.split(":", 1)[1].strip() or None
        elif stripped.startswith("Capabilities: <access denied>"):
            if not device.access_denied:
                device.access_denied = True
                self.result.denied += 1
                device.add_source(ref)
        elif stripped.startswith("Capabilities:"):
            self.saw_caps = True
            express = _EXPRESS_RE.search(stripped)
            if express and device.port_type is None:
                device.port_type = express.group("type").strip()
                device.add_source(ref)
            if "Access Control Services" in stripped:
                self.acs_listed = True
        elif stripped.startswith(("IOMMU group", "Flags:")):
            group = _IOMMU_GROUP_RE.search(stripped)
            if group:
                device.iommu_group = int(group.group("group"))

    def _key_line(self, stripped: str, ref: SourceRef, lines: list[str], index: int) -> None:
        key = stripped.split(":", 1)[0]
        if stripped.startswith("Bus: primary="):
            match = _BUS_RE.match(stripped)
            device = self._device_for("Bus", ref)
            if match:
                device.primary_bus = int(match.group("primary"), 16)
                device.secondary_bus = int(match.group("secondary"), 16)
                device.subordinate_bus = int(match.group("subordinate"), 16)
                device.is_bridge = True
                device.add_source(ref)
            return
        device = self._device_for(key, ref)
        if key == "LnkCap":
            match = _LNKCAP_RE.match(stripped)
            link = device.link or PciLink()
            if match:
                link.cap_speed_gts = _speed(match.group("speed"))
                link.cap_width = int(match.group("width"))
                if match.group("port"):
                    link.port_number = int(match.group("port"))
            link.cap_source = ref
            device.link = link
            device.add_source(ref)
        elif key == "LnkSta":
            link = device.link or PciLink()
            match = _LNKSTA_RE.match(stripped)
            if match:
                link.sta_speed_gts = _speed(match.group("speed"))
                link.sta_width = int(match.group("width"))
                if match.group("smark"):
                    link.speed_downgraded = match.group("smark") == "downgraded"
                if match.group("wmark"):
                    link.width_downgraded = match.group("wmark") == "downgraded"
            elif _LNKSTA_UNKNOWN_RE.match(stripped):
                width = re.search(r"Width x(\d+)", stripped)
                link.sta_width = int(width.group(1)) if width else None
            else:
                self.result.warnings.append(f"line {ref.line}: LnkSta not understood: {stripped[:80]!r}")
            link.source = ref
            device.link = link
            device.add_source(ref)
        elif key == "LnkCap2":
            match = _LNKCAP2_RE.match(stripped)
            if match:
                link = device.link or PciLink()
                link.supported_max_speed_gts = _speed(match.group("max"))
                device.link = link
        elif key == "LnkCtl2":
            match = _LNKCTL2_RE.match(stripped)
            if match:
                link = device.link or PciLink()
                link.target_speed_gts = _speed(match.group("speed"))
                device.link = link
                device.add_source(ref)
        elif key in ("ACSCap", "ACSCtl"):
            match = _ACS_RE.match(stripped)
            text = match.group("flags") if match else ""
            flags = _flags(text)
            # A terminal or a chat window can wrap the line: `UpstreamFwd+ \nEgressCtrl- DirectTrans-`.
            if len(flags) < 7 and index + 1 < len(lines):
                following = lines[index + 1].strip()
                if following and all(_FLAG_RE.fullmatch(token) for token in following.split()):
                    flags.update(_flags(following))
            acs = device.acs or Acs()
            if key == "ACSCap":
                acs.cap = flags
            else:
                acs.ctl = flags
                acs.source = ref
                if len(flags) < 7:
                    self.result.warnings.append(f"line {ref.line}: ACSCtl shows {len(flags)} of 7 flags (cut short?)")
            device.acs = acs
            device.add_source(ref)


def _already_has(device: PciDevice, key: str) -> bool:
    link = device.link
    if key == "LnkCap":
        return link is not None and link.cap_source is not None
    if key == "LnkSta":
        return link is not None and link.source is not None
    if key == "LnkCtl2":
        return link is not None and link.target_speed_gts is not None
    if key == "LnkCap2":
        return link is not None and link.supported_max_speed_gts is not None
    if key == "ACSCtl":
        return device.acs is not None and bool(device.acs.ctl)
    if key == "ACSCap":
        return device.acs is not None and bool(device.acs.cap)
    if key == "Bus":
        return device.secondary_bus is not None
    return False


def _flags(text: str) -> dict[str, bool]:
    return {match.group("name"): match.group("value") == "+" for match in _FLAG_RE.finditer(text)}


def _speed(text: str | None) -> float | None:
    if text is None or text.lower() == "unknown":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value <= 256 else None


def _header(line: str) -> dict | None:
    """The fields of a device header line, or None when the line is not one."""
    for match in _HEADER_RE.finditer(line):
        prefix = line[: match.start()]
        rest = (match.group("rest") or "").strip()
        bdf = normalize_bdf(match.group("bdf"))
        if not rest:
            if prefix.strip():
                continue
            return {"bdf": bdf}
        numeric = _NUMERIC_RE.match(rest)
        if numeric:
            if prefix.strip():
                continue
            return {
                "bdf": bdf,
                "class_code": int(numeric.group("code"), 16),
                "vendor_id": numeric.group("vendor").lower(),
                "device_id": numeric.group("device").lower(),
                "description": _clean(numeric.group("desc")) or None,
            }
        named = _CLASS_RE.match(rest)
        if not named:
            continue
        class_name = named.group("class").strip()
        # Text before the bus id (a script's `Card: `, prose) is allowed only for a class lspci knows.
        if prefix.strip() and class_name not in CLASS_CODES:
            continue
        if not prefix.strip() and class_name not in CLASS_CODES and not re.fullmatch(r"[A-Za-z0-9][\w ./&+-]{1,60}", class_name):
            continue
        desc = named.group("desc")
        vendor_id = device_id = None
        ids = None
        for ids in _IDS_RE.finditer(desc):
            pass
        if ids is not None:
            vendor_id, device_id = ids.group("vendor").lower(), ids.group("device").lower()
            desc = desc[: ids.start()] + desc[ids.end():]
        description = _clean(desc)
        code = int(named.group("code"), 16) if named.group("code") else CLASS_CODES.get(class_name)
        return {
            "bdf": bdf,
            "class_name": class_name,
            "class_code": code,
            "vendor_id": vendor_id or vendor_for(description),
            "device_id": device_id,
            "description": description or None,
        }
    return None


def _clean(desc: str) -> str:
    text = desc.strip()
    while True:
        trimmed = _SUFFIX_RE.sub("", text)
        if trimmed == text:
            return text.strip()
        text = trimmed
