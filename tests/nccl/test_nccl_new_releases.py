"""Real NCCL_DEBUG=INFO logs of NCCL 2.23 to 2.29 and RCCL 2.30, read through `k3diag analyze` as a user runs
it: what the report and its JSON say of each (fixtures/nccl/SOURCES.md names where each log comes from).

The shapes these releases added: the init line named after the API that made the communicator
(`ncclCommInitRankConfig`, PyTorch's), 2.29's `[Rank N]` before the init start line, `busId` values of a GPU
on bus 0 (`1e0`), lazy connection lines after `Init COMPLETE`, aws-ofi-nccl warnings whose location is a C
function, CollNet/SHARP, error traces (`group.cc:319 -> 1`)."""

from __future__ import annotations

import json
from pathlib import Path

from nccl_fixtures import fixture_path
from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.parse.nccl import comm_shapes

runner = CliRunner()
SPARK = "nccl-2.28.9-dgx-spark-2nodes-initrankconfig-roce.log"
DATABRICKS = "nccl-2.26.2-databricks-magic-prefix-ofi-failed-socket.log"
RANK_PREFIX = "nccl-2.29.2-efa-rank-prefix-init-start-cuda-failure.log"
COLLNET = "nccl-2.23.4-collnet-sharp-4nodes-hang.log"


def _analyze(path: Path, *options: str) -> str:
    result = runner.invoke(app, ["analyze", str(path), *options])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.stdout


def _json(path: Path) -> dict:
    return json.loads(_analyze(path, "--json"))


def _ranks(report: dict) -> list[tuple]:
    return [(r["rank"], r["host"], r["cuda_dev"], r["nvml_dev"], r["bus_id"]) for r in report["nccl"]["ranks"]]


