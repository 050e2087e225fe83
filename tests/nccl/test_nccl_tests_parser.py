"""nccl-tests / rccl-tests output: every column variant, headers, footers, prefixes, trims."""

from __future__ import annotations

from nccl_fixtures import fixture_section

from k3diag.parse import nccl_tests
from k3diag.parse.text import Section


def parse(name: str) -> nccl_tests.NcclTestsResult:
    return nccl_tests.parse(fixture_section("bench", name), name)


def one(name: str):
    result = parse(name)
    assert len(result.benchmarks) == 1, [b.op for b in result.benchmarks]
    return result, result.benchmarks[0]


def test_wrong_column_with_redop_root_and_single_rank():
    _, bench = one("nccl-tests-1gpu-a6000-head.txt")
    assert (bench.op, bench.nranks, bench.variant) == ("all_reduce", 1, "nccl-tests")
    assert bench.columns[:5] == ["size", "count", "type", "redop", "root"]
    row = bench.rows[0]
    assert (row.size_bytes, row.count, row.type, row.redop, row.root) == (8, 2, "float", "sum", -1)
    assert row.out_of_place.to_json() == {"time_us": 118.3, "algbw": 0.0, "busbw": 0.0, "wrong": 0}
    assert row.in_place.time_us == 0.13 and row.in_place.algbw == 0.06
    assert bench.devices[0].host == "astro1" and bench.devices[0].bus_id == "0000:01:00.0"
    assert bench.devices[0].name == "NVIDIA RTX A6000"


def test_old_error_column_all_gather_without_redop_then_next_test():
    result = parse("nccl-tests-2.6-allgather-error-col-then-broadcast.txt")
    first, second = result.benchmarks
    assert len(first.rows) == 12
    row = first.rows[-1]
    assert (row.size_bytes, row.count, row.type, row.redop, row.root) == (134217728, 16777216, "float", None, None)
    assert row.out_of_place.to_json() == {"time_us": 3298.6, "algbw": 20.34, "busbw": 20.34, "wrong": None, "error": 0.0}
    assert row.in_place.busbw == 21.86
    assert (first.avg_busbw, first.out_of_bounds) == (6.6972, 0)
    assert first.max_busbw == 21.86
    assert first.plateau_busbw == round((21.5 + 21.86 + 21.37) / 3, 2)
    # the prompt line names the next test
    assert second.op == "broadcast" and second.n_gpus_per_thread == 2 and not second.rows


def test_broadcast_root_column_error_na_and_nccl_lines():
    result, bench = one("nccl-tests-2.9.6-broadcast-2nodes-error-na-warn.txt")
    assert (bench.op, bench.nranks) == ("broadcast", 2)
    assert bench.hosts == ["v100-gpu-1", "v100-gpu-5"]
    row = bench.rows[0]
    assert (row.root, row.redop) == (0, None)
    assert row.out_of_place.wrong is None and row.out_of_place.error is None
    assert result.nccl is not None and result.nccl.version == "2.9.6+cuda11.2"
    assert result.nccl.runs[0].messages[0].file == "misc/ibvwrap.cc"


def test_error_column_deviation_is_not_a_wrong_count():
    _, bench = one("nccl-tests-2.x-error-col-128gpu-1e-06.txt")
    assert len(bench.rows) == 6
    assert bench.rows[0].out_of_place.error == 1e-06
    assert bench.wrong_total == 0


def test_footer_avg_and_oob():
    _, bench = one("nccl-tests-2nodes-200g-tail.txt")
    assert bench.avg_busbw == 84.8558
    assert bench.out_of_bounds == 0
    assert bench.max_busbw == 96.69
    assert bench.rows[0].size_bytes == 127926280


def test_mpirun_prefixes_slurm_labels_and_mid_line_tags():
    _, bench = one("nccl-tests-p5-mpirun-prefix-head.txt")
    assert len(bench.rows) == 3 and bench.rows[2].out_of_place.time_us == 22.25
    _, bench = one("rccl-tests-mi250x-slurm-label-allgather.txt")
    assert len(bench.rows) == 5
    assert bench.rows[0].redop == "none" and bench.rows[-1].in_place.busbw == 0.78
    result, bench = one("nccl-tests-h100-3nodes-mpi-tag-output-split-rows.txt")
    assert len(bench.rows) == 10
    row = bench.rows[0]
    assert (row.size_bytes, row.out_of_place.time_us, row.in_place.busbw) == (1048576, 1626.5, 0.87)
    # the first line is the tail of a row that started above the excerpt
    assert "line 1" in result.warnings[0]


