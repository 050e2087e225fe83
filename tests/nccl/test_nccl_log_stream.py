"""Bad input and big input for the NCCL log parser: cut and glued lines, binary junk, no NCCL
lines, two jobs in one file, several communicators on one thread, bounded memory."""

from __future__ import annotations

import importlib.util
import random
import tracemalloc
from pathlib import Path

from nccl_fixtures import fixture_path

from k3diag.parse import nccl_log

REPO = Path(__file__).resolve().parents[2]


def lines_of(name: str) -> list[str]:
    return fixture_path("nccl", name).read_text(encoding="utf-8").split("\n")


def test_record_cut_mid_line_is_skipped_with_its_line_number():
    result = nccl_log.parse_stream(lines_of("nccl-vllm-interleaved-cut-mid-line.log"), "vllm.log")
    run = result.runs[0]
    # four channel lines of one pair fold into one record that keeps the channels
    assert sum(c.lines for c in run.connections) == 4
    assert [(c.channel, c.channels) for c in run.connections] == [(3, [3, 4, 5, 6])]
    assert result.lines_skipped == 1 and result.skipped_lines == [5]
    assert result.warnings[0] == ("1 NCCL line could not be read (cut or interleaved with other output); "
                                  "first at line 5")


def test_records_glued_on_one_line_are_split():
    result = nccl_log.parse_stream(lines_of("nccl-ibext-terminal-wrapped-concatenated.log"), "deepep.log")
    run = result.runs[0]
    assert sum(c.lines for c in run.connections) == 8
    assert {c.via for c in run.connections} == {
        "NET/IBext/5/GDRDMA", "NET/IBext/2/GDRDMA", "NET/IBext/0/GDRDMA", "NET/IBext/7/GDRDMA",
        "NET/IBext/1/GDRDMA", "NET/IBext/3/GDRDMA", "NET/IBext/6/GDRDMA"}
    assert run.rank_info(2).host == "VM-17-82-centos"
    assert run.rank_info(10).host is None  # the remote end of a [send] line
    # the record cut after "via" is reported, not guessed
    assert result.lines_skipped == 1


def test_binary_junk_in_the_middle():
    lines = lines_of("nccl-2.7-busid-direct-shared-memory.log")
    junk = ["\x00\x01\x02\ufffd\ufffd garbage \x00", "\x7fELF\x02\x01\x01\x00\x00\x00 NCCL \x00\x00"]
    mixed = lines[:5] + junk + lines[5:]
    result = nccl_log.parse_stream(mixed, "junk.log")
    assert sum(c.lines for c in result.runs[0].connections) == 14
    assert "1 line of binary or undecodable data was skipped; first at line 6" in result.warnings


def test_nuls_glued_before_a_record_are_not_part_of_the_host(tmp_path):
    """A job that crashed mid-write leaves NULs up to the next record on the same line: the host is
    still the one the record names, not a second host with NULs in its name."""
    lines = lines_of("nccl-2.7-busid-direct-shared-memory.log")
    first = next(i for i, line in enumerate(lines) if " via " in line)
    mixed = lines[:first] + ["\x00" * 40 + lines[first]] + lines[first + 1:]
    expected = nccl_log.parse_stream(lines, "nul.log")
    path = tmp_path / "nul.log"
    path.write_bytes("\n".join(mixed).encode() + b"\n")
    for result in (nccl_log.parse_stream(mixed, "nul.log"), nccl_log.parse_path(path, "nul.log", workers=1)):
        assert result.runs[0].hosts == expected.runs[0].hosts
        assert set(result.hosts_seen) == set(expected.hosts_seen)
        assert all("\x00" not in host for host in result.hosts_seen)


def test_no_nccl_lines():
    result = nccl_log.parse_stream(["hello", "step 1 loss 2.3", "", "RuntimeError: NCCL error in: x.cpp:12"], "app.log")
    assert result.runs == []
    assert any("no NCCL/RCCL log lines" in w for w in result.warnings)
    assert result.lines_skipped == 0


