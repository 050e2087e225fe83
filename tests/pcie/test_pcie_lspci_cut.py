"""An `lspci -vv` output cut inside a device's capability list (a paste or `| head` that stops
mid-device) says so in one sentence quoting the last line, and keeps what it read."""

from __future__ import annotations

from pcie_paths import PCIE

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.parse import lspci
from k3diag.parse.text import Section

DELL = "lspci-vvv-dell-root-ports-acs-gpud.txt"  # two root ports, each block ends with its driver


def cut_dell(lines: int, keep_chars: int | None = None) -> str:
    """The first `lines` lines of the real Dell output, the last one cut to `keep_chars` characters, as
    a section of a file holds them (without the file's final newline)."""
    kept = (PCIE / DELL).read_text().split("\n")[:lines]
    if keep_chars is not None:
        kept[-1] = kept[-1][:keep_chars]
    return "\n".join(kept)


def both(text: str) -> lspci.LspciResult:
    """The bulk result, after checking the per-line parser gives the same warnings and devices."""
    section = Section(text, 1)
    bulk, exact = lspci.parse(section, "lspci.txt"), lspci.parse_lines(section, "lspci.txt")
    assert bulk.warnings == exact.warnings
    assert bulk.devices == exact.devices
    return bulk


def test_a_whole_output_gets_no_cut_warning() -> None:
    assert not [w for w in both((PCIE / DELL).read_text()).warnings if "cut off" in w]


def test_cut_inside_the_capability_list_says_so_and_keeps_what_was_read() -> None:
    # line 143 is `\tCapabilities: [100 v1] Advanced Error Reporting` of the second port: its ACS
    # capability (line 165 on) and its driver line never came
    result = both(cut_dell(143))
    assert result.warnings == [
        "line 143: the block of 0000:00:0e.0 looks cut off: the output ends at "
        "'Capabilities: [100 v1] Advanced Error Reporting', before the blank line or `Kernel driver in use:` "
        "line that ends a device in `lspci -vv`; what lspci printed after it is unknown"]
    first, last = result.devices
    assert first.bdf == "0000:00:0c.0" and first.capabilities_read is True and first.acs is not None
    assert last.bdf == "0000:00:0e.0" and last.port_type == "Root Port"
    assert (last.link.sta_speed_gts, last.link.sta_width, last.link.source.line) == (5.0, 1, 117)
    assert last.acs is None and last.driver is None
    assert last.capabilities_read is None  # not "no ACS": the list was not read to its end


def test_cut_in_the_middle_of_a_line_quotes_what_is_left_of_it() -> None:
    result = both(cut_dell(117, keep_chars=15))  # `\t\tLnkSta:\tSpeed 5GT/s ...` cut after `Speed`
    assert len(result.devices) == 2
    cut = [w for w in result.warnings if "cut off" in w]
    assert cut == ["line 117: the block of 0000:00:0e.0 looks cut off: the output ends at 'LnkSta:\\tSpeed', "
                   "before the blank line or `Kernel driver in use:` line that ends a device in `lspci -vv`; "
                   "what lspci printed after it is unknown"]


def test_a_key_line_excerpt_or_a_plain_listing_is_not_cut() -> None:
    excerpt = "0000:80:01.1 PCI bridge: Intel Corporation Device 09ab\n\t\tLnkSta:\tSpeed 8GT/s, Width x16\n"
    listing = "00:00.0 Host bridge: Intel Corporation Device 1bbc\n00:01.0 PCI bridge: Intel Corporation Device 1bbe\n"
    block_then_blank = cut_dell(143) + "\n"  # then the blank line lspci prints after each device
    for text in (excerpt, listing, block_then_blank):
        assert not [w for w in both(text).warnings if "cut off" in w]


def test_the_report_names_the_cut_under_its_input() -> None:
    machine = build_machine([Evidence(name="lspci-cut.txt", data=(cut_dell(143) + "\n").encode())])
    (record,) = [record for record in machine.inputs if record.format == "lspci-vv"]
    assert [w for w in record.warnings if "cut off" in w] == [
        "line 143: the block of 0000:00:0e.0 looks cut off: the output ends at "
        "'Capabilities: [100 v1] Advanced Error Reporting', before the blank line or `Kernel driver in use:` "
        "line that ends a device in `lspci -vv`; what lspci printed after it is unknown"]
    assert len(machine.pci) == 2


def test_a_saved_output_whose_last_device_has_no_driver_is_not_cut() -> None:
    # `lspci -vv > file` prints a blank line after every device, the last one too
    machine = build_machine([Evidence(name="lspci.txt", data=(cut_dell(143) + "\n\n").encode())])
    assert not [w for record in machine.inputs for w in record.warnings if "cut off" in w]
