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


# More CPUs than any machine has (Linux's NR_CPUS is at most 8,192): a list naming more is a garbled or
# hostile cell and is not expanded (`0-4294967295` would be four billion numbers, minutes and gigabytes).
MAX_CPUS = 16_384


def parse_cpulist(text: str) -> list[int]:
    """Expand a kernel cpulist such as `0-3,8,10-11`. Parts that are not a number or a range are skipped,
    as is a range that would take the list past `MAX_CPUS`."""
    cpus: list[int] = []
    for span in _cpu_spans(text):
        if span is not None and len(cpus) + span[1] - span[0] + 1 <= MAX_CPUS:
            cpus.extend(range(span[0], span[1] + 1))
    return cpus


def strict_cpulist(text: str) -> list[int] | None:
    """`parse_cpulist` for a list that must be one whole: None when a part is not a number or a range (a
    cell cut or glued in a paste), or when it names more than `MAX_CPUS` CPUs."""
    spans = list(_cpu_spans(text, keep_empty=True))
    if None in spans or sum(high - low + 1 for low, high in spans) > MAX_CPUS:  # type: ignore[misc]
        return None
    return [cpu for low, high in spans for cpu in range(low, high + 1)]  # type: ignore[misc]


def _cpu_spans(text: str, keep_empty: bool = False):
    """Each part of a cpulist as (low, high), None for one that is neither a number nor a range (`²` is a
    digit to `str.isdigit`, not to `int`); empty parts are left out, or None with `keep_empty`."""
    stripped = text.strip()
    if not stripped:
        return
    for part in stripped.split(","):
        part = part.strip()
        if not part:
            if keep_empty:
                yield None
            continue
        low, dash, high = part.partition("-")
        if not dash:
            high = low
        if low.isascii() and low.isdigit() and high.isascii() and high.isdigit() and int(low) <= int(high):
            yield int(low), int(high)
        else:
            yield None


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
