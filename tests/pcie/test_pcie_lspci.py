"""`lspci -vv` parser on real outputs: values, markers, excerpts, non-root, tabs and spaces."""

from __future__ import annotations

from pcie_paths import PCIE, section

from k3diag.parse import lspci
from k3diag.parse.text import Section


def parse(name: str) -> lspci.LspciResult:
    return lspci.parse(section(name), name)


def test_dell_root_ports_links_acs_bus_ranges_numa() -> None:
    result = parse("lspci-vvv-dell-root-ports-acs-gpud.txt")
    assert [d.bdf for d in result.devices] == ["0000:00:0c.0", "0000:00:0e.0"]
    port = result.devices[1]
    assert port.class_code == 0x0604 and port.vendor_id == "8086" and port.is_bridge
    assert port.description == "Intel Corporation Device 1bbe"
    assert port.port_type == "Root Port" and port.numa_node == 0 and port.driver == "pcieport"
    assert (port.primary_bus, port.secondary_bus, port.subordinate_bus) == (0, 2, 3)
    link = port.link
    assert (link.cap_speed_gts, link.cap_width, link.sta_speed_gts, link.sta_width) == (8.0, 1, 5.0, 1)
    assert link.speed_downgraded is True and link.width_downgraded is False
    assert link.target_speed_gts == 8.0 and link.supported_max_speed_gts == 8.0 and link.port_number == 14
    assert port.acs.ctl == {"SrcValid": True, "TransBlk": False, "ReqRedir": False, "CmpltRedir": False,
                            "UpstreamFwd": False, "EgressCtrl": False, "DirectTrans": False}
    assert port.acs.cap["UpstreamFwd"] is True and port.acs.redirects_p2p is False
    assert port.capabilities_read is True
    # the LnkSta line is quoted with its line number
    assert link.source.line == 117 and "LnkSta:" in link.source.text


def test_acsviol_tokens_in_aer_lines_are_not_acs_settings() -> None:
    result = parse("lspci-vv-quadro-rtx8000-downgraded-excerpt.txt")
    assert len(result.devices) == 1
    device = result.devices[0]
    assert device.bdf is None and device.acs is None
    assert (device.link.sta_speed_gts, device.link.sta_width) == (5.0, 1)
    # no LnkCap in the excerpt: the markers are all there is
    assert device.link.speed_downgraded is True and device.link.width_downgraded is True


def test_width_downgrade_computed_and_marked_script_output() -> None:
    result = parse("lspci-vv-rtx2060-width-downgraded-script.txt")
    assert [d.bdf for d in result.devices] == ["0000:01:00.0", "0000:02:00.0"]
    for device in result.devices:
        assert device.class_code == 0x0300 and device.vendor_id == "10de"
        assert device.description == "NVIDIA Corporation TU106 [GeForce RTX 2060 Rev. A]"
        assert (device.link.cap_width, device.link.sta_width) == (16, 8)
        assert device.link.width_downgraded is True and device.link.speed_downgraded is False
        assert device.link.target_speed_gts == 8.0


def test_no_markers_old_and_new_pciutils_compute_from_numbers() -> None:
    new = parse("lspci-grep-lnk-new-pciutils-no-ok-marker.txt").devices
    assert len(new) == 1 and new[0].link.cap_speed_gts == 32.0
    assert new[0].link.speed_downgraded is False and new[0].link.width_downgraded is False
    old = parse("lspci-vv-grep-old-pciutils-amd.txt").devices
    assert len(old) == 11
    root_port = next(d for d in old if d.bdf == "0000:00:04.0")
    # flags on the same line as LnkSta, no LnkCap: nothing to compare, no marker
    assert (root_port.link.sta_speed_gts, root_port.link.sta_width) == (5.0, 1)
    assert root_port.link.speed_downgraded is None
    gpu = next(d for d in old if d.bdf == "0000:00:01.0")
    assert gpu.class_code == 0x0300 and gpu.vendor_id == "1002"
    assert gpu.description == "Advanced Micro Devices, Inc. [AMD/ATI] Trinity [Radeon HD 7540D]"


