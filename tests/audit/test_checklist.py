"""Every checklist question, answered from model facts: good machine, bad machine, empty machine."""

from __future__ import annotations

import re

import pytest

from k3diag.analyze.engine import run_rules
from k3diag.audit.answer import EXIT_FAIL, EXIT_NOTHING, EXIT_WARN, FAIL, PASS, UNKNOWN, WARN
from k3diag.audit.checklist import QUESTION_IDS, audit_machine
from k3diag.model.machine import Machine


def _audit(machine: Machine, model: str | None = None):
    report = audit_machine(machine, run_rules(machine), [], "quote-4711.tar.gz", model=model)
    return report, {answer.id: answer for answer in report.answers}


def test_the_checklist_follows_the_seed_article() -> None:
    assert QUESTION_IDS == ("pcie-x16", "cpu-numa", "path-classes", "pcie-switch", "p2p", "acs-iommu",
                            "nccl-allreduce", "parallelism", "tp2-vs-tp4", "tp2-tp4-measured", "gpudirect-rdma",
                            "multi-node-network")


def test_good_machine_answers(good_machine: Machine) -> None:
    report, answers = _audit(good_machine)
    verdicts = {qid: a.verdict for qid, a in answers.items()}
    assert verdicts == {
        "pcie-x16": PASS, "cpu-numa": PASS, "path-classes": PASS, "pcie-switch": PASS, "p2p": PASS,
        "acs-iommu": PASS, "nccl-allreduce": PASS, "parallelism": UNKNOWN, "tp2-vs-tp4": PASS,
        "tp2-tp4-measured": UNKNOWN,
        "gpudirect-rdma": PASS, "multi-node-network": WARN,
    }
    assert report.verdict == WARN and report.exit_code == EXIT_WARN
    assert "360 GB/s at 2 GPUs" in answers["nccl-allreduce"].summary
    assert "370 GB/s at 8 GPUs" in answers["nccl-allreduce"].summary
    assert answers["parallelism"].request == "k3diag advise --model MODEL --from quote-4711.tar.gz   (name the target model)"
    assert "GPU0, GPU1, GPU2, GPU3 behind 0000:15:01.0" in answers["pcie-switch"].summary
    assert answers["acs-iommu"].data == {"acs": "off", "acs_redirect_bridges": [], "acs_bridges_read": 2,
                                         "iommu_mode": "passthrough"}
    assert "GDRDMA" in answers["gpudirect-rdma"].summary
    for answer in report.answers:
        if answer.verdict == PASS and answer.id not in ("pcie-switch",):
            assert answer.evidence, f"{answer.id} passes without quoting evidence"
        if answer.verdict == UNKNOWN:
            assert answer.request, f"{answer.id} is unknown without a command to run"


