"""What one line of `lspci -vv` says, as a pure function of its text (`classify`), and whether a
text is lspci output at all (`sniff`).

The bulk parser (`k3diag.parse.lspci`) classifies each distinct line once and replays the
result on every occurrence; the patterns here are shared with the per-line parser.
"""

from __future__ import annotations

import re
import sys

from k3diag.parse.lazy_re import lazy
from k3diag.parse.lspci_header import header, leading_header
from k3diag.parse.text import prompt_command

_SPEED = r"(?P<{name}>[0-9.]+|unknown|Unknown)\s*GT/s"
LNKCAP_RE = lazy(
    r"^LnkCap:\s*(?:Port #(?P<port>\d+),\s*)?Speed\s+" + _SPEED.format(name="speed") + r"[^,]*,\s*Width x(?P<width>\d+)"
)
LNKSTA_RE = lazy(
    r"^LnkSta:\s*Speed\s+" + _SPEED.format(name="speed") + r"(?:\s*\((?P<smark>ok|downgraded)\))?"
    r"\s*,\s*Width x(?P<width>\d+)(?:\s*\((?P<wmark>ok|downgraded)\))?"
)
# `LnkSta: Speed unknown (downgraded), Width x0 (downgraded)` on a port with nothing behind it
LNKSTA_UNKNOWN_RE = lazy(r"^LnkSta:\s*Speed\s+unknown", re.I)
LNKCAP2_RE = lazy(r"^LnkCap2:\s*Supported Link Speeds:\s*(?:[0-9.]+-)?(?P<max>[0-9.]+)\s*GT/s")
LNKCTL2_RE = lazy(r"^LnkCtl2:\s*Target Link Speed:\s*(?P<speed>[0-9.]+)\s*GT/s")
ACS_RE = lazy(r"^ACS(?P<which>Cap|Ctl):\s*(?P<flags>.*)$")
FLAG_RE = lazy(r"(?P<name>[A-Za-z][A-Za-z0-9]*)(?P<value>[+-])")
EXPRESS_RE = lazy(r"Express (?:\(v\d+\) )?(?P<type>[A-Za-z/ -]+?)(?: \(Slot[+-]\))?, (?:MSI|IRQ)")
BUS_RE = lazy(
    r"^Bus: primary=(?P<primary>[0-9a-fA-F]{2}), secondary=(?P<secondary>[0-9a-fA-F]{2}), "
    r"subordinate=(?P<subordinate>[0-9a-fA-F]{2})"
)
IOMMU_GROUP_RE = lazy(r"(?:^IOMMU group:\s*|IOMMU group\s+)(?P<group>\d+)")
# The body lines worth a closer look; everything else is skipped with one regex match.
INTERESTING_RE = lazy(
    r"\s*(?:Lnk(?:Cap|Sta|Ctl2)|ACSC|Bus: primary|Kernel |NUMA node|Physical Slot|Capabilities|IOMMU group|Flags:)"
)
# The lines the bulk parser visits: every line that does not start with a tab (headers, blank
# lines, prose, prompts, space-indented pastes), and tab-indented lines that are blank or start
# with a key `_Parser._body` acts on. The literal `\n` leads, so the engine jumps from line to line and
# rejects most tab-indented lines on their first letter. Every other line is one `_Parser._line` would
# pass over: its key is not one `_body` uses, a `Flags:` line names no IOMMU group, a
# `Capabilities:` line names no Express port and no ACS (whether a device has any capability at
# all is looked up when its block closes: `_Parser._unvisited_caps`).
# The look-aheads on `Flags:` and `Capabilities:` lines (a tenth of all lines) scan to the end of the
# line in one step and back to each candidate letter (a single-character repeat before a literal):
# a third faster than a loop over the line's runs of other letters, and as linear.
_USED_KEYS = (r"Lnk(?:Cap2?|Sta|Ctl2):|ACSC(?:ap|tl):|Bus: primary=|Kernel (?:driver in use|modules):|NUMA node:"
              r"|Physical Slot:|IOMMU group|Flags:(?=[^\n]*IOMMU group)"
              r"|Capabilities:(?= <access denied>|[^\n]*Express |[^\n]*Access Control Services)")
# A match runs to the end of its line, so it hands the parser the line and where it ends. Tab-indented
# lines, nine in ten, are tried first; the tabs and then any other blanks before the key are each
# taken in one step.
# Possessive repeats (`++`, `*+`) are Python 3.11's; on 3.10 the plain ones match the same lines (no key
# begins with a blank, so giving blanks back never lets one match), a little slower.
_TAKE = "+" if sys.version_info >= (3, 11) else ""
EVENT_RE = lazy(r"\n(?:\t+" + _TAKE + r"[^\S\n]*" + _TAKE + r"(?:" + _USED_KEYS + r"|$)|[^\t\n]|$)[^\n]*" + _TAKE,
                re.M)
# A capability line among those `EVENT_RE` does not visit.
CAPS_LINE_RE = lazy(r"\n\t+" + _TAKE + r"[^\S\n]*" + _TAKE + r"Capabilities:(?! <access denied>)")
KEY_PREFIXES = ("LnkCap:", "LnkSta:", "LnkCap2:", "LnkCtl2:", "ACSCap:", "ACSCtl:", "Bus: primary=")
_SNIFF_KEYS = (
    "LnkCap:", "LnkSta:", "ACSCtl:", "ACSCap:", "Capabilities: [", "Capabilities: <access denied>",
    "Kernel driver in use:", "Control: I/O", "Status: Cap", "Bus: primary=", "NUMA node:", "Physical Slot:",
    "LnkCtl2:", "Kernel modules:",
)