def test_new_header_version_and_bdf_devices():
    _, bench = one("nccl-tests-2.20-gb10-2nodes-version-header.txt")
    assert (bench.version, bench.variant, bench.op, bench.nranks) == ("2.20.0", "nccl-tests", "all_reduce", 2)
    assert bench.devices[1].bus_id == "000f:01:00.0" and bench.devices[1].host == "spark-dbf4"
    assert bench.rows[-1].in_place.busbw == 1.01
    _, bench = one("nccl-tests-h100-2nodes-header-domain-bdf.txt")
    assert bench.nranks == 12 and bench.hosts == ["h100-2", "h100-4"]
    assert bench.devices[4].bus_id == "0003:00:01.0"


def test_rccl_tests_variants():
    _, bench = one("rccl-tests-mi300x-header-collective-starting.txt")
    assert (bench.variant, bench.version, bench.op) == ("rccl-tests", "develop:5272cd1", "all_reduce")
    assert bench.devices[0].bus_id == "0000:05:00.0" and bench.devices[0].name == "AMD Instinct MI300X"
    _, bench = one("rccl-tests-ainic-tail-collective-concluded.txt")
    assert bench.op == "all_reduce"
    assert bench.rows[0].out_of_place.time_us == 11186.0  # large times print without decimals
    assert (bench.avg_busbw, bench.max_busbw) == (142.652, 361.17)
    _, bench = one("rccl-tests-strix-broadcast-then-next-test.txt")
    assert (bench.op, bench.rows[0].root, bench.avg_busbw) == ("broadcast", 0, 3.41227)
    _, bench = one("rccl-tests-old-header-nthreads-colon.txt")
    assert (bench.nranks, bench.variant) == (2, "rccl-tests")
    assert bench.devices[1].bus_id == "0000:23:00.0"


def test_cut_row_fills_out_of_place_only():
    _, bench = one("nccl-tests-8x4090-tree-head.txt")
    row = bench.rows[0]
    assert row.out_of_place.time_us == 42.56 and row.in_place is None
    assert bench.nranks == 8


def test_alltoall_na_wrong():
    _, bench = one("nccl-tests-alltoall-1gpu-5090-na-wrong.txt")
    row = bench.rows[0]
    assert (bench.op, row.in_place.wrong, row.in_place.algbw, bench.avg_busbw) == ("alltoall", None, 43046.1, 0.0)


def test_interleaved_runs_are_reported():
    result, bench = one("nccl-tests-two-single-rank-runs-interleaved.txt")
    assert len(bench.rows) == 10
    assert any("go back down" in w for w in result.warnings)


def test_header_only_with_init_lines_gives_the_nccl_run():
    result = parse("nccl-tests-h20-2nodes-header-interleaved-init.txt")
    assert result.nccl.runs[0].nranks == 4
    assert result.nccl.runs[0].comm_id == "0xf021d9037f9243d8"


def test_markdown_ate_the_hashes():
    text = "\n".join([
        " nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 5 agg iters: 1",
        "  Rank  0 Group  0 Pid    127 on nccl-worker-0 device  0 [0x00] NVIDIA A10G",
        "       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "           8             2     float     sum      -1    12.90    0.00    0.00      0    12.87    0.00    0.00      0",
    ])
    result = nccl_tests.parse(Section(text, 1), "md.txt")
    bench = result.benchmarks[0]
    assert bench.nranks == 1 and len(bench.rows) == 1 and bench.rows[0].in_place.time_us == 12.87


def test_wrong_values_and_failed_footer():
    # derived from nccl-tests-2nodes-200g-tail.txt: one #wrong cell set to 1024 and the footer to FAILED
    text = fixture_section("bench", "nccl-tests-2nodes-200g-tail.txt").text
    text = text.replace("49.96   95.75      0", "49.96   95.75   1024").replace("values : 0 OK", "values : 2 FAILED")
    bench = nccl_tests.parse(Section(text, 1), "bad.txt").benchmarks[0]
    assert bench.wrong_total == 1024 and bench.out_of_bounds == 2


def test_sniff_and_start():
    assert nccl_tests.sniff(fixture_section("bench", "nccl-tests-1gpu-a6000-head.txt").text) >= 0.9
    assert nccl_tests.sniff(fixture_section("bench", "nccl-tests-wrong-col-wide-mooncake.txt").text) >= 0.5
    assert nccl_tests.sniff(fixture_section("nccl", "nccl-2.4-ring-4nodes.log").text) == 0.0
    assert nccl_tests.START_RE.match("# nThread 1 nGpus 8 minBytes 8")
    assert nccl_tests.START_RE.match("[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8")
    assert nccl_tests.START_RE.match("# Collective test starting: all_reduce_perf")
    assert not nccl_tests.START_RE.match("#  Rank  0 Group  0 Pid 1 on h device 0 [0x00] X")
