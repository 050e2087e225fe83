"""The NCCL/RCCL log parser on real logs from NCCL 2.4 to 2.27 and RCCL: ranks, nodes, hosts,
transports per pair, versions, env, rings, trees, GRAPH lines, NET devices, warnings."""

from __future__ import annotations

from nccl_fixtures import fixture_path, fixture_section

from k3diag.parse import nccl_log


def parse(name: str) -> nccl_log.NcclLogResult:
    return nccl_log.parse_path(fixture_path("nccl", name), name)


def only_run(name: str):
    result = parse(name)
    assert len(result.runs) == 1, [r.comm_id for r in result.runs]
    return result, result.runs[0]


def pairs(run) -> dict[tuple[int, int], set[str]]:
    out: dict[tuple[int, int], set[str]] = {}
    for conn in run.connections:
        out.setdefault((conn.src_rank, conn.dst_rank), set()).add(conn.via)
    return out


def test_nccl_2_4_ring_lines_four_nodes():
    result, run = only_run("nccl-2.4-ring-4nodes.log")
    assert run.hosts == ["server1", "server2", "server3", "server4"]
    assert run.nodes == 4
    assert sum(c.lines for c in run.connections) == 19
    assert run.transport_counts() == {"P2P": 19, "SHM": 0, "NET": 0}
    assert pairs(run)[(26, 24)] == {"P2P/IPC"}
    conn = next(c for c in run.connections if (c.src_rank, c.dst_rank) == (26, 24))
    assert conn.channel == 0 and conn.direction is None
    assert conn.source.line == 1 and "26[2] -> 24[0]" in conn.source.text
    # 2.4 brackets are cudaDev; rank 26 logged from server4 device 2
    rank26 = run.rank_info(26)
    assert (rank26.host, rank26.cuda_dev, rank26.pid) == ("server4", 2, 45888)
    assert run.rank_info(24).host == "server4"  # P2P peer: same host


def test_nccl_2_4_init_complete_rank_table():
    _, run = only_run("nccl-2.4-init-complete-32ranks.log")
    assert run.nranks == 32
    assert run.nodes == 4
    info = run.rank_info(15)
    assert (info.host, info.cuda_dev, info.nvml_dev) == ("server2", 7, 7)
    assert len(run.ranks) == 12


def test_nccl_2_4_init_start_lines_map_cuda_to_nvml():
    _, run = only_run("nccl-2.4-nvmldev-nic-distance-2nodes.log")
    assert run.nranks == 8
    assert run.hosts == ["gpunodev1", "gpunodev2"]
    assert (run.rank_info(7).cuda_dev, run.rank_info(7).nvml_dev) == (3, 7)


def test_nccl_2_5_rank_prefix_trees_and_ib_devices():
    _, run = only_run("nccl-2.5.6-ib-256ranks-rankprefix.log")
    assert run.hosts == ["crow-ib-new-nccl-256-info-19"]
    assert pairs(run) == {(155, 157): {"P2P/IPC"}, (155, 153): {"P2P/IPC"}, (155, 154): {"P2P/IPC"}}
    assert run.rank_info(155).bus_id == "0000:3d:00.0"
    assert run.rank_info(153).bus_id == "0000:1b:00.0"
    trees = {(t.channel, t.rank): (t.up, t.down) for t in run.trees}
    assert trees[(0, 155)] == (153, [154])
    assert trees[(3, 155)] == (154, [153, 146, 162])
    assert run.net.ib_devices == ["mlx5_1:1/IB", "mlx5_3:1/IB", "mlx5_0:1/IB", "mlx5_2:1/RoCE", "mlx5_4:1/IB"]


def test_nccl_2_5_mpirun_prefix_version_and_no_ib():
    result, run = only_run("nccl-2.5.6-mpirun-prefix-socket-lo.log")
    assert result.version == "2.5.6+cuda10.2"
    assert result.library == "NCCL"
    assert run.net.ib_not_found is True
    assert run.net.socket_devices == ["lo:127.0.0.1<0>"]


def test_nccl_2_7_busid_brackets_and_direct_shared_memory():
    _, run = only_run("nccl-2.7-busid-direct-shared-memory.log")
    assert run.transport_counts() == {"P2P": 7, "SHM": 7, "NET": 0}
    table = pairs(run)
    assert table[(2, 1)] == {"direct shared memory"}
    assert table[(0, 1)] == {"P2P/direct pointer"}
    assert run.rank_info(7).bus_id == "0000:89:00.0"
    assert run.rank_info(0).bus_id == "0000:04:00.0"
    assert run.nodes == 1 and run.hosts == ["unicom-169"]