def test_bad_machine_answers(bad_machine: Machine) -> None:
    report, answers = _audit(bad_machine)
    verdicts = {qid: a.verdict for qid, a in answers.items()}
    assert verdicts == {
        "pcie-x16": FAIL, "cpu-numa": WARN, "path-classes": WARN, "pcie-switch": PASS, "p2p": FAIL,
        "acs-iommu": FAIL, "nccl-allreduce": WARN, "parallelism": UNKNOWN, "tp2-vs-tp4": WARN,
        "tp2-tp4-measured": UNKNOWN,
        "gpudirect-rdma": UNKNOWN, "multi-node-network": FAIL,
    }
    assert report.verdict == FAIL and report.exit_code == EXIT_FAIL
    x16 = answers["pcie-x16"]
    assert x16.data["narrow"] == ["GPU2"]
    assert "GPU2: x8 Gen4 (max x16 Gen4): runs x8 though it can do x16" in "\n".join(x16.details)
    assert x16.evidence[0].text == "Current                   : 8x"
    assert answers["cpu-numa"].data["crossing_pairs"][0] == ["GPU0", "GPU4"]
    assert len(answers["cpu-numa"].data["crossing_pairs"]) == 16
    assert answers["path-classes"].data["counts"] == {"PIX": 4, "NODE": 8, "SYS": 16}
    p2p = answers["p2p"]
    assert any("CNS" in line for line in p2p.details)
    assert any("NCCL used SHM (host memory) between ranks 0-4, 3-7" in line for line in p2p.details)
    assert any("P2P enabled is no faster than disabled" in line for line in p2p.details)
    acs = answers["acs-iommu"]
    assert acs.data["acs_redirect_bridges"] == ["0000:17:02.0"]
    assert "setpci -s 0000:17:02.0 ECAP_ACS+0x6.w=0000" in acs.request
    assert "iommu=pt" in acs.request
    assert "ReqRedir+ CmpltRedir+" in acs.evidence[0].text
    nccl = answers["nccl-allreduce"]
    assert nccl.data["busbw_by_gpus"]["8"]["busbw"] == 5.5
    assert any("falls from 20 GB/s at 2 GPUs to 9 GB/s at 4 GPUs" in line for line in nccl.details)
    assert nccl.data["missing_steps"] == [1]
    tp = answers["tp2-vs-tp4"]
    assert tp.data["tp_groups"]["2"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert "cross NODE" in tp.summary
    assert "NET/Socket" in answers["multi-node-network"].summary


def test_empty_machine_answers_unknown_with_commands() -> None:
    report, answers = _audit(Machine())
    assert not report.analyzable and report.exit_code == EXIT_NOTHING and report.verdict == UNKNOWN
    for qid in ("pcie-x16", "cpu-numa", "path-classes", "pcie-switch", "p2p", "acs-iommu", "nccl-allreduce",
                "gpudirect-rdma", "multi-node-network"):
        assert answers[qid].verdict == UNKNOWN, qid
        assert answers[qid].request, qid
    assert "nvidia-smi -q" in answers["pcie-x16"].request
    assert "sudo lspci -vvv" in answers["acs-iommu"].request
    assert "all_reduce_perf -b 8M -e 8G -f 2 -g 1" in answers["nccl-allreduce"].request
    assert "Nothing in the bundle could be analyzed" in report.verdict_sentence()


def test_one_gpu_has_no_pairs(kit) -> None:
    machine = kit.build_machine(count=1)
    _, answers = _audit(machine)
    assert answers["path-classes"].verdict == PASS and "Only one GPU" in answers["path-classes"].summary
    assert answers["p2p"].verdict == PASS and answers["tp2-vs-tp4"].verdict == PASS


def test_idle_gen_drop_is_not_a_fault_but_busy_one_is(kit) -> None:
    machine = kit.build_machine(count=2)
    machine.gpus[0].pcie.gen_current = 1
    machine.gpus[0].performance_state = "P8"
    machine.gpus[1].pcie.gen_current = 3
    _, answers = _audit(machine)
    x16 = answers["pcie-x16"]
    assert x16.verdict == WARN
    assert "idle power-saving speed (P8), not a fault" in x16.details[0]
    assert "Gen3 below Gen5 while busy (P0)" in x16.details[1]


def test_topo_p2p_ok_alone_is_not_proof(kit) -> None:
    machine = kit.build_machine(count=4)
    kit.add_p2p(machine, lambda i, j: "OK")
    _, answers = _audit(machine)
    assert answers["p2p"].verdict == WARN
    assert "p2pBandwidthLatencyTest" in answers["p2p"].request


def test_cns_only_across_sockets_is_a_design_note_not_a_failure(kit) -> None:
    # Two GPUs on two sockets: the only pair is SYS and the driver refuses P2P there (CNS), as most platforms do.
    machine = kit.build_machine(count=2, path_of=lambda i, j: "SYS")
    kit.add_p2p(machine, lambda i, j: "CNS")
    _, answers = _audit(machine)
    p2p = answers["p2p"]
    assert p2p.verdict == WARN
    assert p2p.summary == ("No GPU pair has P2P: every pair the driver reports on crosses CPU sockets, where it "
                           "refuses P2P (CNS) by design, so the GPUs exchange data through host memory.")
    assert p2p.data["problems"] == [] and len(p2p.data["by_design"]) == 1
    # the same refusal on a pair inside one socket is a fault
    machine = kit.build_machine(count=2, path_of=lambda i, j: "PHB")
    kit.add_p2p(machine, lambda i, j: "CNS")
    _, answers = _audit(machine)
    assert answers["p2p"].verdict == FAIL
    assert answers["p2p"].summary.startswith("P2P does not work for every GPU pair: CNS (chipset not supported")


def test_gns_on_consumer_cards_fails_p2p(kit) -> None:
    machine = kit.build_machine(count=2, name="NVIDIA GeForce RTX 5090", path_of=lambda i, j: "PHB")
    kit.add_p2p(machine, lambda i, j: "GNS")
    _, answers = _audit(machine)
    assert answers["p2p"].verdict == FAIL
    assert "GNS (GPU not supported: the driver disables P2P" in answers["p2p"].summary


def test_p2p_disable_env_is_reported(kit) -> None:
    machine = kit.build_machine(count=2)
    kit.add_nccl(machine, "SHM/direct/direct", "SHM", [(0, 1)], env={"NCCL_P2P_DISABLE": "1"})
    _, answers = _audit(machine)
    assert any("NCCL_P2P_DISABLE=1 was set" in line for line in answers["p2p"].details)


def test_wrong_values_in_nccl_tests_fail(kit) -> None:
    machine = kit.build_machine(count=2)
    machine.benchmarks.append(kit.nccl_tests(2, 360.0, wrong=3))
    _, answers = _audit(machine)
    assert answers["nccl-allreduce"].verdict == FAIL
    assert "3 wrong values: data corruption" in answers["nccl-allreduce"].summary


def test_only_single_gpu_nccl_run_is_unknown(kit) -> None:
    machine = kit.build_machine(count=4)
    machine.benchmarks.append(kit.nccl_tests(1, 0.0))
    _, answers = _audit(machine)
    nccl = answers["nccl-allreduce"]
    assert nccl.verdict == UNKNOWN
    assert "single-GPU" in nccl.summary and "-g 2" in nccl.request and "-g 4" in nccl.request


def test_acs_unknown_without_root_asks_for_sudo(kit) -> None:
    machine = kit.build_machine(count=2)
    machine.host.iommu_mode = "passthrough"
    _, answers = _audit(machine)
    acs = answers["acs-iommu"]
    assert acs.verdict == UNKNOWN and acs.request.startswith("sudo lspci -vvv")


def test_nvlink_box_downgrades_acs_to_warn(kit) -> None:
    machine = kit.build_machine(count=4)
    kit.add_bridge(machine, "0000:15:01.0", True, [0, 1], "PCI bridge")
    machine.host.iommu_mode = "passthrough"
    _, answers = _audit(machine)
    assert answers["acs-iommu"].verdict == WARN
    assert "only GPU-NIC traffic suffers" in answers["acs-iommu"].summary


def test_gpu_nic_paths_without_runtime_proof_warn(kit) -> None:
    machine = kit.build_machine(count=2)
    kit.add_nics(machine, lambda i, k: "PIX" if i == k else "SYS")
    _, answers = _audit(machine)
    gdr = answers["gpudirect-rdma"]
    assert gdr.verdict == WARN and gdr.summary.startswith("Probably: 2 GPUs share a PCIe switch with a NIC")
    assert "nvidia_peermem" in gdr.request


def test_a_broken_question_becomes_unknown(monkeypatch: pytest.MonkeyPatch, good_machine: Machine) -> None:
    import k3diag.audit.checklist as checklist

    def boom(ctx):
        raise KeyError("half-written record")

    questions = tuple((qid, boom if qid == "p2p" else fn) for qid, fn in checklist.QUESTIONS)
    monkeypatch.setattr(checklist, "QUESTIONS", questions)
    _, answers = _audit(good_machine)
    assert answers["p2p"].verdict == UNKNOWN
    assert "KeyError" in answers["p2p"].summary
    assert answers["pcie-x16"].verdict == PASS


def test_parallelism_for_a_model_that_does_not_fit(bad_machine: Machine) -> None:
    _, answers = _audit(bad_machine, model="k3")
    parallel = answers["parallelism"]
    if parallel.data.get("note", "").startswith("the advise package is not available"):
        pytest.skip("k3diag.advise is not importable here")
    # A model too big for the machine is a sizing answer, not a defect: never FAIL.
    assert parallel.verdict == WARN
    assert "does not fit on this machine" in parallel.summary
    assert re.search(r"needs \d+\.\d more GiB per GPU\. This is a sizing answer, not a machine defect; "
                     r"what would fit: ", parallel.summary), parallel.summary
    assert parallel.data["needs_gib_per_gpu"] > 0 and parallel.data["would_fit"]
    assert "k3diag advise --model k3" in parallel.request
    assert any(line.startswith("loads: no") for line in parallel.details)


def test_parallelism_for_a_model_that_fits(good_machine: Machine) -> None:
    _, answers = _audit(good_machine, model="llama-3.1-70b")
    parallel = answers["parallelism"]
    if parallel.data.get("note", "").startswith("the advise package is not available"):
        pytest.skip("k3diag.advise is not importable here")
    assert parallel.verdict in (PASS, WARN)
    assert "is the best layout that fits" in parallel.summary
    assert parallel.data["levels"]["loads"] == "yes"


def test_unknown_model_is_unknown_with_the_reason(good_machine: Machine) -> None:
    _, answers = _audit(good_machine, model="no-such-model-xyz")
    parallel = answers["parallelism"]
    assert parallel.verdict == UNKNOWN
    assert "no-such-model-xyz" in parallel.summary