def test_2_28_dgx_spark_initrankconfig_lines_and_lazy_roce_connections() -> None:
    """2.28.9 on two DGX Spark (GB10): `ncclCommInitRankConfig` init lines, busId `f01000` (domain 000f), and
    the connection lines printed after `Init COMPLETE` (2.22+ connects at the first collective)."""
    path = fixture_path("nccl", SPARK)
    report = _json(path)
    nccl = report["nccl"]
    assert (nccl["version"], nccl["comm_id"], nccl["nranks"], nccl["nodes"]) == \
        ("2.28.9+cuda13.0", "0x3470ca318760efc8", 2, 2)
    assert _ranks(report) == [(0, "spark-fb97", 0, 0, "000f:01:00.0"), (1, "spark-4440", 0, 0, "000f:01:00.0")]
    assert nccl["transport_counts"] == {"P2P": 0, "SHM": 0, "NET": 8}
    assert {(c["src_rank"], c["dst_rank"], c["via"], c["direction"]) for c in nccl["connections"]} == {
        (0, 1, "NET/IB/0", "receive"), (1, 0, "NET/IB/0", "receive"), (0, 1, "NET/IB/1", "receive"),
        (1, 0, "NET/IB/1", "receive"), (0, 1, "NET/IB/0", "send"), (1, 0, "NET/IB/0", "send"),
        (0, 1, "NET/IB/1", "send"), (1, 0, "NET/IB/1", "send")}
    assert nccl["net"]["network"] == "IB"
    assert nccl["net"]["ib_devices"] == ["rocep1s0f1:1/RoCE", "roceP2p1s0f1:1/RoCE"]
    assert {(g["host"], g["hca"], g["enabled"]) for g in nccl["gdr"]} == {
        (host, hca, False) for host in ("spark-fb97", "spark-4440") for hca in ("rocep1s0f1", "roceP2p1s0f1")}
    assert nccl["env"] == {"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
    text = _analyze(path, "--details")
    assert "NCCL 2.28.9+cuda13.0 (commId 0x3470ca318760efc8): 2 ranks on 2 nodes (spark-4440, spark-fb97); " \
           "connection lines: 0 P2P, 0 SHM, 8 NET" in text


def test_2_26_busid_of_a_gpu_on_bus_0_names_its_pci_address() -> None:
    """AWS puts the A10G at 0000:00:1e.0: NCCL prints `busId 1e0`, three digits, which k3diag left unknown."""
    report = _json(fixture_path("nccl", DATABRICKS))
    assert _ranks(report) == [(0, "ip-10-153-159-148", 0, 0, "0000:00:1e.0")]


def test_2_26_databricks_magic_prefix_aws_ofi_failure_falls_back_to_socket() -> None:
    """Each line behind a notebook's `# MAGIC `; aws-ofi-nccl's warnings carry a C function, not a file."""
    path = fixture_path("nccl", DATABRICKS)
    nccl = _json(path)["nccl"]
    assert (nccl["version"], nccl["nranks"], nccl["hosts"]) == ("2.26.2+cuda12.2", 8, ["ip-10-153-159-148"])
    assert nccl["net"]["network"] == "Socket" and nccl["net"]["plugin"] == "Libfabric (v10)"
    assert nccl["net"]["ib_not_found"] is True and nccl["net"]["socket_devices"] == ["eth0:10.153.159.148<0>"]
    assert "[WARN] NCCL printed 3 distinct warnings" in _analyze(path, "--details")


def test_aws_ofi_nccl_warnings_name_the_function_they_come_from() -> None:
    """aws-ofi-nccl prints `__PRETTY_FUNCTION__:line` where NCCL prints `file.cc:line`; with the return type in
    front (`int nccl_net_ofi_create_plugin(...):263 NCCL WARN`) the header was not read and the warning had no
    location."""
    nccl = _json(fixture_path("nccl", DATABRICKS))["nccl"]
    assert nccl["warnings"] == [
        "WARN nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):263 NET/OFI Unable to find a protocol that worked."
        "  Failing initialization.",
        "WARN nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):354 NET/OFI aws-ofi-nccl initialization failed",
        "WARN nccl_net_ofi_init_v2(ncclDebugLogger_t):155 NET/OFI Initializing plugin failed"]


def _until_init_start(tmp_path: Path) -> Path:
    """The 2.29.2 log as far as its two `[Rank N] ... - Init START` lines and the bootstrap after them: what a
    job hung in its init leaves (the real log, cut)."""
    lines = fixture_path("nccl", RANK_PREFIX).read_text(encoding="utf-8").splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if "Bootstrap timings" in line)
    cut = tmp_path / "nccl-2.29.2-cut-after-init-start.log"
    cut.write_text("".join(lines[1:last + 1]), encoding="utf-8")
    return cut


def test_2_29_rank_prefixed_init_start_lines_name_the_ranks(tmp_path: Path) -> None:
    """2.29 prints `[Rank 0] ncclCommInitRank comm 0x.. rank 0 nranks 2 ... - Init START`: the line was
    dropped, so a job stopped in its init showed no rank count and no rank."""
    path = _until_init_start(tmp_path)
    report = _json(path)
    nccl = report["nccl"]
    assert (nccl["comm_id"], nccl["nranks"]) == ("0xc3d9a10350effd4f", 2)
    assert _ranks(report) == [(0, "gpu-st-ml-1", 0, 0, "0000:30:00.0"), (1, "gpu-st-ml-2", 0, 0, "0000:30:00.0")]
    text = _analyze(path, "--details")
    assert "NCCL: NCCL 2.29.2+cuda12.8; 1 communicator, up to 2 ranks" in text
    assert "rank count not in the log" not in text