# What a line does (`classify`), as a tuple whose first item is one of these codes; the parser's
# `_on_<code>` step replays it, with the effect `_Parser._line` would have.
SKIP = 0  # nothing (a key the parser does not use, a body line outside any device)
CLOSE = 1  # ends the block: a blank line, a shell prompt running a command
EXACT = 2  # anything unusual: handed to the per-line parser as it is
DRIVER = 3  # `Kernel driver in use:` (value) / `Kernel modules:` (None)
CAPS = 4  # `Capabilities: [..] ...` (Express port type, whether it is ACS)
NUMA = 5
BUS = 6
LNKCAP = 7
LNKSTA = 8
LNKCAP2 = 9
LNKCTL2 = 10
ACS = 11
DENIED = 12  # `Capabilities: <access denied>`
SLOT = 13
IOMMU = 14


def classify(raw: str) -> tuple:
    """What the raw line `raw` does; `(EXACT, raw)` when only the per-line parser's steps cover it."""
    line = raw.rstrip()
    if not line.strip():
        return (CLOSE,)
    if not line[0].isspace() and not line.startswith(KEY_PREFIXES):
        # not a header (`run` tried that first): a prompt ends the block, anything else is prose
        if leading_header(line) is False and header(line) is not None:
            return (EXACT, raw)
        return (CLOSE,) if prompt_command(line) is not None else (SKIP,)
    if INTERESTING_RE.match(line) is None:
        return (SKIP,)
    stripped = line.strip()
    try:
        return _classify_body(stripped, line, raw)
    except Exception:  # a number too long for int() and the like: let `_line` report it
        return (EXACT, raw)

def _classify_body(stripped: str, line: str, raw: str) -> tuple:
    if stripped.startswith("Kernel driver in use:"):
        return (DRIVER, line, stripped.split(":", 1)[1].strip() or None, True)
    if stripped.startswith("Kernel modules:"):
        return (DRIVER, line, None, False)
    if stripped.startswith("Bus: primary="):
        match = BUS_RE.match(stripped)
        buses = None if match is None else tuple(int(match.group(g), 16) for g in ("primary", "secondary",
                                                                                    "subordinate"))
        return (BUS, line, buses)
    if stripped.startswith(KEY_PREFIXES):
        key = stripped.split(":", 1)[0]
        if key == "LnkCap":
            match = LNKCAP_RE.match(stripped)
            values = None if match is None else (
                parse_speed(match.group("speed")), int(match.group("width")),
                int(match.group("port")) if match.group("port") else None)
            return (LNKCAP, line, values)
        if key == "LnkSta":
            match = LNKSTA_RE.match(stripped)
            if match:
                values = ("ok", parse_speed(match.group("speed")), int(match.group("width")), match.group("smark"),
                          match.group("wmark"))
            elif LNKSTA_UNKNOWN_RE.match(stripped):
                width = re.search(r"Width x(\d+)", stripped)
                values = ("unknown", int(width.group(1)) if width else None)
            else:
                values = ("bad", stripped[:80])
            return (LNKSTA, line, values)
        if key == "LnkCap2":
            match = LNKCAP2_RE.match(stripped)
            return (LNKCAP2, line, None if match is None else (parse_speed(match.group("max")),))
        if key == "LnkCtl2":
            match = LNKCTL2_RE.match(stripped)
            return (LNKCTL2, line, None if match is None else (parse_speed(match.group("speed")),))
        match = ACS_RE.match(stripped)
        return (ACS, line, key, parse_flags(match.group("flags") if match else ""))
    if stripped.startswith("NUMA node:"):
        value = stripped.split(":", 1)[1].strip()
        node = int(value) if re.fullmatch(r"-?\d+", value) and int(value) >= 0 else None
        return (NUMA, line, node)
    if stripped.startswith("Physical Slot:"):
        return (SLOT, line, stripped.split(":", 1)[1].strip() or None)
    if stripped.startswith("Capabilities: <access denied>"):
        return (DENIED, line)
    if stripped.startswith(("IOMMU group", "Flags:")):
        group = IOMMU_GROUP_RE.search(stripped)
        return (IOMMU, line, int(group.group("group")) if group else None)
    if stripped.startswith("Capabilities:"):
        express = EXPRESS_RE.search(stripped)
        return (CAPS, line, express.group("type").strip() if express else None,
                "Access Control Services" in stripped)
    return (SKIP,)

def parse_flags(text: str) -> dict[str, bool]:
    return {match.group("name"): match.group("value") == "+" for match in FLAG_RE.finditer(text)}


def parse_speed(text: str | None) -> float | None:
    if text is None or text.lower() == "unknown":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value <= 256 else None


def sniff(text: str) -> float:
    headers = 0
    keys = 0
    fieldish = 0
    tree = 0
    lines = 0
    for raw in head_lines(text, 4000):
        line = raw.rstrip()
        if not line.strip():
            continue
        lines += 1
        stripped = line.strip()
        if "+-" in line or "\\-" in line:
            tree += 1
        if not line[0].isspace() and not line.startswith(KEY_PREFIXES) and header(line) is not None:
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
_FLAG_TOKEN_RE = lazy(r"^[A-Za-z][\w/]*[+-],?$")


def _is_flag_line(stripped: str) -> bool:
    tokens = stripped.split()
    if len(tokens) < 3:
        return False
    flagged = sum(1 for token in tokens if _FLAG_TOKEN_RE.match(token))
    return flagged * 2 >= len(tokens)


def head_lines(text: str, count: int) -> list[str]:
    """`text.split("\\n")[:count]` without splitting the rest of a large text."""
    end = -1
    for _ in range(count):
        end = text.find("\n", end + 1)
        if end < 0:
            return text.split("\n")
    return text[:end].split("\n")