def test_nccl_2_7_same_host_net_env_and_header_ranks():
    result, run = only_run("nccl-2.7.6-same-host-net-ib-p2p-level-loc-shm-disabled.log")
    assert result.version == "2.7.6+cuda11.1"
    assert run.env == {"NCCL_P2P_LEVEL": "LOC", "NCCL_SHM_DISABLE": "1"}
    assert run.env_sources["NCCL_SHM_DISABLE"].line == 14
    assert run.transport_counts()["NET"] == 12
    assert run.net.network == "IB"
    assert run.hosts == ["10-90-43-152"]
    # the nccl-tests header names the devices: [0x87] -> bus 87
    assert run.rank_info(0).bus_id == "0000:87:00.0"
    directions = {c.direction for c in run.connections}
    assert directions == {"send", "receive"}


def test_nccl_2_12_send_receive_gdrdma_two_nodes():
    _, run = only_run("nccl-2.12-2nodes-ipc-read-ib-gdrdma.log")
    assert run.nodes == 2
    assert run.hosts == ["SH-IDC1-10-198-34-101", "SH-IDC1-10-198-34-109"]
    net = [c for c in run.connections if c.transport == "NET"]
    assert sum(c.lines for c in net) == 8 and all(c.via == "NET/IB/0/GDRDMA" and c.gdrdma for c in net)
    # each (src, dst, direction) over two channels is one record
    assert len(net) == 4 and all(c.channels == [0, 1] and c.channel_count == 2 for c in net)
    assert {c.direction for c in net} == {"send", "receive"}
    # a [receive] line is logged by the receiver: rank 0 on ...101
    assert run.rank_info(0).host == "SH-IDC1-10-198-34-101"
    assert run.rank_info(4).host == "SH-IDC1-10-198-34-109"
    assert pairs(run)[(5, 4)] == {"P2P/IPC/read"}


def test_nccl_2_19_init_complete_with_commid():
    _, run = only_run("nccl-2.19-64ranks-init-complete.log")
    assert run.comm_id == "0x5ae77eb5ea4ec1ee"
    assert run.nranks == 64
    info = run.rank_info(36)
    assert (info.cuda_dev, info.nvml_dev, info.bus_id, info.host) == (4, 4, "0000:9b:00.0", "hostname-test")


def test_nccl_2_2x_init_start_two_nodes():
    _, run = only_run("nccl-2.2x-2nodes-init-start.log")
    assert run.comm_id == "0x996ee6f117cb8e1e"
    assert (run.nranks, run.nodes) == (8, 2)
    assert run.rank_info(6).bus_id == "0000:d4:00.0"
    assert run.rank_info(6).host == "kolyoz2"


def test_nccl_2_2x_nranks_nnodes_line_and_ring_orders():
    _, run = only_run("nccl-2.2x-h100-3nodes-nvls-slotprefix.log")
    assert (run.nranks, run.nodes, run.nodes_reported) == (24, 3, 3)
    assert run.env == {"NCCL_CROSS_NIC": "2"}
    assert [r.channel for r in run.rings] == [0, 1]
    assert run.rings[0].order[:9] == [0, 7, 6, 5, 4, 3, 2, 1, 8]


def test_nccl_2_2x_cumem_and_ib_gdrdma():
    _, run = only_run("nccl-2.2x-h20-2nodes-cumem-ib-gdrdma.log")
    assert run.transport_counts() == {"P2P": 5, "SHM": 0, "NET": 9}
    assert pairs(run)[(3, 2)] == {"P2P/CUMEM"}
    assert pairs(run)[(0, 2)] == {"NET/IB/3/GDRDMA"}
    # 2.13+ brackets are NVML indices
    assert run.rank_info(2).nvml_dev == 0 and run.rank_info(3).nvml_dev == 1
    assert run.rank_info(0).host == "H20-GPU-05"  # P2P peer of rank 1