def test_two_jobs_in_one_file_stay_apart_by_comm_id():
    lines = lines_of("nccl-2.19-64ranks-init-complete.log") + ["some other job output"] + \
        lines_of("nccl-2.2x-2nodes-init-start.log")
    result = nccl_log.parse_stream(lines, "mixed.log")
    runs = {r.comm_id: r for r in result.runs}
    assert set(runs) == {"0x5ae77eb5ea4ec1ee", "0x996ee6f117cb8e1e"}
    assert runs["0x5ae77eb5ea4ec1ee"].nranks == 64
    assert runs["0x996ee6f117cb8e1e"].nranks == 8
    assert runs["0x996ee6f117cb8e1e"].hosts == ["kolyoz1", "kolyoz2"]


def _comm_block(host: str, pid: int, ptr: str, rank: int, nranks: int, comm_id: str, peer: int, via: str,
                modern: bool) -> list[str]:
    """One rank's init of one communicator in the formats of NCCL 2.19+ (`modern`) or 2.7-2.12."""
    pre = f"{host}:{pid}:{pid} [0] NCCL INFO "
    out = []
    if modern:
        out.append(pre + f"ncclCommInitRank comm {ptr} rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId 1b000 "
                         f"commId {comm_id} - Init START")
        out.append(pre + f"comm {ptr} rank {rank} nRanks {nranks} nNodes 1 localRanks {nranks} localRank {rank} MNNVL 0")
        out.append(pre + f"Channel 00/0 : {rank}[0] -> {peer}[1] via {via}")
        out.append(pre + f"ncclCommInitRank comm {ptr} rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId 1b000 "
                         f"commId {comm_id} - Init COMPLETE")
    else:
        out.append(pre + f"Channel 00 : {rank}[1b000] -> {peer}[3d000] via {via}")
        out.append(pre + f"comm {ptr} rank {rank} nranks {nranks} cudaDev 0 busId 1b000 - Init COMPLETE")
    return out


def test_several_communicators_on_one_thread_modern():
    lines = (_comm_block("h", 7, "0xaaa0", 0, 8, "0x1111", 1, "P2P/CUMEM/read", True)
             + _comm_block("h", 7, "0xbbb0", 0, 2, "0x2222", 1, "SHM/direct/direct", True))
    result = nccl_log.parse_stream(lines, "two.log")
    runs = {r.comm_id: r for r in result.runs}
    assert [c.via for c in runs["0x1111"].connections] == ["P2P/CUMEM/read"]
    assert [c.via for c in runs["0x2222"].connections] == ["SHM/direct/direct"]


def test_several_communicators_on_one_thread_2_7_to_2_12():
    # connection lines come before the communicator's `Init COMPLETE` line in these versions
    lines = (_comm_block("h", 7, "0xaaa0", 0, 8, "", 1, "P2P/IPC/read", False)
             + _comm_block("h", 7, "0xbbb0", 0, 2, "", 1, "direct shared memory", False))
    result = nccl_log.parse_stream(lines, "two.log")
    by_size = {r.nranks: r for r in result.runs}
    assert [c.via for c in by_size[8].connections] == ["P2P/IPC/read"]
    assert [c.via for c in by_size[2].connections] == ["direct shared memory"]


