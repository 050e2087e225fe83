"""The bulk `lspci` parser (`lspci.parse`) gives what the per-line parser (`lspci.parse_lines`) gives.

The bulk path visits only the lines its event pattern selects and applies a cached effect per
distinct line; these tests hold it to the per-line reference on every fixture (lspci and not),
on generated multi-thousand-device outputs whose blocks differ, and on random mixtures of the
lines that trip parsers: unusual whitespace, blank lines made of tabs, prompts, grep excerpts,
wrapped ACS flags, lines too long to read, numbers too long for int().
"""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3diag.parse import lspci
from k3diag.parse.text import MAX_LINE_CHARS, Section

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "fixtures" / "pcie" / "lspci-vvv-dell-root-ports-acs-gpud.txt"


def assert_same(text: str, first_line: int = 1, name: str = "in.txt") -> lspci.LspciResult:
    section = Section(text, first_line)
    bulk, exact = lspci.parse(section, name), lspci.parse_lines(section, name)
    assert bulk.warnings == exact.warnings
    assert bulk.denied == exact.denied
    assert len(bulk.devices) == len(exact.devices)
    for got, want in zip(bulk.devices, exact.devices):
        assert got == want, (got.bdf, got.source)
    return bulk


def test_every_fixture_reads_the_same_in_bulk() -> None:
    checked = 0
    for path in sorted((REPO / "fixtures").rglob("*")):
        if not path.is_file() or path.suffix in (".gz", ".xz", ".tar", ".json") or path.stat().st_size > 2_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        assert_same(text, 1, path.name)
        assert_same(text, 40, path.name)
        checked += 1
    assert checked > 100


def generated(devices: int, seed: int) -> str:
    """`devices` blocks cloned from a real Dell root-port output with the bus id, widths, speeds,
    bus ranges, NUMA node, ACS flags and driver varied per block, so every block is distinct."""
    rng = random.Random(seed)
    text = TEMPLATE.read_text()
    blocks = [block for block in text.strip("\n").split("\n\n") if block]
    out = []
    for index in range(devices):
        block = blocks[index % len(blocks)]
        device, bus_index = index % 32, index // 32
        domain, bus = divmod(bus_index, 256)
        lines = block.split("\n")
        lines[0] = f"{domain:04x}:{bus:02x}:{device:02x}.{rng.randrange(8)}" + lines[0][len("00:0c.0"):]
        for number, line in enumerate(lines):
            if "LnkSta:" in line:
                lines[number] = (f"\t\tLnkSta:\tSpeed {rng.choice(['2.5', '5', '8', '16'])}GT/s "
                                 f"({rng.choice(['ok', 'downgraded'])}), Width x{rng.choice([1, 4, 8, 16])} (ok)")
            elif "Bus: primary=" in line:
                lines[number] = (f"\tBus: primary={bus:02x}, secondary={rng.randrange(256):02x}, "
                                 f"subordinate={rng.randrange(256):02x}, sec-latency=0")
            elif "NUMA node:" in line:
                lines[number] = f"\tNUMA node: {rng.randrange(-1, 4)}"
            elif "ACSCtl:" in line and rng.random() < 0.3:
                lines[number] = line.replace("ReqRedir-", "ReqRedir+")
            elif "Kernel driver in use:" in line and rng.random() < 0.2:
                lines[number] = "\tKernel modules: shpchp"
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def test_generated_5000_device_output_reads_the_same_in_bulk() -> None:
    result = assert_same(generated(5000, seed=13), 1, "lspci-5000.txt")
    assert len(result.devices) == 5000
    assert all(device.link is not None and device.link.source is not None for device in result.devices)
    # the bulk path quotes the lines it read with the right line numbers
    text = generated(5000, seed=13).split("\n")
    for device in result.devices[::499]:
        assert text[device.link.source.line - 1] == device.link.source.text
        assert text[device.source.line - 1] == device.source.text


def test_blocks_without_express_or_acs_lines_still_count_their_capabilities() -> None:
    text = ("01:00.0 Ethernet controller: Intel Corporation I210 (rev 03)\n"
            "\tCapabilities: [40] Power Management version 3\n"
            "\t\tFlags: PMEClk- DSI+ D1- D2- AuxCurrent=0mA PME(D0+,D1-,D2-,D3hot+,D3cold+)\n"
            "\tKernel driver in use: igb\n\n"
            "02:00.0 Ethernet controller: Intel Corporation I210 (rev 03)\n"
            "\tKernel driver in use: igb\n")
    result = assert_same(text)
    assert [device.capabilities_read for device in result.devices] == [True, None]


