"""Kernel logs as people paste them: Xid lines of old, current and MIG drivers, the process fields, the
"fallen off the bus" wordings, AER status bits behind `AER: `, journal prefixes a paste or a locale changed."""

from __future__ import annotations

from pcie_paths import PCIE, section

from k3diag.analyze.engine import run_rules
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.parse import dmesg
from k3diag.parse.text import Section


def _findings(*names: str, rule: str) -> list:
    machine = build_machine([Evidence(name=name, path=PCIE / name) for name in names])
    return [f for f in run_rules(machine) if f.id == rule]


def test_xid_process_fields_are_not_the_message() -> None:
    # `kernel: ` left by a grep of the journal; current drivers put `pid=N, name=P, ` before the message
    result = dmesg.parse(section("journal-xid45-pid-name-kernel-prefix-ogkm1150.txt"), "j")
    assert len(result.events) == 7
    first = result.events[0]
    assert (first.bdf, first.code, first.error_type) == ("0000:dc:00.0", 45, "Ch 00000001 caused by previous Xid 149")
    assert first.details == ["process python3 (pid 1818990)"]
    finding = next(f for f in _findings("journal-xid45-pid-name-kernel-prefix-ogkm1150.txt", rule="xid-errors")
                   if f.data["bdf"] == "0000:dc:00.0")
    assert finding.data["count"] == 2
    assert "0000:dc:00.0: Ch 00000001 caused by previous Xid 149 (process python3 (pid 1818990))" in finding.explanation


def test_xid_79_with_unknown_process_and_the_line_after_it() -> None:
    # `pid='<unknown>', name=<unknown>, ` is no process: it must not reach the prose; the driver's own
    # `NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.` after it is the same event
    result = dmesg.parse(section("dmesg-xid79-pid-unknown-gpu-at-h800-blog.txt"), "d")
    (event,) = result.events
    assert (event.kind, event.bdf, event.code, event.error_type, event.details) == (
        "xid", "0000:5d:00.0", 79, "GPU has fallen off the bus", [])
    (finding,) = _findings("dmesg-xid79-pid-unknown-gpu-at-h800-blog.txt", rule="xid-errors")
    assert "unknown" not in finding.explanation and finding.severity == "fail"


def test_old_drivers_xid_without_pci_word_and_collapsed_journal_date() -> None:
    # `NVRM: Xid (0000:01:00): 13, ...` (no `PCI:`) was dropped; `May 6` (a paste collapsed `May  6`) hid the stamp
    result = dmesg.parse(section("journal-xid13-no-pci-word-collapsed-spaces-pastebin.txt"), "j")
    assert [(e.bdf, e.code, e.timestamp) for e in result.events] == [
        ("0000:01:00.0", 13, 4909.92297), ("0000:01:00.0", 13, 5044.30229), ("0000:01:00.0", 13, 5061.871534)]
    assert result.events[0].error_type == "0005 00000000 0000502d 00000104 00000000 00000100"


def test_mig_xid_names_the_gpu_and_the_instance() -> None:
    # the driver's formats with MIG attribution: `(PCI:0000:01:00 GPU-I:05)`; these lines were dropped
    result = dmesg.parse(section("dmesg-xid94-95-mig-gpu-instance-driver-comment.txt"), "d")
    assert [(e.bdf, e.code) for e in result.events] == [("0000:01:00.0", 94), ("0000:01:00.0", 94), ("0000:01:00.0", 95)]
    assert result.events[0].details == ["pid 7194", "MIG GPU instance 5"]
    assert result.events[2].error_type == "Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No"
    severities = {f.data["code"]: f.severity for f in _findings(
        "dmesg-xid94-95-mig-gpu-instance-driver-comment.txt", rule="xid-errors")}
    assert severities == {94: "warn", 95: "fail"}


def test_fallen_off_the_bus_names_its_gpu_in_every_wording() -> None:
    old = dmesg.parse(section("dmesg-old-gpu-at-bdf-fallen-off-bumblebee554.txt"), "d")
    assert [(e.kind, e.bdf) for e in old.events] == [("fallen-off-bus", "0000:01:00.0")]
    (finding,) = _findings("dmesg-old-gpu-at-bdf-fallen-off-bumblebee554.txt", rule="xid-errors")
    assert finding.data["bdf"] == "0000:01:00.0" and "unknown" not in finding.explanation
    # /var/log/syslog: every line of the multi-line message carries the syslog prefix and the same stamp
    syslog = dmesg.parse(section("syslog-fallen-off-bus-multiline-prefixed-h800-blog.txt"), "s")
    (event,) = syslog.events
    assert (event.kind, event.bdf, event.timestamp, event.source.line) == ("fallen-off-bus", "0000:5d:00.0", 17257.355375, 3)