def test_spaces_and_two_space_indents_idle_speed() -> None:
    for name in ("lspci-vv-rtx4090-riser-spaces.txt", "lspci-vv-rtx-a4000-idle-2space-excerpt.txt"):
        (device,) = parse(name).devices
        assert (device.link.cap_speed_gts, device.link.sta_speed_gts) == (16.0, 2.5)
        assert device.link.cap_width == device.link.sta_width == 16
        assert device.link.speed_downgraded is True and device.link.width_downgraded is False


def test_first_line_lost_its_indentation() -> None:
    (device,) = parse("lspci-vvv-lnk-target-speed-excerpt.txt").devices
    assert device.link.sta_speed_gts == 16.0 and device.link.target_speed_gts == 16.0
    assert device.link.supported_max_speed_gts == 16.0


def test_nn_header_class_and_ids_numa_node() -> None:
    (gpu,) = parse("lspci-vv-a100-numa-nn-excerpt.txt").devices
    assert gpu.bdf == "0000:da:00.0" and gpu.class_code == 0x0302 and gpu.class_name == "3D controller"
    assert (gpu.vendor_id, gpu.device_id) == ("10de", "20b0")
    assert gpu.description == "NVIDIA Corporation GA100 [A100 SXM4 40GB]"
    assert gpu.numa_node == 5 and gpu.port_type == "Endpoint"
    assert gpu.capabilities_read is None  # cut before the capabilities ended


def test_domain_physical_slot_iommu_group() -> None:
    (gpu,) = parse("lspci-vv-rtx-a400-domain-iommu-group.txt").devices
    assert gpu.bdf == "0004:01:00.0" and gpu.physical_slot == "1-3" and gpu.iommu_group == 26
    assert gpu.numa_node == 0 and gpu.port_type == "Legacy Endpoint"


def test_non_root_access_denied() -> None:
    result = parse("lspci-vv-h100-access-denied-spaces.txt")
    gpus = [d for d in result.devices if d.bdf]
    assert [d.bdf for d in gpus] == ["0000:3b:00.0", "0000:3c:00.0"]
    first = gpus[0]
    assert first.access_denied and first.capabilities_read is False and first.link is None
    assert first.physical_slot == "2-1" and first.numa_node == 0 and first.driver == "nvidia"
    assert result.denied == 2  # the header-less tail at the top counts too
    assert any("sudo lspci -vv" in w for w in result.warnings)
    tabs = parse("lspci-vv-access-denied-tabs.txt")
    assert tabs.denied == 2 and tabs.devices[1].bdf == "0000:00:14.2"


def test_plx_switch_acs_on_and_bus_range() -> None:
    result = parse("lspci-vvv-plx-pex8725-acs-spaces.txt")
    tail, port = result.devices
    assert tail.bdf is None and tail.acs.redirects_p2p is True
    assert tail.acs.cap == dict.fromkeys(lspci_flags(), True)
    assert port.bdf == "0000:02:08.0" and port.vendor_id == "10b5"
    assert (port.primary_bus, port.secondary_bus, port.subordinate_bus) == (0x02, 0x82, 0x82)
    upstream = parse("lspci-vvv-plx-pex8619-upstream-tabs.txt").devices[0]
    assert upstream.port_type == "Upstream Port" and upstream.subordinate_bus == 0x0E


def lspci_flags() -> list[str]:
    return ["SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"]


def test_amd_bridge_excerpt_with_cut_marks() -> None:
    (bridge,) = parse("lspci-vvv-amd-starship-acs-rccl-547.txt").devices
    assert bridge.bdf == "0000:40:01.1" and bridge.numa_node == 1 and bridge.acs.redirects_p2p is True


