"""The NVLink, fabric, Fabric Manager and RDMA parsers on real pastes (fixtures/fabric/SOURCES.md)."""

from __future__ import annotations

from tests.fabric.conftest import FIXTURES, machine_from


def _formats(machine) -> list[str]:
    return [record.format for record in machine.inputs]


def test_nvlink_status_a100_twelve_links_per_gpu_all_up() -> None:
    machine = machine_from("fabric/nvlink-s-a100-8gpu-nv12-gpud.txt")
    assert _formats(machine) == ["nvidia-smi-nvlink-status"]
    assert sorted(machine.gpus) == list(range(8))
    assert machine.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert machine.gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    links = machine.fabric.links_of(7)
    assert [r.link for r in links] == list(range(12))
    assert all(r.active and r.speed_gbs == 25.0 for r in links)


def test_nvlink_status_inactive_links_keep_their_lines() -> None:
    machine = machine_from("fabric/nvlink-s-v100-two-inactive-excerpt.txt")
    down = [r for r in machine.fabric.nvlinks if r.active is False]
    assert [(r.gpu, r.link) for r in down] == [(3, 3), (3, 5)]
    assert down[0].source.text.strip() == "Link 3: <inactive>"
    assert down[0].source.line == 7
    # The excerpt's `....` line says GPUs above were cut.
    assert any("cut" in w for w in machine.inputs[0].warnings)
    assert machine.fabric.links_of(3)[0].speed_gbs == 25.781


def test_nvlink_status_tabs_and_gb200_speed() -> None:
    tabs = machine_from("fabric/nvlink-s-a100-tabs-cut-nccl-tests228.txt")
    assert len(tabs.fabric.links_of(1)) == 12
    gb200 = machine_from("fabric/nvlink-s-gb200-18x53-cut.txt")
    assert [r.speed_gbs for r in gb200.fabric.links_of(0)] == [53.125] * 18
    assert gb200.gpus[1].name == "NVIDIA GB200"


def test_nvlink_status_all_links_inactive_line() -> None:
    machine = machine_from("fabric/nvlink-s-b200-all-inactive.txt")
    assert _formats(machine) == ["nvidia-smi-nvlink-status"]
    assert list(machine.fabric.nvlinks_all_inactive) == [2]
    assert "all links are inActive" in machine.fabric.nvlinks_all_inactive[2].text


def test_nvlink_capabilities_and_remote() -> None:
    caps = machine_from("fabric/nvlink-c-v100-prompt-cut.txt")
    assert _formats(caps) == ["nvidia-smi-nvlink-capabilities"]
    assert [(r.link, r.p2p_supported, r.active) for r in caps.fabric.links_of(0)][:2] == [(0, True, None), (1, True, None)]
    remote = machine_from("fabric/nvlink-r-h100-nvswitch-root-prompt-cut.txt")
    assert _formats(remote) == ["nvidia-smi-nvlink-remote"]
    first = remote.fabric.links_of(0)[0]
    assert (first.remote_bus_id, first.remote_link) == ("0000:07:00.0", 46)
    assert len(remote.fabric.links_of(0)) == 18
    tabs = machine_from("fabric/nvlink-r-a100-tabs-excerpt.txt")
    assert [r.remote_link for r in tabs.fabric.links_of(5)] == [32, 33]


def test_query_fabric_blocks_as_pasted() -> None:
    bare = machine_from("fabric/query-fabric-insufficient-resources-azhpc506.txt")
    assert _formats(bare) == ["nvidia-smi-query-fabric"]
    state = bare.fabric.gpu_fabric[0]
    assert (state.state, state.status, state.clique_id) == ("Completed", "Insufficient Resources", 0)
    assert state.cluster_uuid_zero
    assert state.sources["status"].line == 3
    grep = machine_from("fabric/query-fabric-grep-c3-unhealthy-dra626.txt")
    state = grep.fabric.gpu_fabric[0]
    assert (state.clique_id, state.health_summary, state.health) == (2, "Unhealthy", {"Bandwidth": "Full"})
    pending = machine_from("fabric/query-fabric-in-progress-b200-gpu-operator2511.txt")
    state = pending.fabric.gpu_fabric[0]
    assert (state.state, state.status, state.clique_id, state.health) == ("In Progress", None, None, {})


def test_whole_query_with_fabric_block_feeds_the_fabric() -> None:
    text = (
        "==============NVSMI LOG==============\n\nDriver Version                            : 550.54.15\n"
        "CUDA Version                              : 12.4\n\nAttached GPUs                             : 1\n"
        "GPU 00000000:18:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n"
        + open("fixtures/fabric/query-fabric-grep-c3-unhealthy-dra626.txt").read().split("\n", 1)[1].replace("--\n", "")
    )
    machine = machine_from(texts={"smi-q.txt": text})
    assert _formats(machine) == ["nvidia-smi-query"]
    assert machine.gpus[0].bus_id == "0000:18:00.0"
    assert machine.fabric.gpu_fabric[0].health_summary == "Unhealthy"