def test_aer_bits_behind_aer_prefix_and_identical_journal_lines_all_count() -> None:
    # kernels 5.x print `AER:    [ 0] RxErr    (First)`; a Russian locale's `фев 12 00:48:02 kernel:` without host;
    # three identical reports within one second are three errors, not one
    name = "journal-aer-bits-aer-prefix-localized-month-gsconnect1052.txt"
    assert dmesg.sniff((PCIE / name).read_text()) >= 0.85
    result = dmesg.parse(section(name), "j")
    assert [(e.bdf, e.severity, e.details) for e in result.events] == [("0000:00:1c.5", "corrected", ["RxErr"])] * 3
    (finding,) = _findings(name, rule="pcie-aer-errors")
    assert finding.title == "PCIe AER errors on 0000:00:1c.5: 3 corrected"
    assert "(Physical Layer): RxErr." in finding.explanation


def test_iso_and_facility_prefixes_are_stamps() -> None:
    # `journalctl -o short-iso` and rsyslog's RFC 3339 stamps (Ubuntu 24.04 /var/log/syslog), made from the
    # Xid line of ogkm1150 above with each prefix put in front (those tools' documented formats)
    line = "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"
    other = "kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE"
    for stamp in ("2026-05-18T10:12:01+0800 gpu-node-7 ", "2026-05-18T10:12:01.123456+08:00 gpu-node-7 "):
        text = "\n".join(stamp + other for _ in range(8)) + "\n" + stamp + line + "\n"
        assert dmesg.sniff(text) >= 0.85, stamp
        (event,) = dmesg.parse(Section(text, 1), "j").events
        assert (event.bdf, event.code) == ("0000:dc:00.0", 45)


def test_dmesg_ctime_with_other_kernel_lines_is_a_kernel_log() -> None:
    # `dmesg -T`: an Xid, then a hung-task trace; it was 'format not recognized' (only `[ 12.3]` stamps counted)
    name = "dmesg-ctime-xid45-then-hung-task-gpud.txt"
    machine = build_machine([Evidence(name=name, path=PCIE / name)])
    [record] = machine.inputs
    assert record.format == "dmesg"
    (finding,) = [f for f in run_rules(machine) if f.id == "xid-errors"]
    assert finding.data == {"bdf": "0000:61:00.0", "code": 45, "count": 1}
    assert "Ch 0000000f (process distprovers-gpu (pid 1496200))" in finding.explanation


def test_dmesg_ctime_quoted_with_markdown_marks() -> None:
    name = "dmesg-ctime-xid13-109-quoted-gpud-docs.txt"
    assert dmesg.sniff((PCIE / name).read_text()) >= 0.85
    result = dmesg.parse(section(name), "d")
    assert [(e.code, e.details) for e in result.events] == [
        (13, []), (13, []), (13, []), (109, ["process pt_main_thread (pid 1797828)"])]
    assert result.events[3].error_type == "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"


def test_nvswitch_sxid_lines_are_fabric_errors() -> None:
    # NVIDIA/nvtrust#124: each SXid printed as `Data {...}`, `Non-fatal, Link N ...`, `Severity ...` lines
    name = "dmesg-sxid-22013-nonfatal-three-line-nvtrust124.txt"
    result = dmesg.parse(section(name), "d")
    assert [(e.kind, e.bdf, e.code, e.severity, e.error_type, e.source.line) for e in result.events] == [
        ("sxid", "0000:04:00.0", 22013, "non-fatal", f"Link {link} Minion Link DLREQ interrupt", line)
        for link, line in ((44, 3), (45, 6), (46, 9))]
    (finding,) = _findings(name, rule="fabric-manager-nvswitch-non-fatal")
    assert finding.title == "The kernel log shows an NVSwitch non-fatal error (SXid 22013) (3 times)"
    assert finding.confirm_with == "sudo dmesg -T | grep -E 'SXid|nvswitch'"


def test_sxid_data_line_alone_has_no_severity_to_make_up() -> None:
    # leptonai/gpud#338: `dmesg -x --time-format iso` (`kern  :err   : 2025-01-25T10:34:54,859532+00:00`), a grep
    # that kept only the `Data {...}` line of SXid 12028; it was 'format not recognized'
    name = "dmesg-x-iso-sxid-12028-data-only-gpud338.txt"
    (event,) = dmesg.parse(section(name), "d").events
    assert (event.kind, event.bdf, event.code, event.severity) == ("sxid", "0000:84:00.0", 12028, None)
    (finding,) = _findings(name, rule="fabric-manager-nvswitch-error")
    assert finding.severity == "warn"
    assert finding.title == "The kernel log shows an NVSwitch error of unknown severity (SXid 12028)"
