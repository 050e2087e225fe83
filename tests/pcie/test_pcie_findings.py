"""Findings on the fixture server and on real outputs: the limiting hop, the ACS port, no idle alarms."""

from __future__ import annotations

from pcie_paths import PCIE, SYSFS

from k3diag.analyze.engine import run_rules
from k3diag.collect.sysfs import collect_platform
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.model.machine import Machine
from k3diag.join.merge_pci import attach_endpoints, update_iommu_mode
from k3diag.model.pci import DmesgEvent, PciDevice, PciLink, platform_state
from k3diag.model.source import SourceRef
from k3diag.model.topology import Gpu, Link

SERVER_TEXT = PCIE / "dual-socket-server"


def findings_for(*names: str):
    evidence = [Evidence(name=name, path=PCIE / name) for name in names]
    return run_rules(build_machine(evidence))


def by_key(findings):
    return {finding.key: finding for finding in findings}


def test_fixture_server_story_from_sysfs() -> None:
    """The acceptance path: collect_platform -> build_machine -> run_rules."""
    machine = build_machine(collect_platform(SYSFS / "dual_socket_switch", run_dmesg=False))
    found = by_key(run_rules(machine))
    width = found["pcie-link-width-limited-by-hop@GPU2"]
    assert width.title == ("GPU2 runs at x8: the root port 0000:40:01.1 above it is wired x8 (LnkCap x8); "
                           "GPU2 itself is capable of x16")
    assert width.data["limiting_device"] == "0000:40:01.1" and width.data["kind"] == "wired"
    assert width.data["lost_gbs"] == 15.75  # Gen4 x16 31.5 GB/s -> x8 15.75 GB/s
    assert any("0000:40:01.1/max_link_speed/width" in ref.text for ref in width.evidence)
    # nvidia-smi-style GPU finding (topology rules) is explained by the hop
    assert "pcie-link-width-limited-by-hop@GPU2" in found["pcie-width-below-max@GPU2"].causes
    acs = found["acs-redirect-between-gpus@GPU0,GPU1,0000:02:00.0"]
    assert acs.severity == "fail"
    assert acs.title.startswith("ACS request redirect is on at 0000:02:00.0, the switch downstream port above GPU0")
    assert acs.data["pairs"] == [["GPU0", "GPU1"]]
    assert "setpci -s 0000:02:00.0 ECAP_ACS+0x6.w=0000" in acs.remedy
    assert "ACS control" in acs.evidence[0].text and "ReqRedir+" in acs.evidence[0].text
    assert found["acs-redirect-gpu-nic@GPU0,mlx5_0,0000:02:00.0"].severity == "fail"
    far = found["gpu-nic-far"]  # a design property: one advisory finding for the machine
    assert (far.severity, far.kind) == ("info", "design")
    assert far.explanation.startswith("GPU3") and "gpu-nic-far@GPU3,mlx5_0" in far.aliases
    # no false alarm: GPU3 idles at 2.5 GT/s, reported as information only
    assert found["pcie-gen-below-max@GPU3"].severity == "info"
    assert not any(f.severity in ("fail", "warn") and "GPU3" in f.subjects and "speed" in f.id + f.title.lower()
                   for f in found.values())
    assert not [k for k in found if k.startswith(("iommu-translated", "acs-state-unknown", "topology-path-mismatch"))]


def test_fixture_server_story_from_lspci_and_topo() -> None:
    found = by_key(run_rules(build_machine([
        Evidence(name="lspci-vv.txt", path=SERVER_TEXT / "lspci-vv.txt"),
        Evidence(name="lspci-tv.txt", path=SERVER_TEXT / "lspci-tv.txt"),
        Evidence(name="topo.txt", path=SERVER_TEXT / "nvidia-smi-topo-m.txt"),
    ])))
    width = found["pcie-link-width-limited-by-hop@GPU2"]
    assert "the root port 0000:40:01.1 above it is wired x8 (LnkCap x8)" in width.title
    assert width.evidence[0].input == "lspci-vv.txt" and "LnkCap:" in width.evidence[0].text
    assert "acs-redirect-between-gpus@GPU0,GPU1,0000:02:00.0" in found
    # the derived paths agree with the generated topo -m
    assert not [k for k in found if k.startswith("topology-path-mismatch")]


