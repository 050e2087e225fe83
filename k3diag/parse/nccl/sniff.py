"""Is this text an NCCL/RCCL log? And the bus ids of nccl-tests headers (shared with that parser)."""

from __future__ import annotations

import re

from k3diag.parse.ids import normalize_bdf
from k3diag.parse.nccl.patterns import VERSION_RE as _VERSION_RE


def bus_id_from_tests_header(text: str) -> str | None:
    """nccl-tests prints `[0x1b]` (bus only), `[0002:00:01]` (domain:bus:device) or `[0000:12:00.0]`."""
    cleaned = text.strip().lower()
    if not cleaned:
        return None
    if cleaned.startswith("0x"):
        try:
            return f"0000:{int(cleaned, 16):02x}:00.0"
        except ValueError:
            return None
    parts = cleaned.split(":")
    try:
        if len(parts) == 3 and "." not in parts[2]:
            return f"{int(parts[0], 16):04x}:{int(parts[1], 16):02x}:{int(parts[2], 16):02x}.0"
    except ValueError:
        return None
    bdf = normalize_bdf(cleaned)
    return bdf if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bdf) else None


# A Markdown document (a README, notes, an issue body saved as .md) quotes NCCL lines as often as it
# holds a log: its code blocks are read as an NCCL log only when they hold this many NCCL lines. Fewer
# are an example (a README showing `NCCL INFO Using network Socket` in three lines). A short excerpt in
# an issue cannot be told from such an example, so it is not judged either (the report says so and asks
# for the log itself); the same lines saved as a file of their own are read, however few.
MIN_LINES_IN_DOCUMENT = 10


def _is_tag_line(line: str) -> bool:
    return " NCCL INFO " in line or " NCCL WARN " in line or line.startswith(("NCCL INFO ", "NCCL WARN "))


def _is_version_line(line: str) -> bool:
    return ("NCCL version" in line or "RCCL version" in line) and _VERSION_RE.search(line) is not None


def count_lines(text: str) -> int:
    """How many lines of `text` are NCCL's own (a tagged INFO/WARN line or the version line)."""
    return sum(1 for line in text.split("\n") if _is_tag_line(line) or _is_version_line(line))


def sniff(text: str) -> float:
    """Confident for NCCL/RCCL logs; low for nccl-tests output that merely carries NCCL INFO lines."""
    lines = text.split("\n", 4000)[:4000]
    nccl = 0
    via = 0
    tests_markers = 0
    for line in lines:
        if _is_tag_line(line):
            nccl += 1
            if " via " in line:
                via += 1
        elif _is_version_line(line):
            nccl += 1
        stripped = line.lstrip()
        if (
            stripped.startswith("# nThread")
            or stripped.startswith("# nThreads")
            or stripped.startswith("# Collective test starting")
            or "Avg bus bandwidth" in stripped
            or "Out of bounds values" in stripped
            or (stripped.startswith("#") and " size " in line and " count " in line and "busbw" in line)
        ):
            tests_markers += 1
    if tests_markers:
        return 0.3 if nccl else 0.0
    if via or nccl >= 3:
        return 0.95
    if nccl:
        return 0.6
    return 0.0
