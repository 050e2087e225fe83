"""Device header lines of `lspci` (`1b:00.0 3D controller: NVIDIA ...`): bus id, class, vendor, ids.

With or without the domain, `-nn` ids and class codes, `-n` numbers only, and with text
before the bus id (a script's `Card: `) when the class is one lspci knows. A header's fields
other than the bus id depend only on the text after it, so `header_fields` is memoized on that
text: a 5,000-device output has a few dozen distinct device descriptions.
"""

from __future__ import annotations

from functools import lru_cache

from k3diag.parse.ids import normalize_bdf
from k3diag.parse.lazy_re import lazy

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
_HEADER_RE = lazy(rf"(?:^|(?<=\s))(?P<bdf>{_BDF})(?:\s+(?P<rest>\S.*))?$")
# `3D controller [0302]: NVIDIA ...`; the class name has no colon.
_CLASS_RE = lazy(r"^(?P<class>[A-Za-z0-9][^:\[\]]*?)(?: \[(?P<code>[0-9a-fA-F]{4})\])?: (?P<desc>.*)$")
# `lspci -n`: `21:04.0 0604: 1022:57a3 (prog-if 00 [Normal decode])`
_NUMERIC_RE = lazy(r"^(?P<code>[0-9a-fA-F]{4}): (?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})(?P<desc>.*)$")
# Both searched, so each may start only where a run of blanks does: tried from inside a run, `\s*` ran to its
# end from every blank (quadratic: 20,000 blanks in a header took half a second).
_IDS_RE = lazy(r"(?<!\s)\s*\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
_SUFFIX_RE = lazy(r"(?<!\s)\s*\((?:rev [0-9a-fA-F]+|prog-if [^)]*)\)\s*$")

def header(line: str) -> dict | None:
    """The fields of a device header line, or None when the line is not one."""
    for match in _HEADER_RE.finditer(line):
        fields = _candidate(line[: match.start()].strip() != "", (match.group("rest") or "").strip())
        if fields is None:
            continue
        out = dict(fields)
        out["bdf"] = normalize_bdf(match.group("bdf"))
        return out
    return None


def leading_header(line: str) -> tuple[str, dict] | None | bool:
    """(normalized bus id, fields) of a line that starts with its bus id, None when such a line is no
    header, False when the line does not start with a bus id (then `header` must look further).

    A match at the start of the line runs to its end, so it is the only candidate `header` would
    try: its verdict depends on the text after the bus id alone, which is why it can be cached."""
    # The two spellings lspci prints, `0000:1b:00.0 ` (-D) and `1b:00.0 `, then a blank, in one line
    # that does not end in a blank (as the parser passes them): `_HEADER_RE` would match the same bus
    # id and take the rest after the blanks. Two slices and one short match instead of its match.
    if line and not line[-1].isspace() and "\n" not in line:
        for size in (12, 7):
            if len(line) > size and line[size].isspace() and _LEADING_BDF_RE[size].fullmatch(line, 0, size):
                fields = _candidate(False, line[size:].strip())
                if fields is None:
                    return None
                return ("0000:" + line[:7] if size == 7 else line[:12]), fields
    match = _HEADER_RE.match(line)
    if match is None:
        return False
    fields = _candidate(False, (match.group("rest") or "").strip())
    if fields is None:
        return None
    return fast_bdf(match.group("bdf")), fields


_CANONICAL_BDF_RE = lazy(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_SHORT_BDF_RE = lazy(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_LEADING_BDF_RE = {12: _CANONICAL_BDF_RE, 7: _SHORT_BDF_RE}


def fast_bdf(text: str) -> str:
    """`normalize_bdf` for the two spellings lspci prints, without its integer round trip."""
    if _CANONICAL_BDF_RE.fullmatch(text):
        return text
    if _SHORT_BDF_RE.fullmatch(text):
        return "0000:" + text
    return normalize_bdf(text)


@lru_cache(maxsize=4096)
def _candidate(prefixed: bool, rest: str) -> dict | None:
    """The fields after one bus id candidate; `prefixed` when text stands before the bus id.

    The dict is shared by every caller with the same text: callers copy it before changing it."""
    if not rest:
        return None if prefixed else {}
    numeric = _NUMERIC_RE.match(rest)
    if numeric:
        if prefixed:
            return None
        return {
            "class_code": int(numeric.group("code"), 16),
            "vendor_id": numeric.group("vendor").lower(),
            "device_id": numeric.group("device").lower(),
            "description": _clean(numeric.group("desc")) or None,
        }
    named = _CLASS_RE.match(rest)
    if not named:
        return None
    class_name = named.group("class").strip()
    # Text before the bus id (a script's `Card: `, prose) is allowed only for a class lspci knows.
    if prefixed and class_name not in CLASS_CODES:
        return None
    if not prefixed and class_name not in CLASS_CODES and not _CLASS_NAME_RE.fullmatch(class_name):
        return None
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
        "class_name": class_name,
        "class_code": code,
        "vendor_id": vendor_id or vendor_for(description),
        "device_id": device_id,
        "description": description or None,
    }


_CLASS_NAME_RE = lazy(r"[A-Za-z0-9][\w ./&+-]{1,60}")


def _clean(desc: str) -> str:
    text = desc.strip()
    while True:
        trimmed = _SUFFIX_RE.sub("", text)
        if trimmed == text:
            return text.strip()
        text = trimmed