def test_non_root_tree_degrades_with_clear_words() -> None:
    found = by_key(run_rules(build_machine(collect_platform(SYSFS / "dual_socket_switch_nonroot", run_dmesg=False))))
    unknown = found["acs-state-unknown@GPU0,GPU1"]
    assert "sudo lspci -vv" in unknown.title and "0000:02:00.0" in unknown.explanation
    assert "without root" in unknown.explanation
    assert "pcie-link-width-limited-by-hop@GPU2" in found  # the link files need no root
    assert not [k for k in found if k.startswith("acs-redirect")]


def test_real_width_downgrades_found() -> None:
    found = by_key(findings_for("lspci-vv-rtx2060-width-downgraded-script.txt"))
    for label in ("GPU0", "GPU1"):
        finding = found[f"pcie-link-width-limited-by-hop@{label}"]
        assert finding.data["kind"] == "port-unknown" and finding.data["width"] == 8
        assert finding.data["lost_gbs"] == 7.88  # Gen3 x16 15.75 -> x8 7.875
    quadro = by_key(findings_for("lspci-vv-quadro-rtx8000-downgraded-excerpt.txt"))
    assert quadro["pcie-link-width-limited-by-hop@pci"].severity == "warn"
    assert quadro["pcie-link-width-limited-by-hop@pci"].evidence[0].line == 4


def test_real_acs_redirects_found_everywhere() -> None:
    counts = {
        "grep-acsctl-spaces-nccl-523.txt": 7,
        "grep-acsctl-tabs-nccl-629.txt": 5,
        "lspci-vvv-plx-pex8725-acs-spaces.txt": 1,
        "lspci-vvv-amd-starship-acs-rccl-547.txt": 1,
    }
    for name, expected in counts.items():
        (finding,) = [f for f in findings_for(name) if f.id == "acs-redirect-enabled"]
        assert len(finding.data["bridges"]) == expected, name
        assert finding.severity == "warn" and len(finding.evidence) == min(expected, 10)
    assert not [f for f in findings_for("grep-acsctl-disabled-nccl-1405.txt") if f.id.startswith("acs-")]


def test_no_false_alarm_on_idle_speed_drops() -> None:
    for name in ("lspci-vv-rtx4090-riser-spaces.txt", "lspci-vv-rtx-a4000-idle-2space-excerpt.txt",
                 "lspci-vvv-dell-root-ports-acs-gpud.txt"):
        found = findings_for(name)
        speed = [f for f in found if f.id == "pcie-link-speed-below-capability"]
        assert speed and all(f.severity == "info" for f in speed), name
        assert not [f for f in found if f.severity in ("fail", "warn")], name


def test_busy_gpu_and_slow_bridge_fail() -> None:
    machine = Machine()
    root = PciDevice("0000:00:01.0", is_bridge=True, secondary_bus=1, subordinate_bus=3, port_type="Root Port",
                     link=PciLink(cap_speed_gts=16.0, cap_width=16, sta_speed_gts=8.0, sta_width=16))
    usp = PciDevice("0000:01:00.0", is_bridge=True, secondary_bus=2, subordinate_bus=3, port_type="Upstream Port",
                    link=PciLink(cap_speed_gts=16.0, cap_width=16, sta_speed_gts=8.0, sta_width=16))
    dsp = PciDevice("0000:02:00.0", is_bridge=True, secondary_bus=3, subordinate_bus=3, port_type="Downstream Port",
                    link=PciLink(cap_speed_gts=16.0, cap_width=16, sta_speed_gts=2.5, sta_width=16))
    gpu = PciDevice("0000:03:00.0", class_code=0x0302, vendor_id="10de",
                    link=PciLink(cap_speed_gts=16.0, cap_width=16, sta_speed_gts=2.5, sta_width=16))
    machine.pci.extend([root, usp, dsp, gpu])
    machine.gpus[0] = Gpu(index=0, bus_id="0000:03:00.0", performance_state="P0")
    attach_endpoints(machine)  # what every merge does: the GPU's pcie state from its PCI function
    assert (machine.gpus[0].pcie.gen_current, machine.gpus[0].pcie.gen_max) == (1, 4)
    found = by_key(run_rules(machine))
    slow = found["pcie-link-speed-below-capability@GPU0"]
    # the bridge link above the switch is the topmost slow hop: a failure whatever the GPU does
    assert slow.severity == "fail" and slow.data["hop"] == "0000:00:01.0 -> 0000:01:00.0"
    usp.link.sta_speed_gts = root.link.sta_speed_gts = 16.0
    found = by_key(run_rules(machine))
    assert found["pcie-gen-below-max@GPU0"].severity == "warn"  # busy GPU at Gen1: nvidia-smi's rule says it
    assert "pcie-link-speed-below-capability@GPU0" not in found