def test_shm_lines_without_conn_index_and_nvml_brackets():
    _, run = only_run("nccl-2.2x-h800-shm-nvmldev-differs.log")
    assert run.transport_counts()["SHM"] == 12
    assert (run.rank_info(2).nvml_dev, run.rank_info(3).nvml_dev) == (6, 7)
    assert (run.rank_info(2).cuda_dev, run.rank_info(3).cuda_dev) == (2, 3)


def test_direct_pointer_read_and_ib_without_gdr():
    _, run = only_run("nccl-2.2x-2nodes-direct-pointer-read-ib-no-gdr.log")
    vias = {c.via for c in run.connections}
    assert vias == {"P2P/direct pointer/read", "NET/IB/3"}
    assert not any(c.gdrdma for c in run.connections)


def test_ibext_plugin_is_net():
    _, run = only_run("nccl-2.2x-ibext-v8-plugin-64ranks.log")
    assert run.transport_counts() == {"P2P": 0, "SHM": 0, "NET": 12}
    assert {c.net_name for c in run.connections} == {"IBext_v8"}


def test_env_set_to_and_trailing_dot():
    _, run = only_run("nccl-2.18.5-2nodes-roce-ib-hca.log")
    assert run.env == {"NCCL_IB_HCA": "mlx5_4"}
    assert run.version == "2.18.5+cuda12.0"
    assert run.net.ib_devices == ["mlx5_4:1/RoCE"]
    _, run = only_run("nccl-2.2x-64ranks-cumem-gid-env.log")
    assert run.env == {"NCCL_IB_GID_INDEX": "3"}


def test_version_line_with_prefix_nccl_2_25():
    result, run = only_run("nccl-2.25.1-5090-p2p-disable-socket.log")
    assert result.version == "2.25.1+cuda12.2"
    assert run.net.network == "Socket"
    assert run.net.ib_not_found


def test_graph_pattern_and_path_lines():
    _, run = only_run("nccl-2.8-graph-paths-pattern-socket-4nic.log")
    graph = run.graphs[0]
    assert (graph.pattern, graph.cross_nic, graph.n_channels, graph.type_intra, graph.type_inter) == (4, 0, 4, "SYS", "SYS")
    assert graph.bw_intra == 1.2
    path = next(p for p in run.paths if p.src == "NET/3" and p.dst == "GPU/2000")
    assert (path.hops, path.path_type, path.dst_bus_id) == (4, "SYS", "0000:02:00.0")
    _, run = only_run("nccl-2.2x-h100-graph-net-paths-new-format.log")
    path = next(p for p in run.paths if p.src == "NET/5" and p.dst == "GPU/0-84000")
    assert (path.path_type, path.bw, path.dst_bus_id) == ("PHB", 24.0, "0000:84:00.0")
    _, run = only_run("nccl-2.2x-h20-graph-pattern-topo-dump-pxn-env.log")
    assert (run.graphs[0].type_intra, run.graphs[0].type_inter, run.graphs[0].cross_nic) == ("NVL", "PIX", 1)
    assert run.env["NCCL_PXN_DISABLE"] == "1"


def test_graph_ring_and_tree_arrow_lines():
    _, run = only_run("nccl-2.18-ring-tree-lines-2gpu-numa.log")
    assert len(run.rings) == 6
    assert run.rings[0].order == [0, 1]
    tree = next(t for t in run.trees if t.rank == 0 and t.channel == 3)
    assert (tree.up, tree.down) == (None, [1])


def test_p2p_disabled_between_connected():
    _, run = only_run("nccl-trtllm-4090-p2p-disabled-between-connected.log")
    pairs_seen = sorted((min(p.gpu_a, p.gpu_b), max(p.gpu_a, p.gpu_b)) for p in run.p2p_disabled)
    assert pairs_seen == [(4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7)]
    assert all(not p.nvlink and p.host == "bcc-qianfan-gpu4090-offline-1" for p in run.p2p_disabled)


def test_gdr_lines():
    _, run = only_run("nccl-2.1x-ib-no-gdrdma-no-module-2containers.log")
    assert {(g.hca, g.enabled, g.reason) for g in run.gdr} == {
        ("mlx5_1", False, "no module"), ("mlx5_2", False, "no module"), ("mlx5_3", False, "no module")}
    assert run.hosts == ["21346d5cefce", "6a5a91752e39"]
    _, run = only_run("nccl-2.5-gdr-level-phb-enabled-disabled-per-gpu.log")
    by_gpu = {(g.gpu_bus_id, g.enabled) for g in run.gdr}
    assert ("0000:18:00.0", False) in by_gpu and ("0000:86:00.0", True) in by_gpu
    assert run.env["NCCL_NET_GDR_LEVEL"] == "PHB"


