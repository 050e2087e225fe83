"""/proc/cmdline and dmesg: IOMMU options, AER, Xid (multi-line too), wrapped command lines."""

from __future__ import annotations

from pcie_paths import PCIE, section

from k3diag.join.build import build_machine
from k3diag.evidence import Evidence
from k3diag.parse import dmesg, kernel_cmdline
from k3diag.parse.text import Section


def test_cmdline_intel_iommu_pt() -> None:
    result = kernel_cmdline.parse(section("cmdline-intel-iommu-pt-rocm-361.txt"), "cmdline")
    assert result.iommu == {"intel_iommu": "on", "iommu": "pt"}
    assert result.mode == "passthrough" and not result.pci_noacs
    assert result.params["root"] == "UUID=5537c097-c8bf-4f7d-98a8-5896e2c25886" and "ro" in result.params
    assert result.source.line == 1


def test_cmdline_options() -> None:
    def parse(text: str) -> kernel_cmdline.KernelCmdline:
        return kernel_cmdline.parse(Section(text, 1), "c")

    assert parse("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=off").mode == "off"
    noacs = parse("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro pci=noats,noacs")
    assert noacs.pci_noacs and noacs.mode is None
    amd = parse("BOOT_IMAGE=/vmlinuz root=/dev/sda1 amd_iommu=on iommu=pt")
    assert amd.mode == "passthrough" and "not an option the kernel knows" in amd.warnings[0]
    later = parse("root=/dev/sda1 ro iommu=pt iommu.passthrough=0")
    assert later.mode == "translated"
    quoted = parse('BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro dyndbg="file x.c +p" iommu=pt')
    assert quoted.params["dyndbg"] == "file x.c +p" and quoted.mode == "passthrough"


def test_cmdline_sniff() -> None:
    assert kernel_cmdline.sniff((PCIE / "cmdline-intel-iommu-pt-rocm-361.txt").read_text()) >= 0.9
    assert kernel_cmdline.sniff((PCIE / "lspci-vvv-dell-root-ports-acs-gpud.txt").read_text()) == 0.0
    assert kernel_cmdline.sniff((PCIE / "dmesg-boot-cmdline-dmar-rocm-361.txt").read_text()) == 0.0


def test_dmesg_aer_fatal_then_xid_79() -> None:
    result = dmesg.parse(section("dmesg-aer-surprise-down-xid79-gpu-burn.txt"), "dmesg")
    aer = [e for e in result.events if e.kind == "aer"]
    assert [(e.bdf, e.severity) for e in aer] == [("0000:00:02.0", "corrected"), ("0000:00:02.0", "uncorrected-fatal")]
    assert aer[0].details == ["Replay Timer Timeout"] and aer[1].details == ["Surprise Down Error"]
    assert aer[1].error_type == "Transaction Layer" and aer[1].timestamp == 74889.542044
    (xid,) = [e for e in result.events if e.kind == "xid"]
    assert (xid.bdf, xid.code, xid.error_type) == ("0000:02:00.0", 79, "GPU has fallen off the bus")
    assert xid.source.line == 13


def test_journal_prefix_and_correctable() -> None:
    result = dmesg.parse(section("journal-aer-correctable-pop-os.txt"), "journal")
    assert [(e.bdf, e.severity) for e in result.events] == [
        ("0000:00:03.1", "corrected"), ("0000:07:00.0", "corrected"), ("0000:07:00.1", "corrected")]
    assert result.events[0].details == ["BadTLP", "BadDLLP", "Rollover", "Timeout"]
    assert result.events[1].details == ["Timeout"]


def test_fallen_off_bus_without_xid_multiline() -> None:
    result = dmesg.parse(section("dmesg-fallen-off-bus-multiline-nvsentinel.txt"), "d")
    (event,) = result.events
    assert event.kind == "fallen-off-bus" and event.bdf == "0000:b3:00.0" and event.source.line == 1


def test_iommu_lines_and_command_lines() -> None:
    boot = dmesg.parse(section("dmesg-boot-cmdline-dmar-rocm-361.txt"), "d")
    assert boot.iommu_enabled is True and "intel_iommu=on iommu=pt" in boot.cmdline
    wrapped = dmesg.parse(section("dmesg-iommu-cmdline-wrapped-nix.txt"), "d")
    # the Kernel command line (the second copy) wins; its wrapped pieces are joined back
    assert "lockdown=confidentiality" in wrapped.cmdline and wrapped.cmdline.endswith("iommu.passthrough=1")
    domain = dmesg.parse(section("iommu-default-domain-fwupd.txt"), "d")
    assert domain.default_domain == "passthrough"
    proxmox = dmesg.parse(section("dmesg-dmar-proxmox-i915-sriov.txt"), "d")
    assert proxmox.events == [] and proxmox.cmdline is None


def test_dmesg_into_the_machine() -> None:
    machine = build_machine([Evidence(name="d", path=PCIE / "dmesg-boot-cmdline-dmar-rocm-361.txt")])
    assert machine.inputs[0].format == "dmesg"
    assert machine.host.iommu_mode == "passthrough"  # from the boot command line in the log
    nix = build_machine([Evidence(name="d", path=PCIE / "dmesg-iommu-cmdline-wrapped-nix.txt")])
    assert nix.inputs[0].format == "dmesg" and nix.host.iommu_mode == "passthrough"


def test_dmesg_sniff() -> None:
    assert dmesg.sniff((PCIE / "journal-aer-correctable-pop-os.txt").read_text()) >= 0.8
    assert dmesg.sniff((PCIE / "lspci-vvv-dell-root-ports-acs-gpud.txt").read_text()) == 0.0