def test_2_29_whole_log_ranks_and_libfabric_connections() -> None:
    report = _json(fixture_path("nccl", RANK_PREFIX))
    nccl = report["nccl"]
    assert (nccl["version"], nccl["nranks"], nccl["nodes"]) == ("2.29.2+cuda12.8", 2, 2)
    assert _ranks(report) == [(0, "gpu-st-ml-1", 0, 0, "0000:30:00.0"), (1, "gpu-st-ml-2", 0, 0, "0000:30:00.0")]
    assert nccl["transport_counts"] == {"P2P": 0, "SHM": 0, "NET": 8}
    assert {c["via"] for c in nccl["connections"]} == {"NET/Libfabric/0"}
    assert (nccl["net"]["network"], nccl["net"]["plugin"]) == ("Libfabric", "Libfabric (v11)")


def test_error_traces_name_their_source_once() -> None:
    """`group.cc:319 -> 1` read as `group.cc:319 group.cc:319 returned 1`: the location was in the text too."""
    path = fixture_path("nccl", RANK_PREFIX)
    warnings = _json(path)["nccl"]["warnings"]
    assert warnings == ["WARN enqueue.cc:1694 Cuda failure 'named symbol not found' (x2)",
                        "ERROR group.cc:319 returned 1 (x2)", "ERROR group.cc:643 returned 1 (x2)",
                        "ERROR group.cc:781 returned 1 (x2)", "ERROR enqueue.cc:3014 returned 1 (x2)"]
    text = _analyze(path, "--details")
    assert "group.cc:319 returned 1 (x2); group.cc:643 returned 1 (x2)" in text
    assert "group.cc:319 group.cc:319" not in text


def test_2_23_collnet_sharp_hang_ranks_devices_and_plugin_warning() -> None:
    """2.23.4 on four nodes with NCCL_COLLNET_ENABLE=1 and the SHARP plugin (`IBext_v8`, `mlx5_2:1/IB/SHARP`),
    stopped after the CollNet connections: 8 ranks seen at Init START, none completed."""
    path = fixture_path("nccl", COLLNET)
    report = _json(path)
    nccl = report["nccl"]
    assert (nccl["version"], nccl["comm_id"], nccl["nranks"], nccl["nodes"]) == \
        ("2.23.4+cuda12.4", "0x45701cda3f259923", 8, 4)
    assert [r[4] for r in _ranks(report)] == ["0000:07:00.0", "0000:0b:00.0", "0000:88:00.0", "0000:cb:00.0",
                                              "0000:4c:00.0", "0000:88:00.0", "0000:07:00.0", "0000:88:00.0"]
    assert nccl["hosts"] == ["gpu34", "gpu36", "gpu40", "gpu41"]
    assert nccl["net"]["network"] == "IBext_v8"
    assert nccl["net"]["ib_devices"][:2] == ["mlx5_2:1/IB/SHARP", "mlx5_0:1/IB/SHARP"]
    assert nccl["env"] == {"NCCL_COLLNET_ENABLE": "1"}
    assert nccl["warnings"] == ["WARN sharp_plugin.c:382 SHARP int8,uint8,bfloat16 Datatypes not supported (x4)"]


def test_init_lines_of_every_init_api_take_the_strict_shape() -> None:
    """The init line's first word is the API (`__func__` in NCCL's init.cc); the strict match of the usual shape
    took only `ncclCommInitRank`, so every PyTorch communicator (`ncclCommInitRankConfig`) went the slow way.
    Its values must be the tokenizer's."""
    bodies = []
    for name in (SPARK, DATABRICKS, RANK_PREFIX):
        for line in fixture_path("nccl", name).read_text(encoding="utf-8").splitlines():
            body = line.partition(" NCCL INFO ")[2]
            if " - Init " in body and "commId" in body:
                bodies.append(body[body.find("] ") + 2:] if body.startswith("[Rank ") else body)
    assert {body.split()[0] for body in bodies} == {"ncclCommInitRankConfig", "ncclCommInitRank"}
    for body in bodies:
        strict = comm_shapes.INIT_LINE_RE.fullmatch(body)
        assert strict is not None, body
        assert dict(zip(comm_shapes.INIT_KEYS, strict.groups()[1:])) == comm_shapes.comm_values(body)