def test_topology_mismatch_when_topo_says_pix_but_tree_crosses_host_bridges() -> None:
    machine = build_machine(collect_platform(SYSFS / "dual_socket_switch", run_dmesg=False))
    machine.add_link(Link("GPU0", "GPU2", "PIX", source=SourceRef("topo.txt", 3, "GPU0\t X \tPIX")))
    machine.add_link(Link("GPU0", "GPU1", "PIX", source=SourceRef("topo.txt", 2, "GPU0\t X \tPIX")))
    found = by_key(run_rules(machine))
    mismatch = found["topology-path-mismatch@GPU0,GPU2"]
    assert mismatch.severity == "warn" and mismatch.data == {
        "nvidia_smi": "PIX", "pcie_tree": "NODE",
        "bridges": ["0000:02:00.0", "0000:01:00.0", "0000:00:01.1", "0000:40:01.1"]}
    assert mismatch.evidence[0].input == "topo.txt"
    assert "topology-path-mismatch@GPU0,GPU1" not in found


def test_iommu_translated_with_acs_and_the_chain() -> None:
    machine = build_machine(collect_platform(SYSFS / "dual_socket_switch", run_dmesg=False))
    iommu = platform_state(machine).iommu
    iommu.gpu_group_types = {bdf: "DMA-FQ" for bdf in iommu.gpu_group_types} or {"0000:03:00.0": "DMA-FQ"}
    update_iommu_mode(machine)
    found = by_key(run_rules(machine))
    translated = found["iommu-translated@iommu"]
    assert translated.severity == "fail"  # with ACS redirect on
    assert "iommu-translated@iommu" in found["acs-redirect-between-gpus@GPU0,GPU1,0000:02:00.0"].causes


def test_aer_on_the_port_explains_xid_79() -> None:
    machine = build_machine([
        Evidence(name="lspci.txt", data=(
            "00:02.0 PCI bridge: Intel Corporation Xeon E7 v4/Xeon E5 v4/Xeon E3 v4/Xeon D PCI Express Root Port 2 "
            "(rev 01) (prog-if 00 [Normal decode])\n\tBus: primary=00, secondary=02, subordinate=02, sec-latency=0\n\n"
            "02:00.0 3D controller: NVIDIA Corporation GP100GL [Tesla P100 PCIe 16GB] (rev a1)\n"
            "\tKernel driver in use: nvidia\n").encode()),
        Evidence(name="dmesg.txt", path=PCIE / "dmesg-aer-surprise-down-xid79-gpu-burn.txt"),
    ])
    found = by_key(run_rules(machine))
    aer = found["pcie-aer-errors@0000:00:02.0,GPU0"]
    assert aer.severity == "fail" and "the root port 0000:00:02.0 above GPU0" in aer.title
    xid = found["xid-errors@GPU0,Xid79"]
    assert xid.severity == "fail" and xid.causes == [aer.key]
    assert xid.evidence[0].text.endswith("79, GPU has fallen off the bus.")


def test_xid_severity_by_code() -> None:
    machine = Machine()
    state = platform_state(machine)
    for code in (13, 48, 92, 999):
        state.events.append(DmesgEvent(kind="xid", bdf="0000:17:00.0", code=code,
                                       source=SourceRef("d", code, f"NVRM: Xid (PCI:0000:17:00): {code}, x")))
    found = {f.data["code"]: f.severity for f in run_rules(machine) if f.id == "xid-errors"}
    assert found == {13: "info", 48: "fail", 92: "warn", 999: "warn"}
