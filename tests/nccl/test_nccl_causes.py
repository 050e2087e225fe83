"""Root causes NCCL prints verbatim become their own findings (issue 12), and what a log alone says about
its machine reaches the model (issue 11): GPUs from init lines and path dumps, links from the GRAPH dump,
hosts from lines without a rank, GPUDirect RDMA and DMA-BUF per HCA."""

from __future__ import annotations

from nccl_fixtures import fixture_path

from k3diag.analyze.engine import run_rules
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.join.merge_nccl import merge_nccl_log
from k3diag.model.machine import Machine
from k3diag.model.nccl import NcclMnnvlHealth
from k3diag.parse import nccl_log


def machine_of(*names: str, domain: str = "nccl") -> Machine:
    machine = Machine()
    for name in names:
        merge_nccl_log(nccl_log.parse_path(fixture_path(domain, name), name), machine)
    return machine


def by_id(machine: Machine) -> dict[str, list]:
    found: dict[str, list] = {}
    for finding in run_rules(machine):
        found.setdefault(finding.id, []).append(finding)
    return found


def test_dev_shm_full_in_a_pod_is_a_failure_with_the_container_remedies():
    for name in ("nccl-2.2x-shm-no-space-ci-pod-timestamps.log", "nccl-2.9-shm-posix-fallocate-kubeflow.log"):
        found = by_id(machine_of(name))
        (finding,) = found["nccl-shm-no-space"]
        assert finding.severity == "fail"
        assert "--shm-size" in finding.remedy and "--ipc=host" in finding.remedy and "emptyDir" in finding.remedy
        assert finding.evidence and "No space left" in " ".join(e.text for e in finding.evidence) or \
            "posix_fallocate" in finding.evidence[0].text
        # not listed again as a plain warning
        assert all("shared memory segment" not in f.explanation for f in found.get("nccl-warnings", []))


def test_shm_attach_failure_names_ipc_namespaces():
    found = by_id(machine_of("nccl-2.2x-shm-attach-failed-ib.log"))
    (finding,) = found["nccl-shm-attach-failed"]
    assert "--ipc=host" in finding.remedy and "RemoveIPC" in finding.remedy
    assert "attaching to shared memory segment" in finding.evidence[0].text
    assert "nccl-shm-no-space" not in found


def test_nvls_asked_for_but_zero_nvls_channels():
    found = by_id(machine_of("nccl-2.18-h800-nvls-algo-0-nvls-channels.log"))
    (finding,) = found["nccl-nvls-no-channels"]
    assert "0 nvls channels" in finding.title
    texts = [e.text for e in finding.evidence]
    assert any("NCCL_ALGO set by environment" in t for t in texts)
    assert any("0 nvls channels" in t for t in texts)
    assert "fabricmanager" in finding.remedy


def test_mnnvl_health_mask_is_decoded_not_guessed():
    assert NcclMnnvlHealth("0x0").healthy and NcclMnnvlHealth("0xaa").healthy  # every flag "false": healthy
    assert NcclMnnvlHealth("0xa9").problems() == ["fabric bandwidth degraded"]
    assert "a route is unhealthy" in NcclMnnvlHealth("0x9a").problems()
    assert NcclMnnvlHealth("0x2aa").problems() == ["incorrect system GUID"]
    line = ("gb200-n01:1:2 [0] NCCL INFO MNNVL busId 0x1a000 fabric UUID 0.0 cliqueId 0x7 state 3 healthMask 0x9a")
    machine = Machine()
    merge_nccl_log(nccl_log.parse_stream([line], "mnnvl.log"), machine)
    (finding,) = by_id(machine)["nccl-mnnvl-unhealthy"]
    assert finding.severity == "fail" and "a route is unhealthy" in finding.explanation
    healthy = Machine()
    merge_nccl_log(nccl_log.parse_stream([line.replace("0x9a", "0xaa")], "ok.log"), healthy)
    assert "nccl-mnnvl-unhealthy" not in by_id(healthy)


def test_rccl_missing_iommu_pt_is_amd_evidence_without_an_inventory():
    found = by_id(machine_of("rccl-mi250x-warn-missing-iommu.log"))
    (finding,) = found["amd-iommu-not-passthrough"]
    assert finding.severity == "warn" and 'Missing "iommu=pt"' in finding.evidence[0].text
    assert all('iommu=pt' not in f.explanation for f in found.get("nccl-warnings", []))


def test_p2p_disable_on_a_pasted_command_line_and_one_node_without_ib_libraries():
    name = "nccl-tests-2.16.5-p2p-disable-warn-search-head.txt"
    machine = build_machine([Evidence(name=name, path=fixture_path("bench", name))])
    found = by_id(machine)
    (finding,) = [f for f in found["nccl-env-disables-transport"] if f.data["name"] == "NCCL_P2P_DISABLE"]
    assert finding.explanation.startswith("The command line pasted with the log sets NCCL_P2P_DISABLE=1")
    assert "all_reduce_perf" in finding.evidence[0].text
    # a job on one node does not need libibverbs: no warning about it
    assert all("libibverbs" not in f.explanation for f in found.get("nccl-warnings", []))


def test_two_socket_4090_path_dump_alone_gives_gpus_links_and_a_tp_plan():
    from k3diag.analyze.pipeline import analyze_machine

    name = "nccl-2.2x-8x4090-graph-gpu-paths-two-sockets.log"
    machine = build_machine([Evidence(name=name, path=fixture_path("nccl", name))])
    assert [g.bus_id for g in machine.sorted_gpus()][:2] == ["0000:4e:00.0", "0000:4f:00.0"]
    assert len(machine.gpus) == 8
    link = machine.link("GPU0", "GPU4")
    assert link.path == "SYS" and link.origin == "nccl-log" and "GPU/CE000" in link.source.text
    assert machine.link("GPU4", "GPU5").path == "PHB"
    groups = analyze_machine(machine).recommendation.to_json()["tp_groups"]
    assert [4, 5, 6, 7] in groups.get("4", []), groups


def test_init_lines_name_gpus_and_hosts_without_a_rank_reach_the_run():
    machine = machine_of("nccl-2.19-64ranks-init-complete.log")
    run = max(machine.nccl, key=lambda r: r.nranks or 0)
    assert run.nranks == 64
    # busId/nvmlDev of the init lines of this host's ranks are GPU records
    assert any(g.bus_id == "0000:9b:00.0" for g in machine.gpus.values())
    # Bootstrap/NET lines of a host whose ranks printed no comm line still name it
    lines = ["other-node:77:77 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
             "n1:5:6 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
             "n1:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
             "n1:5:6 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0x99 - Init COMPLETE"]
    result = nccl_log.parse_stream(lines, "two.log")
    (run,) = result.runs
    assert run.hosts == ["n1", "other-node"] and run.hosts_unranked == ["other-node"]
    assert run.hosts_sources["other-node"].line == 1


def test_gpudirect_rdma_and_dmabuf_per_hca_are_recorded():
    lines = ["h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
             "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'",
             "h:1:2 [0] NCCL INFO DMA-BUF is available on GPU device 0"]
    run = nccl_log.parse_stream(lines, "gdr.log").runs[0]
    per_hca = {(g.hca, g.hca_index, g.enabled, g.reason) for g in run.gdr if g.per_hca}
    assert per_hca == {("mlx5_0", 0, False, "no module"), ("mlx5_1", 1, True, None)}
    assert [(d.gpu, d.enabled) for d in run.dmabuf] == [(0, True)]
