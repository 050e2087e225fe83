"""Whole stories: real (or assembled) evidence in, the findings, causes and TP groups an expert would give out."""

from __future__ import annotations

from pathlib import Path

from k3diag.analyze.pipeline import analyze_machine
from k3diag.evidence import Evidence
from k3diag.inputs import load_machine
from k3diag.join.build import build_machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _analyze(*paths: Path):
    machine, _ = load_machine(list(paths))
    return analyze_machine(machine)


def _by_key(analysis) -> dict:
    return {finding.key: finding for finding in analysis.findings}


def test_seed_four_gpu_box_pairs_near_gpus() -> None:
    # The seed article's example (section 4), as `nvidia-smi topo -m` prints it.
    text = (
        "        GPU0    GPU1    GPU2    GPU3\n"
        "GPU0     X      PIX     SYS     SYS\n"
        "GPU1    PIX      X      SYS     SYS\n"
        "GPU2    SYS     SYS      X      PIX\n"
        "GPU3    SYS     SYS     PIX      X\n"
    )
    analysis = analyze_machine(build_machine([Evidence(name="topo.txt", data=text.encode())]))
    recommendation = analysis.recommendation
    assert recommendation.groups[2] == [[0, 1], [2, 3]]
    assert recommendation.worst_link[2] == "PIX" and recommendation.worst_link[4] == "SYS"
    assert "SYS" in recommendation.comparison and "TP2" in recommendation.comparison
    assert analysis.verdict.best_tp == 2
    assert "Serve with TP2 on {0,1} {2,3}" in analysis.verdict.text


def test_dual_socket_switch_box_from_a_real_paste() -> None:
    analysis = _analyze(FIXTURES / "scenarios" / "topo-m-8gpu-pcie-switches-quda-669.txt")
    rec = analysis.recommendation
    assert rec.groups[2] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert rec.groups[4] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert (rec.worst_link[2], rec.worst_link[4], rec.worst_link[8]) == ("PIX", "PXB", "SYS")
    assert analysis.verdict.level == "usable" and analysis.verdict.best_tp == 4
    [crossing] = [f for f in analysis.findings if f.id == "gpu-pair-sys"]  # a design property: one, advisory
    sys_pairs = [tuple(pair) for pair in crossing.data["pairs"]]
    assert crossing.severity == "info" and crossing.kind == "design"
    assert len(sys_pairs) == 16 and ("GPU0", "GPU4") in sys_pairs and ("GPU0", "GPU1") not in sys_pairs


def test_dual_socket_pcie_box_with_shm_fallback_tells_the_chain() -> None:
    # The bundle holds outputs of three machines (L40S NVML readings, an L20 host's NCCL log, a 2080 Ti
    # p2pBandwidthLatencyTest): `analyze` reports them apart (tests/join/test_machine_identity.py). Here
    # the rules' chain is exercised on the evidence joined on purpose, as if it were one machine.
    from k3diag.inputs import evidence_from_paths

    evidence, problems = evidence_from_paths([FIXTURES / "bundles" / "bad-8x-pcie-dual-socket"])
    analysis = analyze_machine(build_machine(evidence))
    found = _by_key(analysis)
    shm = [f for f in analysis.findings if f.id == "nccl-same-host-pair-not-p2p" and f.data.get("gpus") == [0, 4]]
    assert shm, [f.key for f in analysis.findings if f.id.startswith("nccl")]
    # NCCL used SHM between ranks 0 and 4 because P2P is refused (CNS) because the pair crosses sockets (SYS)
    assert shm[0].causes == ["p2p-not-supported"]  # the refusal by design stands for the pair's key
    assert "p2p-not-supported@GPU0,GPU4" in found["p2p-not-supported"].aliases
    assert found["p2p-not-supported"].causes == ["gpu-pair-sys"]  # the machine's one SYS finding
    assert any("via SHM" in ref.text for ref in shm[0].evidence)
    assert found["pcie-width-below-max@GPU2"].severity == "fail"
    assert analysis.recommendation.groups[2] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_nvswitch_box_with_one_nvlink_down() -> None:
    from k3diag.collect.nvml import collect_nvml
    from k3diag.collect.nvml_fake import FakeNvmlBackend

    backend = FakeNvmlBackend.from_file(FIXTURES / "nvml" / "h100-sxm-8x-nvswitch-gpu3-link-down.json")
    analysis = analyze_machine(build_machine([collect_nvml(backend)]))
    found = _by_key(analysis)
    assert "nvlink-count-low@GPU3" in found
    assert not [k for k in found if k.startswith(("gpu-pair-sys", "p2p-not-supported"))]
    rec = analysis.recommendation
    assert rec.worst_link[8] == "NV17"
    # GPU3's short links end up in one TP2 group only; every other group keeps NV18
    assert sorted(rec.group_worst[2]) == ["NV17", "NV18", "NV18", "NV18"]


def test_consumer_gpus_without_p2p() -> None:
    analysis = _analyze(FIXTURES / "nvidia" / "topo-m-2x5090-tabs-gpu-numa-id.txt",
                        FIXTURES / "nvidia" / "topo-p2p-2x5090-gns-tabs.txt")
    found = _by_key(analysis)
    refusal = found["p2p-not-supported"]  # GeForce: refused by design, one advisory finding
    assert refusal.data["codes"] == ["GNS"] and refusal.severity == "info"
    assert "--disable-custom-all-reduce" in refusal.remedy
    assert analysis.verdict.level != "good"


def test_vm_with_a_flattened_topology_is_called_out() -> None:
    folder = FIXTURES / "scenarios" / "vm-flattened"
    analysis = _analyze(folder / "nvidia-smi-topo-m.txt", folder / "lspci-vv.txt")
    found = _by_key(analysis)
    mismatch = found["topology-path-mismatch@GPU0,GPU3"]
    assert mismatch.data["nvidia_smi"] == "PHB" and mismatch.data["pcie_tree"] == "SYS"
    # the tree puts GPU3 on the other socket while topo -m groups it with GPU0: it decides TP groups, so it warns
    assert mismatch.severity == "warn"
    assert found["topology-path-mismatch@GPU0,GPU2"].severity == "info"  # PHB against NODE: one socket either way
    assert "topology-path-mismatch@GPU0,GPU1" in found  # PHB claimed, one switch in reality (PIX)


def test_mixed_box_where_one_gpu_runs_x8() -> None:
    analysis = _analyze(FIXTURES / "pcie" / "dual-socket-server")
    found = _by_key(analysis)
    width = found["pcie-width-below-max@GPU2"]
    hop = found["pcie-link-width-limited-by-hop@GPU2"]
    assert hop.key in width.causes
    assert "0000:40:01.1" in hop.title and "x8" in hop.title
    acs = found["acs-redirect-between-gpus@GPU0,GPU1,0000:02:00.0"]
    assert "0000:02:00.0" in acs.title and "setpci -s 0000:02:00.0 ECAP_ACS+0x6.w=0000" in acs.remedy
    assert "{0,1}" in analysis.verdict.text
