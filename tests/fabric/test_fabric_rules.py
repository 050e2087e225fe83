"""Fabric findings as a user reads them: the fault named, the line that proves it quoted."""

from __future__ import annotations

from k3diag.analyze.engine import run_rules
from k3diag.model.fabric import NvLinkReading
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef
from tests.fabric.conftest import machine_from


def _by_id(findings, finding_id):
    return [f for f in findings if f.id == finding_id]


def test_inactive_nvlinks_are_named_with_their_lines() -> None:
    findings = run_rules(machine_from("fabric/nvlink-s-v100-two-inactive-excerpt.txt"))
    [finding] = _by_id(findings, "nvlink-inactive")
    assert finding.subjects == ["GPU3"]
    assert finding.title == "GPU3 has 2 of 6 NVLinks inactive (link 3, 5)"
    assert finding.severity == "warn"  # four links still up
    assert [ref.text.strip() for ref in finding.evidence] == ["Link 3: <inactive>", "Link 5: <inactive>"]


def test_healthy_nvlink_status_gives_no_fabric_fault() -> None:
    findings = run_rules(machine_from("fabric/nvlink-s-a100-8gpu-nv12-gpud.txt"))
    assert not [f for f in findings if f.id.startswith(("nvlink-", "fabric-"))]


def _h100_nvl(active: int, listed: int = 18) -> Machine:
    machine = Machine()
    for gpu in (0, 1):
        machine.gpu(gpu).name = "NVIDIA H100 NVL"
        for link in range(listed):
            text = f"Link {link}: " + ("26.562 GB/s" if link < active else "<inactive>")
            machine.fabric.add_nvlink(NvLinkReading(gpu, link, link < active, 26.562 if link < active else None,
                                                    source=SourceRef("nvlink-s.txt", gpu * 20 + link + 2, text)))
    return machine


def test_h100_nvl_uses_twelve_links_by_design() -> None:
    findings = run_rules(_h100_nvl(active=12))
    assert not _by_id(findings, "nvlink-inactive")
    [by_design] = _by_id(findings, "nvlink-partial-by-design")
    assert by_design.subjects == ["GPU0", "GPU1"]
    assert (by_design.severity, by_design.kind) == ("info", "design")
    assert by_design.title == "GPU0, GPU1 (NVIDIA H100 NVL) use 12 of 18 NVLinks, as this SKU is built"


def test_h100_nvl_with_fewer_than_twelve_is_a_fault() -> None:
    findings = run_rules(_h100_nvl(active=10))
    assert [f.severity for f in _by_id(findings, "nvlink-inactive")] == ["warn", "warn"]


def test_b200_all_links_inactive_fails() -> None:
    [finding] = _by_id(run_rules(machine_from("fabric/nvlink-s-b200-all-inactive.txt")), "nvlink-all-inactive")
    assert finding.severity == "fail" and finding.subjects == ["GPU2"]
    assert "all links are inActive" in finding.evidence[0].text


def test_cuda_802_and_fm_version_mismatch_chain() -> None:
    machine = machine_from("fabric/cuda-802-torch-warning-dstack.txt",
                           "fabric/fm-systemctl-status-version-mismatch-akash.txt")
    findings = run_rules(machine)
    [not_ready] = _by_id(findings, "fabric-manager-not-running")
    [mismatch] = _by_id(findings, "fabric-manager-version-mismatch")
    assert not_ready.severity == "fail"
    assert "error 802" in not_ready.title
    assert any("Error 802: system not yet initialized" in ref.text for ref in not_ready.evidence)
    assert mismatch.title == "Fabric Manager 550.127.05 does not match the driver 550.120"
    assert "don't match with driver version 550.120" in mismatch.evidence[0].text
    assert not_ready.causes == [mismatch.key]


def test_fabric_in_progress_is_not_ready() -> None:
    findings = run_rules(machine_from("fabric/query-fabric-in-progress-b200-gpu-operator2511.txt"))
    [finding] = _by_id(findings, "fabric-manager-not-running")
    assert "`In Progress`" in finding.explanation
    assert finding.evidence[0].text.strip().startswith("State") and "In Progress" in finding.evidence[0].text


def test_gb200_insufficient_resources_and_clique_zero() -> None:
    machine = machine_from("fabric/query-fabric-insufficient-resources-azhpc506.txt")
    machine.gpus[0].name = "NVIDIA GB200"
    [finding] = _by_id(run_rules(machine), "gpu-fabric-degraded")
    assert finding.severity == "fail"
    assert "`Status: Insufficient Resources`" in finding.title
    assert "`CliqueId: 0`" in finding.explanation and "all-zero ClusterUUID" in finding.explanation
    assert [ref.line for ref in finding.evidence] == [3, 4, 5]


def test_h100_zero_cluster_uuid_with_success_is_normal() -> None:
    text = ("Fabric\n    State                             : Completed\n    Status                            : Success\n"
            "    CliqueId                          : 0\n"
            "    ClusterUUID                       : 00000000-0000-0000-0000-000000000000\n")
    machine = machine_from(texts={"fabric.txt": text})
    machine.gpus[0].name = "NVIDIA H100 80GB HBM3"
    assert not _by_id(run_rules(machine), "gpu-fabric-degraded")


def test_unhealthy_summary_is_degraded() -> None:
    [finding] = _by_id(run_rules(machine_from("fabric/query-fabric-grep-c3-unhealthy-dra626.txt")), "gpu-fabric-degraded")
    assert "Summary" in finding.evidence[0].text and "Unhealthy" in finding.evidence[0].text


def test_nvswitch_errors_from_fabric_manager_log() -> None:
    findings = run_rules(machine_from("fabric/fm-log-matcher-lines-gpud.log"))
    fatal = _by_id(findings, "fabric-manager-nvswitch-fatal")[0]
    assert fatal.severity == "fail" and "SXid 20034" in fatal.title
    assert _by_id(findings, "fabric-manager-topology-mismatch")[0].severity == "fail"
    assert _by_id(findings, "fabric-manager-nothing-to-do")[0].severity == "info"


def test_imex_channel_missing_from_application_log() -> None:
    text = "[CUDA_ERROR_NOT_PERMITTED] operation not permitted in expression cuMemCreate(&handle, size, &prop, 0 )\n"
    [finding] = _by_id(run_rules(machine_from(texts={"app.log": text})), "imex-channel-missing")
    assert "cuMemCreate" in finding.evidence[0].text
    assert "nvidia-caps-imex-channels" in finding.remedy
