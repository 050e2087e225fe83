"""The sysfs collector against fixture trees: as root, without root, in a container, in a VM."""

from __future__ import annotations

import json
import subprocess
import sys

from pcie_paths import REPO, SYSFS

from k3diag.collect.sysfs import collect_platform, filter_dmesg, read_snapshot
from k3diag.join.build import build_machine
from k3diag.parse.sysfs_snapshot import parse_speed


def by_name(evidence):
    return {item.format_hint: item for item in evidence}


def test_root_tree_snapshot_and_evidence() -> None:
    evidence = by_name(collect_platform(SYSFS / "dual_socket_switch", run_dmesg=False))
    assert set(evidence) == {"sysfs-snapshot", "kernel-cmdline", "dmesg"}
    snapshot = json.loads(evidence["sysfs-snapshot"].data)
    assert snapshot["schema"] == "k3diag.sysfs-snapshot/1" and snapshot["notes"] == []
    gpu2 = next(d for d in snapshot["devices"] if d["bdf"] == "0000:41:00.0")
    assert gpu2["path"] == "devices/pci0000:40/0000:40:01.1/0000:41:00.0"
    assert gpu2["files"]["max_link_width"] == "16" and gpu2["files"]["current_link_width"] == "8"
    assert gpu2["files"]["current_link_speed"] == "16.0 GT/s PCIe"
    assert gpu2["driver"] == "nvidia" and gpu2["iommu_group"] == "12" and gpu2["config_bytes"] == 4096
    nic = next(d for d in snapshot["devices"] if d["bdf"] == "0000:05:00.0")
    assert nic["net"] == ["mlx5_0", "ib0"]
    assert snapshot["iommu"]["class_iommu"] == ["ivhd0", "ivhd1", "ivhd2"]
    assert set(snapshot["iommu"]["groups"].values()) == {"identity"}
    assert b"iommu=pt" in evidence["kernel-cmdline"].data
    assert b"Default domain type: Passthrough" in evidence["dmesg"].data


def test_root_tree_model() -> None:
    machine = build_machine(collect_platform(SYSFS / "dual_socket_switch", run_dmesg=False))
    assert [inp.format for inp in machine.inputs] == ["sysfs-snapshot", "kernel-cmdline", "dmesg"]
    assert all(not inp.warnings for inp in machine.inputs)
    dsp = machine.pci_device("0000:02:00.0")
    assert dsp.parent == "0000:01:00.0" and dsp.host_bridge == "0000:00" and dsp.port_type == "Downstream Port"
    assert dsp.acs.redirects_p2p is True and dsp.capabilities_read is True
    assert (dsp.secondary_bus, dsp.subordinate_bus) == (3, 3)
    root_port = machine.pci_device("0000:40:01.1")
    assert (root_port.link.cap_width, root_port.link.sta_width) == (8, 8)
    assert [g.bus_id for g in machine.sorted_gpus()] == ["0000:03:00.0", "0000:04:00.0", "0000:41:00.0",
                                                          "0000:81:00.0"]
    assert [g.numa_node for g in machine.sorted_gpus()] == [0, 0, 0, 1]
    gpu2 = machine.gpus[2]
    assert (gpu2.pcie.width_current, gpu2.pcie.width_max, gpu2.pcie.gen_max) == (8, 16, 4)
    assert machine.gpus[3].pcie.gen_current == 1  # idle
    assert machine.host.iommu_mode == "passthrough"
    assert "iommu=pt" in machine.host.kernel_cmdline


def test_non_root_tree_says_what_root_would_add() -> None:
    machine = build_machine(collect_platform(SYSFS / "dual_socket_switch_nonroot", run_dmesg=False))
    (snapshot,) = [inp for inp in machine.inputs if inp.format == "sysfs-snapshot"]
    assert len(snapshot.warnings) == 1 and "first 64 bytes" in snapshot.warnings[0]
    assert "run as root" in snapshot.warnings[0]
    dsp = machine.pci_device("0000:02:00.0")
    assert dsp.acs is None and dsp.capabilities_read is False and not dsp.acs_state_known
    assert dsp.port_type is None and dsp.is_bridge and dsp.parent == "0000:01:00.0"
    # the kernel 4.x spelling `16 GT/s` is read like `16.0 GT/s PCIe`
    assert machine.pci_device("0000:41:00.0").link.cap_speed_gts == 16.0
    assert machine.gpus[2].pcie.width_current == 8