SPLIT = "nccl-2.27.3-commsplit-16ranks-efa-lazy-connect-threads.log"
RAY = "nccl-2.2x-ray-dedup-repeated-suffix-mnnvl-quoted.log"


def test_2_27_comm_split_without_commid_and_connections_from_other_threads() -> None:
    """`ncclCommSplit comm 0x.. parent 0x.. splitCount 1 color .. key 3- Init START` names no commId, and 2.27
    connects lazily from new threads (tid 1175-1190) that print no communicator line: the four local ranks of
    the 16-rank split are one communicator, their SHM and NET/Libfabric lines its own."""
    report = _json(fixture_path("nccl", SPLIT))
    assert len(report["nccl_runs"]) == 1
    nccl = report["nccl"]
    assert (nccl["comm_id"], nccl["nranks"], nccl["nodes"], nccl["hosts"]) == (None, 16, 4, ["llama-3-8b-node-0-0"])
    assert _ranks(report)[:4] == [(0, "llama-3-8b-node-0-0", 0, 0, "0000:38:00.0"),
                                  (1, "llama-3-8b-node-0-0", 1, 1, "0000:3a:00.0"),
                                  (2, "llama-3-8b-node-0-0", 2, 2, "0000:3c:00.0"),
                                  (3, "llama-3-8b-node-0-0", 3, 3, "0000:3e:00.0")]
    assert nccl["transport_counts"] == {"P2P": 0, "SHM": 12, "NET": 8}
    assert {(c["src_rank"], c["dst_rank"]) for c in nccl["connections"] if c["transport"] == "NET"} == {
        (3, 4), (15, 0), (0, 4), (8, 0), (0, 8), (4, 0)}
    assert nccl["net"]["network"] == "Libfabric" and nccl["env"] == {"NCCL_PROTO": "simple"}


def test_ray_dedup_suffix_and_quote_prefix_keep_the_communicator() -> None:
    """Ray's log dedup appends ` [repeated 15x across cluster]` to NCCL lines and the issue quotes them with
    `> > > (WorkerDict pid=..)`: the strict shapes do not match, the general reading still finds both ranks
    (rank 3 on nvmlDev 3 with cudaDev 0: Ray's CUDA_VISIBLE_DEVICES) and the MNNVL health mask."""
    report = _json(fixture_path("nccl", RAY))
    nccl = report["nccl"]
    assert (nccl["comm_id"], nccl["nranks"], nccl["hosts"]) == ("0x4e52464bbe9f9659", 8, ["degamts15"])
    assert _ranks(report) == [(0, "degamts15", 0, 0, "0000:04:00.0"), (3, "degamts15", 0, 3, "0000:64:00.0")]
    assert nccl["mnnvl_health"] == [{"mask": "0x0", "healthy": True, "problems": [], "host": "degamts15"}]
    assert nccl["nvls_support"] == [{"available": True, "gpu": 0, "host": "degamts15"}]


NEW_INIT_BODIES = [
    "[Rank {rank}] ncclCommInitRank comm 0x{ptr} rank {rank} nranks {n} cudaDev {dev} nvmlDev {dev} busId {bus} "
    "commId 0x{cid} - Init START",
    "ncclCommInitRankConfig comm 0x{ptr} rank {rank} nranks {n} cudaDev {dev} nvmlDev {dev} busId {bus} "
    "commId 0x{cid} - Init COMPLETE",
    "ncclCommSplit comm 0x{ptr} rank {rank} nranks {n} cudaDev {dev} nvmlDev {dev} busId {bus} parent 0x1 "
    "splitCount 1 color 7 key {rank}- Init START",
    "[Rank {rank}] Proxy thread started",
]


