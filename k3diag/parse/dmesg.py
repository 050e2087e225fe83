"""Kernel log (`dmesg`, `dmesg -T`, `journalctl -k`): PCIe AER errors, NVIDIA Xids, NVSwitch SXids, IOMMU setup.

Reads the lines that matter and ignores the rest: `NVRM: Xid (PCI:0000:02:00): 79, ...`,
the multi-line "has fallen off the bus" of newer drivers (no Xid number), AER reports
(`pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=...` and the
status bits below them), `iommu: Default domain type: Translated`, `DMAR: IOMMU enabled`,
AMD-Vi lines and the `Kernel command line:`. Lines may carry a `[ 12.345]` timestamp, a
`dmesg -T` date, a journal prefix, or nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.pci import DmesgEvent
from k3diag.model.source import SourceRef
from k3diag.parse.ids import normalize_bdf
from k3diag.parse.lazy_re import lazy
from k3diag.parse.text import MAX_LINE_CHARS, QUOTE_MARKS, Section, normalize, prompt_command

FORMAT = "dmesg"

# The stamps a kernel log line starts with, shared by the prefix reader and the sniffer:
# journalctl / syslog `Sep 19 16:18:04 host kernel: `, a localized month (`фев 12 00:48:02`), a paste that
# collapsed `May  6` to `May 6`, the host left out; ISO stamps (`journalctl -o short-iso`, rsyslog on Ubuntu
# 24.04, `dmesg --time-format iso`); dmesg's `[  12.345]` and `dmesg -T`'s `[Sat Oct 12 18:38:44 2024]`.
# quote marks (e-mail, Markdown: `> `, `> > `, as `text.unquote_reply` takes them), a syslog priority `<4>`
_QUOTE_PRIORITY = r"^(?:" + QUOTE_MARKS + r")?(?:<\d+>)?"
_JOURNAL_STAMP = r"\w{3,4}\.? +\d{1,2} \d\d:\d\d:\d\d(?: \S+)? kernel: "
_ISO_STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[-+]\d\d:?\d\d)?"
_BRACKET_STAMP = r"\[(?:\s*(?P<ts>\d+\.\d+)|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d [\d:]+ \d{4})\]"
_PREFIX_RE = lazy(
    _QUOTE_PRIORITY
    + r"(?:[a-z]+\s*:[a-z]+\s*: )?"  # `dmesg -x`: `kern  :err   : `
    + r"(?:(?:" + _JOURNAL_STAMP + r")|(?:" + _ISO_STAMP + r"(?: \S+ kernel:)? )|kernel: )?"  # or `kernel: ` (a grep)
    + r"(?:" + _BRACKET_STAMP + r"\s?)?"
)
# a line that carries a stamp (what `sniff` counts), behind a quote mark or priority at most
_STAMPED_RE = lazy(_QUOTE_PRIORITY + r"(?:" + _BRACKET_STAMP + "|" + _JOURNAL_STAMP + "|" + _ISO_STAMP + r" \S+ kernel: )")
_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# `NVRM: Xid (PCI:0000:02:00): 79, ...`; drivers before ~2013 left out `PCI:` (`NVRM: Xid (0000:01:00): 13, ...`);
# MIG adds the instances: `(PCI:0000:01:00 GPU-I:05 GPU-CI:00)` (the driver's format strings in krcReportXid)
_XID_RE = lazy(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
    r"(?:\s+GPU-I:(?P<gi>\d+))?(?:\s+GPU-CI:(?P<ci>\d+))?\): (?P<code>\d+),\s*(?P<msg>.*)$"
)
# Since ~R470 the message starts with the process the driver blames: `pid=1234, name=python3, ` or
# `pid='<unknown>', name=<unknown>, ` (no process); the Error Containment Xids (94/95) give only `pid=7194, `.
_XID_PROCESS_RE = lazy(r"^pid=(?P<pid>'?<unknown>'?|\d+),\s*(?:name=(?P<name>[^,]*),\s*)?")
_FALLEN_GPU_RE = lazy(r"NVRM: The NVIDIA GPU (?P<bdf>" + _BDF + r")")
_GPU_AT_RE = lazy(r"NVRM: GPU at PCI:(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})")
# the GPU named on the "fallen off the bus" line itself: `NVRM: GPU at 0000:01:00.0 has fallen off the bus.`
# (drivers of the 2010s) and `NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.` (after an Xid 79)
_FALLEN_BDF_RE = lazy(r"NVRM: GPU (?:at )?(?P<bdf>" + _BDF + r")[: ]")
# The driver's name starts where a word does (searched from inside a 20,000-character word, `\S+` ran to its
# end from every character: quadratic).
_AER_ERROR_RE = lazy(
    r"(?<!\S)(?P<driver>\S+) (?P<bdf>" + _BDF + r"): (?:AER: )?PCIe Bus Error: severity=(?P<sev>[^,]+),\s*type=(?P<type>[^,]+)"
)
# kernels 5.x put `AER: ` before the status bits too: `pcieport 0000:00:1c.5: AER:    [ 0] RxErr    (First)`
_AER_BIT_RE = lazy(r"(?P<bdf>" + _BDF + r"):\s+(?:AER:\s+)?\[\s*\d+\]\s+(?P<name>[A-Za-z][\w /-]*?)\s*(?:\(First\))?\s*$")
# The NVSwitch driver (HGX/DGX): one error as up to three lines with the same SXid,
#   nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, ...}
#   nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt
#   nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00
_SXID_RE = lazy(r"nvidia-nvswitch\d*: SXid \(PCI:(?P<bdf>" + _BDF + r")\): (?P<code>\d+),\s*(?P<rest>.*)$")
_DOMAIN_RE = lazy(r"iommu: Default domain type: (?P<type>Translated|Passthrough)", re.I)
_CMDLINE_RE = lazy(r"(?:Kernel )?[Cc]ommand line: (?P<cmdline>.*)$")


@dataclass
class DmesgResult:
    events: list[DmesgEvent] = field(default_factory=list)
    default_domain: str | None = None  # "translated" | "passthrough" from `iommu: Default domain type`
    iommu_enabled: bool | None = None  # DMAR/AMD-Vi said it is on
    iommu_lines: list[SourceRef] = field(default_factory=list)
    cmdline: str | None = None
    cmdline_source: SourceRef | None = None
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    lines = [line for line in text.split("\n")[:3000] if line.strip()]
    if not lines:
        return 0.0
    stamped = 0
    wrapped = 0  # continuation lines of a command line a terminal wrapped
    in_cmdline = False
    for line in lines:
        if _STAMPED_RE.match(line):
            stamped += 1
            in_cmdline = "ommand line:" in line
        elif in_cmdline:
            wrapped += 1
    known = sum(1 for line in lines
                if re.search(r"NVRM: |PCIe Bus Error|AER: |DMAR: |AMD-Vi: |iommu: |pcieport |SXid \(PCI:", line))
    if stamped >= 2 and stamped * 2 >= len(lines):
        return 0.85
    if stamped >= 2 and (stamped + wrapped) * 10 >= len(lines) * 7:
        return 0.7
    if known and known * 2 >= len(lines):
        return 0.7
    return 0.0


def parse(section: Section, input_name: str) -> DmesgResult:
    result = DmesgResult()
    lines = normalize(section.text).split("\n")
    last_aer: DmesgEvent | None = None
    pending_fallen: tuple[str, SourceRef] | None = None  # (bdf, line) of `NVRM: The NVIDIA GPU <bdf>`
    gpu_at: str | None = None
    cmdline_open = False
    for index, raw in enumerate(lines):
        line_no = section.first_line + index
        if len(raw) > MAX_LINE_CHARS or not raw.strip():
            cmdline_open = False
            continue
        prefix = _PREFIX_RE.match(raw)
        body = raw[prefix.end():] if prefix else raw
        has_stamp = bool(prefix and prefix.end() > 0)
        timestamp = float(prefix.group("ts")) if prefix and prefix.group("ts") else None
        ref = SourceRef(input_name, line_no, raw.rstrip())
        # A terminal wraps a long command line mid-word: continuation lines carry no timestamp.
        if cmdline_open and not has_stamp and prompt_command(raw) is None and not raw.startswith("["):
            result.cmdline = (result.cmdline or "") + raw.rstrip("\n")
            continue
        cmdline_open = False
        try:
            last_aer, pending_fallen, gpu_at, cmdline_open = _line(
                body, ref, timestamp, result, last_aer, pending_fallen, gpu_at)
        except Exception as exc:  # one odd line must not cost the log
            result.warnings.append(f"line {line_no}: could not be read ({type(exc).__name__}: {exc})")
    return result


def _line(body, ref, timestamp, result, last_aer, pending_fallen, gpu_at):
    stripped = body.strip()
    cmdline = _CMDLINE_RE.search(stripped)
    if cmdline and "command line:" in stripped[:40].lower():
        # The first `Command line:` and the later `Kernel command line:` repeat each other.
        if result.cmdline is None or stripped.startswith("Kernel command line:"):
            result.cmdline = cmdline.group("cmdline").strip()
            result.cmdline_source = ref
            return last_aer, pending_fallen, gpu_at, True
        return last_aer, pending_fallen, gpu_at, False
    xid = _XID_RE.search(stripped)
    if xid:
        bdf = _xid_bdf(xid.group("bus"))
        message, details = _xid_message(xid)
        result.events.append(DmesgEvent(kind="xid", bdf=bdf, source=ref, code=int(xid.group("code")),
                                        error_type=message, details=details, timestamp=timestamp))
        return None, pending_fallen, gpu_at, False
    at = _GPU_AT_RE.search(stripped)
    if at:
        gpu_at = _xid_bdf(at.group("bus"))
    fallen = _FALLEN_GPU_RE.search(stripped)
    if fallen:
        pending_fallen = (normalize_bdf(fallen.group("bdf")), ref)
        if "fallen off the bus" not in stripped:
            return last_aer, pending_fallen, gpu_at, False
    if "fallen off the bus" in stripped and "Xid" not in stripped:
        named = _FALLEN_BDF_RE.search(stripped)
        bdf = normalize_bdf(named.group("bdf")) if named else pending_fallen[0] if pending_fallen else gpu_at
        origin = pending_fallen[1] if pending_fallen else ref
        if not any(e.kind in ("xid", "fallen-off-bus") and e.bdf == bdf and e.code in (79, None)
                   for e in result.events[-3:]):
            result.events.append(DmesgEvent(kind="fallen-off-bus", bdf=bdf, source=origin, code=None,
                                            error_type="GPU has fallen off the bus", timestamp=timestamp))
        return last_aer, None, gpu_at, False
    sxid = _SXID_RE.search(stripped)
    if sxid:
        _sxid(sxid, ref, timestamp, result)
        return last_aer, pending_fallen, gpu_at, False
    aer = _AER_ERROR_RE.search(stripped)
    if aer:
        event = DmesgEvent(kind="aer", bdf=normalize_bdf(aer.group("bdf")), source=ref,
                           severity=_severity(aer.group("sev")), error_type=aer.group("type").strip(),
                           timestamp=timestamp)
        result.events.append(event)
        return event, pending_fallen, gpu_at, False
    bit = _AER_BIT_RE.search(stripped)
    if bit and last_aer is not None and normalize_bdf(bit.group("bdf")) == last_aer.bdf:
        name = bit.group("name").strip()
        if name and name not in last_aer.details:
            last_aer.details.append(name)
        return last_aer, pending_fallen, gpu_at, False
    domain = _DOMAIN_RE.search(stripped)
    if domain:
        result.default_domain = domain.group("type").lower()
        result.iommu_lines.append(ref)
        return last_aer, pending_fallen, gpu_at, False
    if re.search(r"DMAR: IOMMU enabled|AMD-Vi: (?:Found IOMMU|IOMMU performance counters|Interrupt remapping enabled)"
                 r"|Intel\(R\) Virtualization Technology for Directed I/O", stripped):
        result.iommu_enabled = True
        result.iommu_lines.append(ref)
    elif re.search(r"DMAR: (?:IOMMU disabled|Intel-IOMMU force enabled due to)|AMD-Vi: .*disabled", stripped, re.I):
        if "disabled" in stripped.lower():
            result.iommu_enabled = False
        result.iommu_lines.append(ref)
    return last_aer, pending_fallen, gpu_at, False


def _sxid(match: re.Match, ref: SourceRef, timestamp: float | None, result: DmesgResult) -> None:
    """One event per error: its `Fatal,`/`Non-fatal,` line gives the severity and the words; a `Data {...}`
    line alone (a grep that kept only it) is still an error of that SXid, severity unknown."""
    bdf, code, rest = normalize_bdf(match.group("bdf")), int(match.group("code")), match.group("rest").strip()
    severity = re.match(r"(?P<sev>Fatal|Non-fatal),\s*(?P<msg>.*)$", rest, re.I)
    last = result.events[-1] if result.events else None
    same = last is not None and last.kind == "sxid" and last.bdf == bdf and last.code == code
    if severity:
        level = "fatal" if severity.group("sev").lower() == "fatal" else "non-fatal"
        if same and last.severity is None:
            last.severity, last.error_type, last.source = level, severity.group("msg").strip() or None, ref
            return
        result.events.append(DmesgEvent(kind="sxid", bdf=bdf, source=ref, code=code, severity=level,
                                        error_type=severity.group("msg").strip() or None, timestamp=timestamp))
    elif rest.startswith("Data") and not (same and last.severity is None):
        result.events.append(DmesgEvent(kind="sxid", bdf=bdf, source=ref, code=code, timestamp=timestamp))


def _xid_message(xid: re.Match) -> tuple[str | None, list[str]]:
    """The Xid's own words without the process fields, and what those fields and MIG say (as details)."""
    message = xid.group("msg").strip()
    details = []
    process = _XID_PROCESS_RE.match(message)
    if process:
        message = message[process.end():]
        pid, name = process.group("pid"), (process.group("name") or "").strip().strip("'")
        if pid.isdigit():
            details.append(f"process {name} (pid {pid})" if name and name != "<unknown>" else f"pid {pid}")
    if xid.group("gi") is not None:
        details.append(f"MIG GPU instance {int(xid.group('gi'))}"
                       + (f", compute instance {int(xid.group('ci'))}" if xid.group("ci") is not None else ""))
    return message.strip().rstrip(".") or None, details


def _xid_bdf(bus: str) -> str | None:
    """`0000:02:00` (an Xid names the GPU without its function) -> `0000:02:00.0`."""
    text = bus.strip().rstrip(".")
    if re.fullmatch(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}", text):
        return normalize_bdf(text + ".0")
    if re.fullmatch(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", text):
        return normalize_bdf(text)
    return None


def _severity(text: str) -> str:
    lowered = text.lower()
    if "fatal" in lowered and "non" not in lowered:
        return "uncorrected-fatal"
    if "uncorrect" in lowered:
        return "uncorrected-nonfatal"
    return "corrected"