def test_grep_acsctl_outputs_one_device_per_line() -> None:
    spaces = parse("grep-acsctl-spaces-nccl-523.txt").devices
    tabs = parse("grep-acsctl-tabs-nccl-629.txt").devices
    off = parse("grep-acsctl-disabled-nccl-1405.txt").devices
    assert len(spaces) == 13 and len(tabs) == 16 and len(off) == 15
    assert sum(1 for d in spaces if d.acs.redirects_p2p) == 7
    assert sum(1 for d in tabs if d.acs.redirects_p2p) == 5
    assert not any(d.acs.redirects_p2p for d in off)
    assert all(d.bdf is None for d in spaces + tabs + off)


def test_lspci_v_numeric_header_and_acs_without_settings() -> None:
    (port,) = parse("lspci-v-numeric-iommu-group-excerpt.txt").devices
    assert port.bdf == "0000:21:04.0" and port.class_code == 0x0604 and port.vendor_id == "1022"
    assert port.device_id == "57a3" and port.iommu_group == 18 and port.port_type == "Downstream Port"
    text = "00:03.1 PCI bridge: AMD\n\tCapabilities: [2a0] Access Control Services\n\tKernel driver in use: pcieport\n"
    result = lspci.parse(Section(text, 1), "v.txt")
    assert result.devices[0].capabilities_read is None and "ACSCtl" in result.warnings[0]


def test_prose_around_a_header_and_prompt_lines() -> None:
    result = parse("lspci-vv-rtx4090-idle-then-load-excerpt.txt")
    gpu = next(d for d in result.devices if d.bdf)
    assert gpu.bdf == "0000:62:00.0" and gpu.class_code == 0x0300
    assert gpu.description == "NVIDIA Corporation AD102 [GeForce RTX 4090]"
    # the quoted `LnkSta:` inside prose is not a reading
    assert all(d.link is None for d in result.devices)
    (root,) = parse("lspci-vvv-rpi-root-port-prompt.txt").devices
    assert root.bdf == "0000:00:00.0" and root.secondary_bus == 1 and root.subordinate_bus == 5
    (rx550_port,) = parse("lspci-vvv-rx550-pi-root-port-prompt.txt").devices
    assert rx550_port.link.cap_speed_gts == 5.0 and rx550_port.link.cap_width == 1  # line cut after the width


def test_amd_gpu_ok_markers() -> None:
    (gpu,) = parse("lspci-vv-amd-gpu-ok-markers-excerpt.txt").devices
    assert gpu.link.speed_downgraded is False and gpu.link.width_downgraded is False
    assert gpu.link.target_speed_gts == 8.0
    (rx570,) = parse("lspci-vv-amd-rx570-spaces.txt").devices
    assert rx570.vendor_id == "1002" and rx570.port_type == "Legacy Endpoint"


def test_sniff_tells_lspci_from_its_neighbours() -> None:
    for name in ("lspci-vvv-dell-root-ports-acs-gpud.txt", "grep-acsctl-tabs-nccl-629.txt",
                 "lspci-vv-quadro-rtx8000-downgraded-excerpt.txt", "lspci-vv-h100-access-denied-spaces.txt"):
        assert lspci.sniff((PCIE / name).read_text()) >= 0.8, name
    for name in ("lspci-tv-amd-mi100-rccl-547.txt", "lspci-t-3090-switch-club3090-741.txt",
                 "dmesg-aer-surprise-down-xid79-gpu-burn.txt", "cmdline-intel-iommu-pt-rocm-361.txt"):
        assert lspci.sniff((PCIE / name).read_text()) < 0.5, name


def test_garbage_lines_become_warnings_not_exceptions() -> None:
    text = "00:01.0 PCI bridge: X\n\tLnkSta:\tSpeed fastGT/s, Width xx\n\tACSCtl:\t\n" + "x" * 70000 + "\n"
    result = lspci.parse(Section(text, 10), "bad.txt")
    assert result.devices[0].bdf == "0000:00:01.0"
    assert any("line 11" in w for w in result.warnings)
    assert any("line 13" in w for w in result.warnings)