def test_new_init_shapes_read_the_same_in_bulk(monkeypatch) -> None:
    """The mixtures of test_nccl_bulk_equivalence with the new init shapes among the bodies: the bulk path must
    give what reading every line gives."""
    import test_nccl_bulk_equivalence as mixtures
    from nccl_equivalence import canon, exact

    from k3diag.parse.nccl import parse_bytes

    monkeypatch.setattr(mixtures, "BODIES", mixtures.BODIES + NEW_INIT_BODIES * 4)
    for seed in range(60):
        text = mixtures._log(seed, 1 + seed % 9, 5 + seed % 30, seed % 2 == 0)
        assert canon(parse_bytes(text.encode("utf-8"), "mix.log")) == exact(text, "mix.log"), seed


ROCM7 = "rccl-2.30.4-rocm7-rank-prefix-initall-xgmi-paths.log"


def test_rccl_2_30_rank_prefixed_initall_lines_of_four_mi_gpus() -> None:
    """RCCL 2.30.4 (ROCm 7.14) prints `[Rank 0] ncclCommInitAll_impl comm 0x.. - Init START`: the four ranks of
    the one process were dropped with those lines; the XGMI paths of its GRAPH dump were read already."""
    report = _json(fixture_path("nccl", ROCM7))
    nccl = report["nccl"]
    assert (nccl["library"], nccl["version"], nccl["comm_id"], nccl["nranks"]) == \
        ("RCCL", "2.30.4-HEAD:2b22ab0", "0x1c50a375ab9ec53d", 4)
    assert _ranks(report) == [(0, "macpro2019-01", 0, 0, "0000:0b:00.0"), (1, "macpro2019-01", 1, 1, "0000:0e:00.0"),
                              (2, "macpro2019-01", 2, 2, "0000:1b:00.0"), (3, "macpro2019-01", 3, 3, "0000:1e:00.0")]
    assert {(p["src_bus_id"], p["dst_bus_id"], p["type"]) for p in nccl["paths"]} >= {
        ("0000:0b:00.0", "0000:0e:00.0", "XGMI"), ("0000:0b:00.0", "0000:1b:00.0", "XGMI")}
    assert nccl["net"]["network"] == "Socket" and nccl["net"]["ib_not_found"] is True
    text = _analyze(fixture_path("nccl", ROCM7), "--details")
    assert "RCCL 2.30.4-HEAD:2b22ab0 (commId 0x1c50a375ab9ec53d): 4 ranks on 1 node (macpro2019-01)" in text
    assert "[WARN] IOMMU is not in passthrough mode (RCCL wants iommu=pt)" in text


def test_one_node_of_a_multi_node_job_does_not_say_the_job_ran_on_one_node() -> None:
    """Node 0's log of an 8-node job (one A10G each): one rank of 8 seen, on one host. The report said
    `8 ranks on 1 node`; where the seven others ran is not in the log, so it names only the host it saw."""
    path = fixture_path("nccl", DATABRICKS)
    nccl = _json(path)["nccl"]
    assert (nccl["nranks"], nccl["nodes"], nccl["nodes_reported"], nccl["hosts"]) == (8, None, None,
                                                                                      ["ip-10-153-159-148"])
    text = _analyze(path, "--details")
    assert "NCCL 2.26.2+cuda12.2 (commId 0x260da5686b91fcc7): 8 ranks (ip-10-153-159-148); connection lines:" in text
    assert "8 ranks on 1 node" not in text


def test_hosts_seen_of_part_of_the_ranks_still_count_as_nodes_when_several() -> None:
    """Two hosts seen for 6 of 8 ranks: at least two nodes, which is what the multi-node rules need."""
    nccl = _json(fixture_path("nccl", "nccl-2.2x-2nodes-init-start.log"))["nccl"]
    assert (nccl["nranks"], nccl["nodes"], len(nccl["hosts"])) == (8, 2, 2)
    # the 2.28.9 DGX Spark log names both ranks of its two-rank communicator and NCCL's nNodes
    assert _json(fixture_path("nccl", SPARK))["nccl"]["nodes"] == 2
