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

from k3diag.gcpause import collector_paused
from k3diag.model.pci import Acs, PciDevice, PciLink
from k3diag.model.source import LineCounter, SourceRef, counted_refs
from k3diag.model.words import counted
from k3diag.parse.lspci_header import CLASS_CODES, class_code_for, header, leading_header, vendor_for
from k3diag.parse.lspci_lines import (
    ACS_RE,
    BUS_RE,
    CAPS_LINE_RE,
    EVENT_RE,
    EXPRESS_RE,
    FLAG_RE,
    INTERESTING_RE,
    IOMMU_GROUP_RE,
    KEY_PREFIXES,
    LNKCAP2_RE,
    LNKCAP_RE,
    LNKCTL2_RE,
    LNKSTA_RE,
    LNKSTA_UNKNOWN_RE,
    classify,
    parse_flags,
    parse_speed,
    sniff,
)
from k3diag.parse.lspci_steps import BulkSteps, keep_new
from k3diag.parse.text import MAX_LINE_CHARS, Section, prompt_command, section_text

__all__ = ["CLASS_CODES", "FORMAT", "LspciResult", "class_code_for", "parse", "parse_lines", "sniff", "vendor_for"]

FORMAT = "lspci-vv"

@dataclass
class LspciResult:
    devices: list[PciDevice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denied: int = 0  # devices whose capabilities read <access denied>


def parse(section: Section, input_name: str) -> LspciResult:
    """The devices of an `lspci` output; the bulk path, identical to `parse_lines` line for line."""
    # A 5,000-device output makes ~130,000 objects (devices, links, references) and not one cycle:
    # the cyclic collector would run ~190 times over the growing heap for nothing (~45 ms, 10%).
    with collector_paused():
        return _Parser(section, input_name).run()


def parse_lines(section: Section, input_name: str) -> LspciResult:
    """The exact per-line parser: every line through `_Parser._line`. The reference `parse` is tested
    against (on every fixture, generated 5,000-device outputs and random line mixtures)."""
    return _Parser(section, input_name).run_lines()


class _Parser(BulkSteps):
    def __init__(self, section: Section, input_name: str) -> None:
        self.section = section
        self.input_name = input_name
        self.result = LspciResult()
        self.current: PciDevice | None = None
        self.current_complete = False
        self.acs_listed = False
        self.saw_caps = False
        self.anonymous = False
        # The raw line after the one being read (wrapped ACS flags), as each driver finds it.
        self._lines: list[str] | None = None
        self._blank_after = False  # `run_lines`: blank lines follow the last line that is not blank
        self._index = 0
        self._text = ""
        self._end = 0
        # Where the line being read starts (the `\n` before it; -1 for the first line of the text): a block
        # closing there ends there, and the line after it is found from there.
        self._pos = -1
        self._line_end = 0  # where the line being read ends, when it opens a block
        self._open_end = 0  # where the header line of the current block ends
        # The bulk path's line numbers, counted only for the lines someone asks about (`counted_refs`).
        self._counter = LineCounter("", 1)
        self._ref = counted_refs(input_name, self._counter)  # (offset, text) -> that line's reference

    # -- drivers ------------------------------------------------------------------
    def run_lines(self) -> LspciResult:
        lines = self._text_of_section().split("\n")
        read = len(lines)
        while lines and not lines[-1].strip():
            lines.pop()  # a trailing newline is the end of the file, not the end of a block
        self._lines = lines
        self._blank_after = len(lines) < read
        for index, raw in enumerate(lines):
            self._index = index
            self._exact(raw, self.section.first_line + index)
        return self._finish()

    def _text_of_section(self) -> str:
        """The section's normalized text, without the `> ` marks of an e-mail reply when most of its
        lines carry them (the topo parsers' `unquote_reply` rule; the line count is kept). Both
        drivers start here, so they read the same lines."""
        text = section_text(self.section)
        head = text[:_QUOTE_SNIFF_CHARS]
        if ">" not in head:
            return text
        from k3diag.parse.text import unquote_reply

        # decided on the head first: `>SERR-` on every Status line puts a `>` in every real output
        if not unquote_reply(head.split("\n")[:400])[1]:
            return text
        lines, quoted = unquote_reply(text.split("\n"))
        if not quoted:
            return text
        self.result.warnings.append("the output was quoted in a reply (`> ` before each line); read without the marks")
        return "\n".join(lines)

    def run(self) -> LspciResult:
        """One `finditer` over the text visits only the lines `EVENT_RE` selects; the lines in
        between are ones `_line` would pass over. Each distinct line is classified once
        (`lspci_lines.classify`) and its effect applied by its `_on_*` step, the steps `_line` takes.
        A line is known by where it starts in the text; its number is counted only when asked for
        (a warning, a reference's `line`: `LineCounter`), not for each of the ~65,000 lines visited."""
        text = self._text_of_section()
        end = _content_end(text)
        self._text, self._end = text, end
        first_line = self.section.first_line
        counter = self._counter = LineCounter(text, first_line)
        make_ref = self._ref = counted_refs(self.input_name, counter)
        line_at = counter.line_at
        if end == 0:
            return self._finish()
        newline = text.find("\n", 0, end)
        line_end = end if newline < 0 else newline
        self._line_end = line_end
        self._exact(text[:line_end], first_line)  # the first line has no `\n` before it
        previous_end = line_end
        actions: dict[str, tuple] = {}  # keyed by the line with the `\n` before it, as the match gives it
        warnings = self.result.warnings
        handlers = self._handlers()
        for match in EVENT_RE.finditer(text, line_end, end):
            start, line_end = match.span()  # a match runs to the end of its line
            if start - previous_end > MAX_LINE_CHARS:
                self._long_lines(previous_end, start, line_at(previous_end + 1))
            previous_end = line_end
            line = match.group()
            action = actions.get(line)
            if action is None:
                raw = line[1:]
                if len(raw) > MAX_LINE_CHARS:
                    warnings.append(f"line {line_at(start + 1)}: longer than {MAX_LINE_CHARS} characters, skipped")
                    continue
                if raw and not raw[0].isspace() and not raw.startswith(KEY_PREFIXES):
                    header_line = raw.rstrip()
                    found = leading_header(header_line)
                    if found:
                        self._pos, self._line_end = start, line_end
                        self._close(complete=True)
                        self._open(found[0], found[1], make_ref(start + 1, header_line))
                        continue  # headers are all different: not worth remembering
                action = actions[line] = classify(raw)
            code = action[0]
            if code:  # not SKIP
                handlers[code](action, start)
        if end - previous_end > MAX_LINE_CHARS:
            self._long_lines(previous_end, end, line_at(previous_end + 1))
        self._pos = end
        return self._finish()

    def _unvisited_caps(self) -> bool:
        """Whether the block being closed has a `Capabilities:` line `run` did not visit."""
        if self._lines is not None:
            return False  # `run_lines` visits every line
        text, stop = self._text, self._pos
        for match in CAPS_LINE_RE.finditer(text, self._open_end, stop):
            newline = text.find("\n", match.end(), stop)
            if (stop if newline < 0 else newline) - match.start() - 1 <= MAX_LINE_CHARS:
                return True
        return False

    def _long_lines(self, after: int, before: int, first_no: int) -> None:
        """The warnings `run_lines` gives for over-long lines among those `run` does not visit."""
        for offset, raw in enumerate(self._text[after + 1:before].split("\n")):
            if len(raw) > MAX_LINE_CHARS:
                self.result.warnings.append(
                    f"line {first_no + offset}: longer than {MAX_LINE_CHARS} characters, skipped")

    def _finish(self) -> LspciResult:
        self._warn_if_cut()
        self._close(complete=self.current_complete)
        if self.result.denied:
            one = self.result.denied == 1
            self.result.warnings.append(
                f"{counted(self.result.denied, 'device')} {'shows' if one else 'show'} `Capabilities: <access denied>` "
                f"(lspci ran without root): {'its' if one else 'their'} link speed, width and ACS settings are unknown; "
                "`sudo lspci -vv` would show them")
        return self.result

    def _warn_if_cut(self) -> None:
        """A warning when the output ends inside a device's capability list: the block has a
        `Capabilities:` line and neither a `Kernel driver in use:` or `Kernel modules:` line nor the
        blank line lspci prints after every device follows (a paste or `| head` cut mid-device; an
        excerpt of a few key lines is not one). A section holds no final newline, so a newline after
        the last line is a blank line. What was read is kept; the block's capabilities stay unknown
        (`_close` with `complete=False`, as before)."""
        device = self.current
        if device is None or self.anonymous or self.current_complete or device.source is None:
            return
        if not (self.saw_caps or self._unvisited_caps()):
            return
        if self._lines is not None:
            if self._blank_after:
                return
            last_no, last = self.section.first_line + len(self._lines) - 1, self._lines[-1]
        else:
            if self._text.find("\n", self._end) >= 0:
                return
            start = self._text.rfind("\n", 0, self._end) + 1
            last_no, last = self._counter.line_at(start), self._text[start:self._end]
        self.result.warnings.append(
            f"line {last_no}: the block of {device.bdf} looks cut off: the output ends at {last.strip()[:80]!r}, "
            "before the blank line or `Kernel driver in use:` line that ends a device in `lspci -vv`; "
            "what lspci printed after it is unknown")

    def _following(self) -> str | None:
        """The raw line after the current one, or None at the end."""
        if self._lines is not None:
            return self._lines[self._index + 1] if self._index + 1 < len(self._lines) else None
        text, end = self._text, self._end
        line_end = text.find("\n", self._pos + 1, end)
        if line_end < 0:
            return None
        newline = text.find("\n", line_end + 1, end)
        return text[line_end + 1:newline if newline >= 0 else end]

    # -- the per-line path ----------------------------------------------------------
    def _exact(self, raw: str, line_no: int) -> None:
        if len(raw) > MAX_LINE_CHARS:
            self.result.warnings.append(f"line {line_no}: longer than {MAX_LINE_CHARS} characters, skipped")
            return
        try:
            self._line(raw.rstrip(), line_no)
        except Exception as exc:  # one odd line must not cost the rest of the file
            self.result.warnings.append(f"line {line_no}: could not be read ({type(exc).__name__}: {exc})")

    def _line(self, line: str, line_no: int) -> None:
        if not line.strip():
            self._close(complete=True)
            return
        if not line[0].isspace() and not line.startswith(KEY_PREFIXES):
            found = header(line)
            if found is not None:
                self._close(complete=True)
                self._open(found["bdf"], found, SourceRef(self.input_name, line_no, line))
                return
            if prompt_command(line) is not None:
                self._close(complete=True)
            return  # prose, `....` cuts, separators: not part of any device
        if INTERESTING_RE.match(line) is None:
            return  # most of a block (DevCap, AER masks, MSI...) says nothing k3diag uses
        stripped = line.strip()
        ref = SourceRef(self.input_name, line_no, line)
        self._body(stripped, ref)

    # -- blocks -------------------------------------------------------------------
    def _open(self, bdf: str, fields: dict, ref: SourceRef) -> None:
        self._open_end = self._line_end
        device = PciDevice(bdf=bdf, origin=FORMAT, source=ref)
        device.class_name = fields.get("class_name")
        device.class_code = fields.get("class_code")
        device.vendor_id = fields.get("vendor_id")
        device.device_id = fields.get("device_id")
        device.description = fields.get("description")
        if device.class_code == 0x0604:
            device.is_bridge = True
        device.sources.append(ref)  # `add_source` on a new device
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
        elif (complete or device.driver is not None) and not self.anonymous and (
                self.saw_caps or self._unvisited_caps()):
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

    def _body(self, stripped: str, ref: SourceRef) -> None:
        if stripped.startswith("Kernel driver in use:") or stripped.startswith("Kernel modules:"):
            if self.current is not None:
                if stripped.startswith("Kernel driver in use:"):
                    self.current.driver = stripped.split(":", 1)[1].strip() or None
                    self.current.add_source(ref)
                self.current_complete = True
            return
        if stripped.startswith(KEY_PREFIXES):
            self._key_line(stripped, ref)
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
            express = EXPRESS_RE.search(stripped)
            if express and device.port_type is None:
                device.port_type = express.group("type").strip()
                device.add_source(ref)
            if "Access Control Services" in stripped:
                self.acs_listed = True
        elif stripped.startswith(("IOMMU group", "Flags:")):
            group = IOMMU_GROUP_RE.search(stripped)
            if group:
                device.iommu_group = int(group.group("group"))

    def _key_line(self, stripped: str, ref: SourceRef) -> None:
        key = stripped.split(":", 1)[0]
        if stripped.startswith("Bus: primary="):
            match = BUS_RE.match(stripped)
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
            match = LNKCAP_RE.match(stripped)
            link = device.link or PciLink()
            if match:
                link.cap_speed_gts = parse_speed(match.group("speed"))
                link.cap_width = int(match.group("width"))
                if match.group("port"):
                    link.port_number = int(match.group("port"))
            link.cap_source = ref
            device.link = link
            device.add_source(ref)
        elif key == "LnkSta":
            link = device.link or PciLink()
            match = LNKSTA_RE.match(stripped)
            if match:
                link.sta_speed_gts = parse_speed(match.group("speed"))
                link.sta_width = int(match.group("width"))
                if match.group("smark"):
                    link.speed_downgraded = match.group("smark") == "downgraded"
                if match.group("wmark"):
                    link.width_downgraded = match.group("wmark") == "downgraded"
            elif LNKSTA_UNKNOWN_RE.match(stripped):
                width = re.search(r"Width x(\d+)", stripped)
                link.sta_width = int(width.group(1)) if width else None
            else:
                self.result.warnings.append(f"line {ref.line}: LnkSta not understood: {stripped[:80]!r}")
            link.source = ref
            device.link = link
            device.add_source(ref)
        elif key == "LnkCap2":
            match = LNKCAP2_RE.match(stripped)
            if match:
                link = device.link or PciLink()
                link.supported_max_speed_gts = parse_speed(match.group("max"))
                device.link = link
        elif key == "LnkCtl2":
            match = LNKCTL2_RE.match(stripped)
            if match:
                link = device.link or PciLink()
                link.target_speed_gts = parse_speed(match.group("speed"))
                device.link = link
                device.add_source(ref)
        elif key in ("ACSCap", "ACSCtl"):
            match = ACS_RE.match(stripped)
            self._acs(device, key, parse_flags(match.group("flags") if match else ""), ref)

    def _acs(self, device: PciDevice, key: str, flags: dict[str, bool], ref: SourceRef, fresh: bool = False) -> None:
        # A terminal or a chat window can wrap the line: `UpstreamFwd+ \nEgressCtrl- DirectTrans-`.
        if len(flags) < 7:
            following = self._following()
            following = following.strip() if following is not None else ""
            if following and all(FLAG_RE.fullmatch(token) for token in following.split()):
                flags.update(parse_flags(following))
        acs = device.acs or Acs()
        if key == "ACSCap":
            acs.cap = flags
        else:
            acs.ctl = flags
            acs.source = ref
            if len(flags) < 7:
                self.result.warnings.append(f"line {ref.line}: ACSCtl shows {len(flags)} of 7 flags (cut short?)")
        device.acs = acs
        if fresh:
            keep_new(device, ref)
        else:
            device.add_source(ref)


def _content_end(text: str) -> int:
    """Where the last line that is not blank ends: trailing blank lines end the file, not a block."""
    end = len(text)
    while end > 0:
        chunk = text[max(0, end - 4096):end]
        kept = chunk.rstrip()
        if kept:
            last = end - len(chunk) + len(kept)
            newline = text.find("\n", last)
            return len(text) if newline < 0 else newline
        end -= len(chunk)
    return 0


# How much of a section is looked at to tell whether it was quoted in a reply.
_QUOTE_SNIFF_CHARS = 100_000


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