def test_lines_with_endings_and_first_line_offset():
    text = fixture_path("nccl", "nccl-2.4-ring-4nodes.log").read_text()
    result = nccl_log.parse_stream(text.splitlines(keepends=True), "x.log", first_line=1000)
    assert sum(c.lines for c in result.runs[0].connections) == 19
    assert min(c.source.line for c in result.runs[0].connections) == 1000
    assert not any(c.source.text.endswith("\n") for c in result.runs[0].connections)


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_nccl_log", REPO / "benchmarks" / "bench_nccl_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _peak(path: Path) -> tuple[int, nccl_log.NcclLogResult]:
    tracemalloc.start()
    try:
        result = nccl_log.parse_path(path, workers=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


def test_memory_does_not_grow_with_file_size(tmp_path, monkeypatch):
    """Bounded by design: complete communicators are built as they end and only K are kept in full,
    so a log four times larger needs about the same memory, and nothing is dropped uncounted.
    (Chunks of 1 MiB and K = 4 so that the small log already fills both.)"""
    from k3diag.parse.nccl import chunks, patterns

    monkeypatch.setattr(chunks, "CHUNK_BYTES", 1 << 20)
    monkeypatch.setattr(patterns, "DETAIL_RUNS", 4)
    bench = _bench_module()
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    info_small = bench.generate(small, 3, nodes=4, interleave=False)
    info_large = bench.generate(large, 12, nodes=4, interleave=False)
    assert info_large["bytes"] > 3.5 * info_small["bytes"]
    peak_small, result_small = _peak(small)
    peak_large, result_large = _peak(large)
    assert peak_large < 1.3 * peak_small + 512 * 1024, (peak_small, peak_large)
    summary = result_large.summary
    assert summary.runs_detailed == len(result_large.runs) == 4
    assert summary.runs_total == summary.runs_detailed + summary.runs_summarized > 3 * result_small.summary.runs_total
    assert any(f"{summary.runs_summarized} summarized" in w for w in result_large.warnings)
    # every connection line is counted, kept in full or summarized
    counted = sum(sum(r.transport_counts().values()) for r in result_large.runs) + \
        sum(summary.to_json()["summarized_transport_counts"].values())
    assert counted == info_large["via_lines"]
    assert result_large.lines_total > 3 * result_small.lines_total


def test_generated_log_is_read_right(tmp_path):
    bench = _bench_module()
    path = tmp_path / "g.log"
    bench.generate(path, 2, nodes=2)
    result = nccl_log.parse_path(path)
    assert result.version == "2.21.5+cuda12.4"
    world = [r for r in result.runs if r.nranks == 16]
    tp = [r for r in result.runs if r.nranks == 8]
    assert world and tp
    run = world[0]
    assert run.nodes == 2 and run.hosts == ["gpu-node-000", "gpu-node-001"]
    counts = run.transport_counts()
    assert counts["P2P"] > 0 and counts["NET"] > 0 and counts["SHM"] == 0
    assert all(c.gdrdma for c in run.connections if c.transport == "NET")
    assert run.env == {"NCCL_IB_HCA": "mlx5"}


def test_random_garbage_never_raises():
    rng = random.Random(3)
    base = lines_of("nccl-2.12-2nodes-ipc-read-ib-gdrdma.log")
    for _ in range(30):
        lines = []
        for line in base:
            cut = rng.randrange(len(line) + 1)
            lines.append(line[:cut] if rng.random() < 0.3 else line)
            if rng.random() < 0.1:
                lines.append("".join(chr(rng.randrange(0, 0x2FF)) for _ in range(rng.randrange(80))))
        nccl_log.parse_stream(lines, "fuzz.log")


def test_a_long_run_of_junk_before_a_record_is_read_in_linear_time(tmp_path):
    """A crashed writer's junk glued before a record (no newline between) made the header search
    quadratic in the junk's length (9 MiB: minutes); the record's own header is what counts."""
    path = tmp_path / "junk.log"
    path.write_bytes(b"a:1:2 [0] NCCL INFO Using network IB\n" + b"x" * (2 << 20)
                     + b" host9:1:2 [0] NCCL INFO NCCL version 2.18.5+cuda12.0\n")
    for result in (nccl_log.parse_path(path, "junk.log", workers=1),
                   nccl_log.parse_stream(path.read_text().split("\n"), "junk.log")):
        assert result.version == "2.18.5+cuda12.0"
        assert set(result.hosts_seen) == {"a", "host9"}


def test_a_line_longer_than_a_chunk_is_read_alike_from_a_file_and_from_memory(tmp_path, monkeypatch):
    """A run of bytes with no newline in a whole chunk (a binary dump in the log) keeps its head as
    one line whether the log is a file (split across processes) or a bundle member held in memory,
    and the lines after it keep their numbers."""
    from k3diag.parse.nccl import chunks, parse_bytes

    monkeypatch.setattr(chunks, "CHUNK_BYTES", 1 << 17)
    data = (b"a:1:2 [0] NCCL INFO Using network IB\n" + b"\x7fELF" + b"y" * (3 << 17) + b"\n"
            + b"host9:1:2 [0] NCCL INFO NCCL version 2.18.5+cuda12.0\n")
    path = tmp_path / "dump.log"
    path.write_bytes(data)
    results = (nccl_log.parse_path(path, "dump.log", workers=1), parse_bytes(data, "dump.log"))
    for result in results:
        assert result.version == "2.18.5+cuda12.0"
        assert result.lines_total == 3
        assert result.hosts_seen["host9"].line == 3
        assert result.hosts_seen["host9"].text == "host9:1:2 [0] NCCL INFO NCCL version 2.18.5+cuda12.0"