def test_warnings_with_source_file_and_line_and_error_traces():
    _, run = only_run("nccl-2.1x-socket-proxy-warn-redacted.log")
    warns = [m for m in run.messages if m.level == "WARN"]
    assert {(m.file, m.line_no) for m in warns} == {("proxy.cc", 1485), ("proxy.cc", 1519), ("misc/socket.cc", 49)}
    errors = [m for m in run.messages if m.level == "ERROR"]
    assert ("misc/socket.cc", 567) in {(m.file, m.line_no) for m in errors}
    assert any("socketProgress: Connection closed" in w for w in run.warnings)
    # CloudWatch prefix, the same warning twice is counted
    _, run = only_run("nccl-2.2x-sagemaker-cloudwatch-prefix-socket-warn.log")
    warn = next(m for m in run.messages if m.level == "WARN")
    assert (warn.file, warn.line_no, warn.count) == ("misc/socket.cc", 717, 2)
    assert run.hosts == ["algo-1"]


def test_rccl_versions_library_and_comm_suffix():
    result, run = only_run("rccl-2.20.5-pytorch-glog-interleaved.log")
    assert (result.library, result.version) == ("RCCL", "2.20.5+hip6.2")
    assert run.messages[0].file == "/usr/src/debug/rccl/build/hipify/src/init.cc"
    result, run = only_run("rccl-2.27.7-redacted-host-timestamps.log")
    assert result.version == "2.27.7-HEAD:29e1567"
    assert run.messages[0].line_no == 213
    result, run = only_run("rccl-mi250x-socket-comm-suffix.log")
    assert result.library == "RCCL"
    assert (run.nranks, run.nodes) == (8, 2)
    assert pairs(run)[(7, 5)] == {"P2P/IPC"}
    assert pairs(run)[(1, 4)] == {"NET/Socket/1"}
    result, run = only_run("rccl-mi50-init-complete-localsize-warn-longpath.log")
    assert result.library == "RCCL" and run.nranks == 4 and run.comm_id == "0x195760096c7af668"
    assert run.rank_info(3).bus_id == "0000:c8:00.0"
    assert run.messages[0].line_no == 2065
    result, run = only_run("rccl-2.8-init-complete-used-bytes-nthreads-env.log")
    assert result.library == "RCCL" and run.nranks == 4 and run.env == {"NCCL_NTHREADS": "256"}
    assert run.rank_info(3).bus_id == "0000:63:00.0"


def test_launcher_prefixes():
    _, run = only_run("nccl-2.1x-pdsh-prefix-ipc-read.log")
    assert run.hosts == ["rdma-gpu-train-worker-0"]
    assert pairs(run)[(2, 3)] == {"P2P/IPC/read"}
    _, run = only_run("nccl-2.27-mpirun-prefix-2nodes-trees.log")
    assert {t.rank for t in run.trees} == {3}
    assert len(run.trees) == 8
    _, run = only_run("nccl-2.1x-rank-prefix-socket-ifname-env.log")
    assert run.env == {"NCCL_SOCKET_IFNAME": "en,eth,em,bond"}


def test_parse_section_uses_line_offset():
    section = fixture_section("nccl", "nccl-2.7-busid-direct-shared-memory.log")
    section = type(section)(text=section.text, first_line=101)
    result = nccl_log.parse(section, "x.log")
    assert min(c.source.line for c in result.runs[0].connections) == 101


def test_sniff():
    assert nccl_log.sniff(fixture_section("nccl", "nccl-2.4-ring-4nodes.log").text) >= 0.9
    assert nccl_log.sniff(fixture_section("nccl", "rccl-2.20.5-pytorch-glog-interleaved.log").text) >= 0.5
    # nccl-tests output with NCCL INFO lines is the nccl-tests parser's
    assert nccl_log.sniff(fixture_section("bench", "nccl-tests-2.16.5-p2p-disable-warn-search-head.txt").text) < 0.5
    assert nccl_log.sniff(fixture_section("bench", "nccl-tests-h20-2nodes-header-interleaved-init.txt").text) < 0.5
    assert nccl_log.sniff("hello\nworld\n") == 0.0
