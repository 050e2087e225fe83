"""Identifier spellings, normalized so facts from different tools join on the same thing.

PCI bus ids as nvidia-smi, lspci, NCCL and sysfs spell them, and the kernel's CPU lists. This
sits in `model/` (the lowest layer) because the model indexes devices by bus id, and the
parsers, collectors and rules all need the same spelling.
"""

from __future__ import annotations

import re

# nvidia-smi prints 00000000:1B:00.0 (8-digit domain), lspci 0000:1b:00.0 or 1b:00.0,
# NCCL 1b000 or 0x1b000 (bus<<12 | device<<4... as a packed busId), sysfs 0000:1b:00.0.
_BDF_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$"
)


# The spelling normalize_bdf returns: most calls (every lspci device, twice as it is merged) are
# given it already, and a match is cheaper than the integer round trip.
_CANONICAL_BDF_RE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def normalize_bdf(text: str) -> str:
    """Return `dddd:bb:dd.f` in lower case, or the input stripped if it is not a BDF."""
    if len(text) == 12 and _CANONICAL_BDF_RE.fullmatch(text):
        return text
    cleaned = text.strip()
    match = _BDF_RE.match(cleaned)
    if not match:
        return cleaned.lower()
    domain = int(match.group("domain") or "0", 16)
    return f"{domain:04x}:{int(match.group('bus'), 16):02x}:{int(match.group('dev'), 16):02x}.{match.group('fn')}"


def is_bdf(text: str) -> bool:
    return bool(_BDF_RE.match(text.strip()))


def bdf_from_nccl_busid(text: str) -> str | None:
    """NCCL prints a rank's bus id as the hex of (domain<<20 | bus<<12 | device<<4 ... ) e.g. `1b000`, `bc000`.

    In NCCL's log lines the bracketed value is busId formatted with %lx: domain, bus,
    device and function packed as 0xDDDDBBddf where the last hex digit is function and the
    one before it the device (a `1b000` is 0000:1b:00.0).
    """
    cleaned = text.strip().lower()
    if cleaned.startswith("0x"):
        cleaned = cleaned[2:]
    if not re.fullmatch(r"[0-9a-f]{4,12}", cleaned):
        return None
    value = int(cleaned, 16)
    function = value & 0xF
    device = (value >> 4) & 0xFF
    bus = (value >> 12) & 0xFF
    domain = value >> 20
    if function > 7 or device > 0x1F:
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def parse_cpulist(text: str) -> list[int]:
    """Expand a kernel cpulist such as `0-3,8,10-11`."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, _, high = part.partition("-")
            if low.isdigit() and high.isdigit():
                cpus.extend(range(int(low), int(high) + 1))
        elif part.isdigit():
            cpus.append(int(part))
    return cpus


def fold_ranges(numbers: list[int]) -> str:
    """Sorted integers as the kernel and nvidia-smi write CPU lists: [0, 1, 2, 3, 8] -> "0-3,8"
    (the inverse of `parse_cpulist`)."""
    if not numbers:
        return ""
    runs: list[str] = []
    start = previous = numbers[0]
    for number in numbers[1:] + [None]:  # type: ignore[list-item]
        if number is not None and number == previous + 1:
            previous = number
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ",".join(runs)