def test_fabric_manager_lines() -> None:
    mismatch = machine_from("fabric/fm-systemctl-status-version-mismatch-akash.txt")
    fm = mismatch.fabric.fabric_manager
    assert _formats(mismatch) == ["nvidia-fabricmanager-log"]
    assert (fm.driver_interface_version, fm.driver_version_seen, fm.running) == ("550.127.05", "550.120", False)
    running = machine_from("fabric/fm-systemctl-status-running-nvlsm-bottlerocket.txt")
    assert running.fabric.fabric_manager.running is True
    kinds = [e.kind for e in machine_from("fabric/fm-log-matcher-lines-gpud.log").fabric.fabric_manager.events]
    assert kinds == ["nvswitch-fatal", "nvswitch-non-fatal", "multicast-gpu-missing", "topology-mismatch",
                     "nothing-to-do"]
    healthy = machine_from("fabric/fabricmanager-log-multicast-gpud.log").fabric.fabric_manager.events
    assert [e.detail for e in healthy] == ["12028"]
    not_ready = machine_from("fabric/cuda-802-torch-warning-dstack.txt")
    assert not_ready.fabric.system_not_ready[0].line == 1


def test_ibstat_ports_rates_link_layers() -> None:
    machine = machine_from("fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt")
    ports = machine.fabric.ib_ports
    assert (ports["mlx5_0:1"].state, ports["mlx5_0:1"].rate_gbps, ports["mlx5_0:1"].link_layer) == ("active", 200.0,
                                                                                                    "Ethernet")
    assert (ports["mlx5_10:1"].state, ports["mlx5_10:1"].physical_state) == ("down", "Disabled")
    assert machine.nics["mlx5_0"].hca_type == "MT4129"
    tabs = machine_from("fabric/ibstat-mlx4-tabs-ibwarn-two-ports-rdma-core847.txt").fabric.ib_ports
    assert (tabs["mlx4_0:1"].state, tabs["mlx4_0:1"].link_layer, tabs["mlx4_0:2"].rate_gbps) == ("down", "InfiniBand",
                                                                                                 56.0)


def test_ibv_devinfo_state_mtu_and_cut_blocks() -> None:
    machine = machine_from("fabric/ibv-devinfo-port-down-mtu1024-deepep60.txt")
    port = machine.fabric.ib_ports["mlx5_12:1"]
    assert (port.state, port.active_mtu, port.max_mtu, port.link_layer) == ("down", 1024, 4096, "Ethernet")
    assert "mlx5_13" in machine.nics and machine.nics["mlx5_13"].hca_type == "MT4129"
    mid = machine_from("fabric/ibv-devinfo-roce-h100-mid-block-deepep38.txt").fabric.ib_ports
    assert list(mid) == ["mlx5_2:1"] and mid["mlx5_2:1"].state == "active"
    verbose = machine_from("fabric/ibv-devinfo-v-tabs-cx5-ompi6184.txt")
    assert verbose.nics["mlx5_1"].firmware == "16.23.1020"


def test_ibstat_and_ibv_devinfo_join_on_one_port() -> None:
    ibv = (
        "hca_id: mlx5_0\n        transport:                      InfiniBand (0)\n        phys_port_cnt:                  1\n"
        "                port:   1\n                        state:                  PORT_ACTIVE (4)\n"
        "                        active_mtu:             1024 (3)\n                        link_layer:             Ethernet\n"
    )
    machine = machine_from("fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt", texts={"ibv.txt": ibv})
    port = machine.fabric.ib_ports["mlx5_0:1"]
    assert (port.rate_gbps, port.active_mtu) == (200.0, 1024)
    assert machine.nics["mlx5_0"].ports == [port]


def test_query_fabric_of_an_old_driver_with_state_only() -> None:
    # The shape `nvidia-smi -q -d FABRIC` prints on A100 boards with R535 (Fabric State/Status only;
    # bottlerocket-os/bottlerocket#3873 shows `Fabric State: N/A` there even with FM running).
    text = ("==============NVSMI LOG==============\n\nTimestamp                                 : Mon Jan  8 10:00:00 2024\n"
            "Driver Version                            : 535.129.03\nCUDA Version                              : 12.2\n\n"
            "Attached GPUs                             : 1\nGPU 00000000:07:00.0\n    Fabric\n"
            "        State                             : N/A\n        Status                            : N/A\n")
    machine = machine_from(texts={"fabric.txt": text})
    assert _formats(machine) == ["nvidia-smi-query-fabric"]
    state = machine.fabric.gpu_fabric[0]
    assert (state.state, state.status) == (None, None)
    assert machine.gpus[0].bus_id == "0000:07:00.0"


def test_ibstat_and_ibv_devinfo_pasted_in_one_file_after_prompts() -> None:
    both = ("$ ibstat\n" + (FIXTURES / "fabric/ibstat-cx6dx-100g-log-header-l2fwd.txt").read_text()
            + "$ ibv_devinfo\n" + (FIXTURES / "fabric/ibv-devinfo-port-down-mtu1024-deepep60.txt").read_text())
    machine = machine_from(texts={"session.txt": both})
    assert [(r.format, r.command) for r in machine.inputs] == [("ibstat", "ibstat"), ("ibv-devinfo", "ibv_devinfo")]
    assert sorted(machine.fabric.ib_ports) == ["mlx5_0:1", "mlx5_12:1", "mlx5_1:1"]