LINES = [
    "", "\t", " \t ", "\x0b", "\t\xa0", "\t\t\x0c",
    "0000:3b:00.0 3D controller: NVIDIA Corporation GA100 [A100 PCIe 40GB] (rev a1)",
    "3b:00.0 PCI bridge [0604]: PLX Technology, Inc. PEX 8747 [10b5:8747] (rev ca) (prog-if 00 [Normal decode])",
    "21:04.0 0604: 1022:57a3", "Card: 0000:02:00.0 VGA compatible controller: NVIDIA Corporation Device 2204",
    "0000:3b:00.0", "00:1f.0 not a header", "$ sudo lspci -vvv -s 3b:00.0", "user@host:~$ lspci -vv", "....",
    "\tCapabilities: [40] Express (v2) Endpoint, MSI 00", "\tCapabilities: [68] Express (v2) Root Port (Slot+), MSI 00",
    "    Capabilities: [60] Express (v2) Downstream Port (Slot+), MSI 00", "\tCapabilities: [80] Power Management version 3",
    "\tCapabilities: <access denied>", "Capabilities: <access denied>", "\tCapabilities: [148 v1] Access Control Services",
    "\tCapabilities: [100] Vendor: Express (v2) Legacy Endpoint, IRQ 5", "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L0s",
    "\t\tLnkCap:\tSpeed 8GT/s, Width x8", "\t\tLnkCap:\tnonsense", "\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)",
    "\t\tLnkSta:\tSpeed unknown (downgraded), Width x0 (downgraded)", "\t\tLnkSta:\tgarbled", "LnkSta: Speed 16GT/s, Width x8",
    "\t\tLnkSta2: Current De-emphasis Level: -6dB", "\t\tLnkCap2: Supported Link Speeds: 2.5-16GT/s, Crosslink-",
    "\t\tLnkCtl2: Target Link Speed: 16GT/s, EnterCompliance-", "\t\tLnkCtl2: odd", "\t\tLnkCtl:\tASPM Disabled",
    "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-",
    "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+", "\t\t\tEgressCtrl- DirectTrans-",
    "ACSCtl: SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-",
    "\tBus: primary=00, secondary=01, subordinate=0f, sec-latency=0", "\tBus: primary=zz", "\tNUMA node: 1",
    "\tNUMA node: -1", "\tPhysical Slot: 5", "\tPhysical Slot:", "\tIOMMU group: 42",
    "\tFlags: bus master, fast devsel, latency 0, IRQ 16, IOMMU group 13", "\t\tFlags: PMEClk- DSI- D1- D2-",
    "\tKernel driver in use: nvidia", "\tKernel driver in use:", "\tKernel modules: nvidiafb, nouveau",
    "\tControl: I/O- Mem+ BusMaster+", "\t\tDevCap:\tMaxPayload 256 bytes", "\t\t\t 10BitTagComp- 10BitTagReq-",
    "\t\tLnkCap:\tSpeed 8GT/s, Width x" + "9" * 5000, "\t\tLnkCap:\tSpeed 8GT/s, Width x16" + " " * 20,
    "\tKernel driver in use: nvidia   ",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(LINES), max_size=60), st.integers(min_value=1, max_value=500),
       st.sampled_from(["", "\n", "\n\n", "\n\t\n"]))
def test_random_line_mixtures_read_the_same_in_bulk(lines: list[str], first_line: int, tail: str) -> None:
    assert_same("\n".join(lines) + tail, first_line)


def test_lines_too_long_to_read_warn_alike_visited_or_not() -> None:
    long_line = "\t\tDevCap:\t" + "x" * (MAX_LINE_CHARS + 5)
    text = ("01:00.0 3D controller: NVIDIA Corporation Device 2330\n" + long_line + "\n"
            + "\t\tLnkSta:\tSpeed 8GT/s, Width x16" + "y" * MAX_LINE_CHARS + "\n\t\tLnkSta:\tSpeed 8GT/s, Width x8\n"
            + long_line)
    result = assert_same(text)
    assert sum("longer than" in warning for warning in result.warnings) == 3
    assert result.devices[0].link.sta_width == 8


def test_wrapped_acs_flags_join_the_line_above_in_both_paths() -> None:
    text = ("0000:80:01.1 PCI bridge: Intel Corporation Device 09ab\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+\n"
            "\t\t\tEgressCtrl- DirectTrans-\n")
    result = assert_same(text)
    assert result.devices[0].acs.ctl == {"SrcValid": True, "TransBlk": False, "ReqRedir": True, "CmpltRedir": True,
                                         "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": False}
    assert not result.warnings


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([line for line in LINES if "9999" not in line]), max_size=40))
def test_no_line_of_the_mixtures_breaks_the_parser(lines: list[str]) -> None:
    result = assert_same("\n".join(lines))
    assert not [warning for warning in result.warnings if "could not be read" in warning]


def test_an_output_quoted_in_an_email_reply_reads_as_the_output() -> None:
    """`> ` before every line (a reply quoting the paste): the same devices, links and ACS as the output
    itself, the line numbers of the file, and a warning that says so; in bulk as line by line."""
    text = TEMPLATE.read_text()
    plain = assert_same(text)
    for quote in ("> ", "> > ", ">> "):
        quoted = "On Tue, Dana wrote:\n" + "".join(quote + line + "\n" for line in text.split("\n"))
        result = assert_same(quoted)
        assert "the output was quoted in a reply (`> ` before each line); read without the marks" in result.warnings
        assert [device.bdf for device in result.devices] == [device.bdf for device in plain.devices]
        for got, want in zip(result.devices, plain.devices):
            assert (got.numa_node, got.driver, got.secondary_bus) == (want.numa_node, want.driver, want.secondary_bus)
            assert (got.link.cap_speed_gts, got.link.cap_width, got.link.sta_speed_gts, got.link.sta_width,
                    got.link.speed_downgraded, got.link.target_speed_gts) == \
                (want.link.cap_speed_gts, want.link.cap_width, want.link.sta_speed_gts, want.link.sta_width,
                 want.link.speed_downgraded, want.link.target_speed_gts)
            assert got.acs is not None and got.acs.ctl == want.acs.ctl
            assert [ref.line for ref in got.sources] == [ref.line + 1 for ref in want.sources]


def test_a_prompt_with_a_quote_mark_is_not_a_reply() -> None:
    text = "> lspci -vv\n" + TEMPLATE.read_text()
    result = assert_same(text)
    assert not any("quoted in a reply" in warning for warning in result.warnings)
    assert len(result.devices) == 2 and all(device.link is not None for device in result.devices)