def test_container_without_pci_sysfs() -> None:
    machine = build_machine(collect_platform(SYSFS / "container_no_pci", run_dmesg=False))
    assert machine.pci == [] and machine.gpus == {}
    (snapshot,) = [inp for inp in machine.inputs if inp.format == "sysfs-snapshot"]
    assert "does not exist" in snapshot.warnings[0] and "container" in snapshot.warnings[0]
    assert machine.host.kernel_cmdline.startswith("BOOT_IMAGE=")
    assert any("container" in note.message for note in machine.notes)


def test_vm_flat_unknown_speeds_and_numa() -> None:
    machine = build_machine(collect_platform(SYSFS / "vm_flat", run_dmesg=False))
    gpu = machine.pci_device("0000:00:05.0")
    assert gpu.numa_node is None  # numa_node -1
    assert gpu.link.sta_speed_gts is None and gpu.link.cap_speed_gts is None and gpu.link.cap_width is None
    assert gpu.parent is None and gpu.host_bridge == "0000:00"
    assert machine.host.iommu_mode == "translated"
    assert machine.gpus[0].numa_node is None


def test_missing_root_and_missing_cmdline(tmp_path) -> None:
    evidence = by_name(collect_platform(tmp_path, run_dmesg=True))
    assert "dmesg" not in evidence  # not the live host: dmesg is never run
    assert "does not exist" in evidence["kernel-cmdline"].error
    snapshot = read_snapshot(tmp_path)
    assert snapshot["devices"] == [] and "does not exist" in snapshot["notes"][0]


def test_speed_spellings() -> None:
    assert parse_speed("16.0 GT/s PCIe") == 16.0
    assert parse_speed("16 GT/s") == 16.0
    assert parse_speed("2.5 GT/s") == 2.5
    assert parse_speed("32.0 GT/s PCIe") == 32.0
    assert parse_speed("64.0 GT/s PCIe") == 64.0
    assert parse_speed("Unknown") is None and parse_speed("") is None and parse_speed(None) is None


def test_dmesg_filter_keeps_what_matters() -> None:
    text = ("[    1.0] Booting\n[    2.0] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.\n"
            "[    3.0] usb 1-1: new device\n[    4.0] pcieport 0000:00:02.0: AER: Corrected error received: id=0010\n")
    kept = filter_dmesg(text).splitlines()
    assert len(kept) == 2 and "Xid" in kept[0] and "AER" in kept[1]


def test_committed_trees_match_the_generator() -> None:
    done = subprocess.run([sys.executable, str(SYSFS / "make_tree.py"), "--check"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dmesg_permission_denied_is_one_sentence(monkeypatch) -> None:
    from pathlib import Path

    from k3diag.collect import sysfs
    from k3diag.evidence import Evidence

    def denied(timeout_s: float) -> Evidence:
        return Evidence(name="dmesg.txt", kind="command", command="dmesg", exit_code=1, format_hint="dmesg",
                        stderr="dmesg: read kernel buffer failed: Operation not permitted\n",
                        error="`dmesg` exited with code 1: dmesg: read kernel buffer failed: Operation not permitted")

    monkeypatch.setattr(sysfs, "_run_dmesg", denied)
    evidence = sysfs.dmesg_evidence(Path("/"), run_dmesg=True)
    assert evidence.data is None and evidence.error.count(".") <= 1
    assert "dmesg_restrict" in evidence.error and "sudo" in evidence.error
    machine = build_machine([evidence])
    assert machine.inputs[0].warnings == [evidence.error]


def test_dmesg_runs_bounded_through_the_runner(tmp_path, monkeypatch) -> None:
    import os

    from k3diag.collect import sysfs

    fake = tmp_path / "bin" / "dmesg"  # a dmesg that hangs, the executable on PATH
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nsleep 5\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    evidence = sysfs._run_dmesg(0.2)
    assert evidence.timed_out
    assert evidence.error.startswith("`dmesg` did not finish within 0.2 s and was stopped"), evidence.error
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    missing = sysfs._run_dmesg(1.0)
    assert missing.error == "`dmesg` is not installed or not on PATH, so `dmesg` could not run"
