"""Nothing a memory bound leaves out is silent: every bound of the NCCL parser counts what it did not
keep, and the report says how many, of what, and which bound (in prose and in `nccl_summary.not_kept`),
on every path (lines, bytes, a file cut across processes)."""

from __future__ import annotations

from k3diag.parse.nccl import parse_bytes, parse_path, parse_stream
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl import pool


def _job(host: str, ranks: int, gdr_hcas: int = 0) -> list[str]:
    """One communicator of `ranks` ranks on `host`, each printing a `Trees` line of 4 channels."""
    lines = []
    for rank in range(ranks):
        pre = f"{host}:{100 + rank}:{200 + rank} [{rank % 8}] NCCL INFO "
        lines += [
            pre + f"ncclCommInitRank comm 0x{0x1000 + rank:x} rank {rank} nranks {ranks} cudaDev {rank % 8} "
                  f"nvmlDev {rank % 8} busId {rank % 8}8000 commId 0xabc - Init START",
            pre + f"comm 0x{0x1000 + rank:x} rank {rank} nRanks {ranks} nNodes 1 localRanks {ranks} "
                  f"localRank {rank} MNNVL 0",
            pre + "Trees " + " ".join(f"[{ch}] {(rank + 1) % ranks}/-1/-1->{rank}->{rank - 1}" for ch in range(4)),
        ]
        lines += [pre + f"Channel {ch:02d}/0 : {rank}[{rank % 8}] -> {(rank + 1) % ranks}[{(rank + 1) % 8}] "
                        "via P2P/IPC" for ch in range(4)]
        lines += [pre + f"NET/IB : GPU Direct RDMA Disabled for HCA {hca} 'mlx5_{hca}' (no module)"
                  for hca in range(gdr_hcas)]
        lines.append(pre + f"ncclCommInitRank comm 0x{0x1000 + rank:x} rank {rank} nranks {ranks} cudaDev "
                           f"{rank % 8} nvmlDev {rank % 8} busId {rank % 8}8000 commId 0xabc - Init COMPLETE")
    return lines


def _every_path(text: str, tmp_path, monkeypatch) -> list:
    results = [parse_stream(text.split("\n")[:-1], "job.log"), parse_bytes(text.encode(), "job.log")]
    path = tmp_path / "job.log"
    path.write_text(text)
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pool, "PICKLE_LEAD_BYTES", 0)
    results.append(parse_path(path, "job.log", workers=2))
    return results


def test_trees_past_the_bound_of_one_communicator_are_counted(tmp_path, monkeypatch) -> None:
    # 40 ranks x 4 channels = 160 tree entries in one communicator; the bound keeps 100
    monkeypatch.setattr(P, "MAX_TREES_PER_RUN", 100)
    text = "\n".join(_job("h1", 40)) + "\n"
    for result in _every_path(text, tmp_path, monkeypatch):
        (run,) = result.runs
        assert len(run.trees) == 100
        assert run.trees_not_kept == 60
        assert run.to_json()["trees_not_kept"] == 60
        assert ("60 tree entries of the communicators reported in full were counted but not kept: at most 100 "
                "per communicator (`trees_not_kept` of each run in --json)") in result.warnings


def test_tree_lines_past_the_bound_of_communicators_in_flight_are_counted(tmp_path, monkeypatch) -> None:
    # 4 entries a line: the 10 entries allowed in flight take 3 lines; the 37 other ranks' lines are left out
    monkeypatch.setattr(P, "MAX_TREES", 10)
    text = "\n".join(_job("h1", 40)) + "\n"
    results = _every_path(text, tmp_path, monkeypatch)
    for result in results[:2]:  # one pass
        assert result.summary.to_json()["not_kept"] == {"tree_lines": 37}
        assert any(w.startswith("37 `Trees` lines were counted but not kept (not read: the trees of communicators "
                                "being read are bounded to 10 entries in all and 4,096 per rank;")
                   for w in result.warnings), result.warnings
    # a file cut in two: each part has its own bound in flight, so fewer are left out; still counted
    (cut,) = results[2:]
    left_out = cut.summary.to_json()["not_kept"]["tree_lines"]
    assert 0 < left_out <= 37
    assert len(cut.runs[0].trees) == 4 * (40 - left_out)


def test_distinct_facts_past_their_bound_are_counted_once_each(tmp_path, monkeypatch) -> None:
    # 8 HCAs named by each of 4 ranks: 8 distinct GPUDirect RDMA lines on the host, 3 kept
    monkeypatch.setattr(P, "MAX_GDR", 3)
    text = "\n".join(_job("h1", 4, gdr_hcas=8)) + "\n"
    for result in _every_path(text, tmp_path, monkeypatch):
        assert len(result.runs[0].gdr) == 3
        assert result.summary.to_json()["not_kept"] == {"gdr": 5}
        assert any(w.startswith("5 GPUDirect RDMA lines were counted but not kept (past the first 3 distinct ones; ")
                   for w in result.warnings), result.warnings


def test_a_log_within_every_bound_says_nothing_was_left_out() -> None:
    text = "\n".join(_job("h1", 8, gdr_hcas=2)) + "\n"
    result = parse_bytes(text.encode(), "job.log")
    assert result.summary.to_json()["not_kept"] == {}
    assert result.runs[0].trees_not_kept == 0
    assert not any("counted but not kept" in w for w in result.warnings)


def test_past_the_memory_of_distinct_facts_the_count_is_a_lower_bound_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(P, "MAX_GDR", 3)
    monkeypatch.setattr(P, "MAX_NOT_KEPT_KEYS", 2)
    text = "\n".join(_job("h1", 4, gdr_hcas=8)) + "\n"
    result = parse_bytes(text.encode(), "job.log")
    summary = result.summary.to_json()
    assert summary["not_kept"] == {"gdr": 2}
    assert summary["not_kept_lower_bounds"] == ["gdr"]
    assert any(w.startswith("at least 2 GPUDirect RDMA lines were counted but not kept") for w in result.warnings)


def test_the_cli_json_and_terminal_say_what_was_left_out(tmp_path, monkeypatch) -> None:
    import json
    import subprocess
    import sys
    import textwrap

    log = tmp_path / "job.log"
    log.write_text("\n".join(_job("h1", 4, gdr_hcas=8)) + "\n")
    # the bound is lowered in the child: a tiny sitecustomize-free launcher
    code = textwrap.dedent(f"""
        import sys
        from k3diag.parse.nccl import patterns
        patterns.MAX_GDR = 3
        from k3diag.__main__ import main
        sys.argv = ["k3diag", "analyze", {str(log)!r}] + sys.argv[1:]
        main()
    """)
    env = {"PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[2]), "NO_COLOR": "1",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code, "--json"], capture_output=True, text=True, env=env, timeout=120)
    report = json.loads(out.stdout)
    assert report["nccl_summary"]["not_kept"] == {"gdr": 5}
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "5 GPUDirect RDMA lines were counted but not kept (past the first 3 distinct ones" in " ".join(text.split())


def _warnings_of(result, kind: str) -> list[str]:
    return [w for w in result.warnings if "counted but not kept" in w and kind in w]


def test_connection_lines_past_the_peers_of_one_rank_are_counted_in_not_kept(tmp_path, monkeypatch) -> None:
    # each of 4 ranks connects to 4 peers over 2 channels; a rank keeps 2 distinct (peer, transport) keys
    monkeypatch.setattr(P, "MAX_CONN_KEYS_PER_INSTANCE", 2)
    lines = []
    for rank in range(4):
        pre = f"h1:{100 + rank}:{200 + rank} [{rank}] NCCL INFO "
        lines.append(pre + f"ncclCommInitRank comm 0x{0x1000 + rank:x} rank {rank} nranks 4 cudaDev {rank} nvmlDev "
                           f"{rank} busId {rank}8000 commId 0xabc - Init START")
        lines += [pre + f"Channel {ch:02d}/1 : {rank}[{rank}] -> {peer}[{peer}] via P2P/CUMEM/read"
                  for peer in range(4) if peer != rank for ch in range(2)]
        lines.append(pre + f"ncclCommInitRank comm 0x{0x1000 + rank:x} rank {rank} nranks 4 cudaDev {rank} nvmlDev "
                           f"{rank} busId {rank}8000 commId 0xabc - Init COMPLETE")
    text = "\n".join(lines) + "\n"
    for result in _every_path(text, tmp_path, monkeypatch):
        # 3 peers a rank, 2 kept: the 2 lines of the third peer of each rank are left out
        assert result.summary.to_json()["not_kept"] == {"connection_lines": 8}
        assert result.runs[0].to_json()["connections_dropped"] == 8
        (sentence,) = _warnings_of(result, "connection lines")
        assert sentence.startswith("8 connection lines were counted but not kept (of ranks connected to more than 2 "
                                   "distinct peers and transports in one communicator; "), sentence
        assert sentence.endswith("`nccl_summary.not_kept` in --json)")


def test_communicator_lines_past_the_instances_in_flight_are_counted_in_not_kept(tmp_path, monkeypatch) -> None:
    # 2 instances are read at once; ranks 2 and 3 of the same communicator (its run is not complete before
    # them) are left out, with their START, `comm`, `Trees` and COMPLETE lines
    monkeypatch.setattr(P, "MAX_INSTANCES", 2)
    text = "\n".join(_job("h1", 4)) + "\n"
    *one_pass, cut = _every_path(text, tmp_path, monkeypatch)
    for result in one_pass:
        assert result.summary.to_json()["not_kept"] == {"init_lines": 8}
        (sentence,) = _warnings_of(result, "communicator init lines")
        assert sentence.startswith("8 communicator init lines were counted but not kept (of ranks past the first 2 "
                                   "communicator instances being read at once; "), sentence
    # a file cut in two: an instance of the later part with no room at the merge is counted once, whatever
    # number of lines it had, and the count says it is a lower bound
    summary = cut.summary.to_json()
    assert summary["not_kept"]["init_lines"] >= 1
    assert summary["not_kept_lower_bounds"] == ["init_lines"]
    (sentence,) = _warnings_of(cut, "communicator init lines")
    assert sentence.startswith("at least "), sentence


def test_distinct_warnings_past_their_bound_are_counted_once_each(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(P, "MAX_MESSAGES", 2)
    pre = "h1:100:200 [0] NCCL WARN "
    warns = [pre + f"Cuda failure {n} 'out of memory'" for n in range(5)]
    text = "\n".join(_job("h1", 2) + warns + warns) + "\n"  # each distinct warning twice
    for result in _every_path(text, tmp_path, monkeypatch):
        assert result.summary.to_json()["not_kept"] == {"messages": 3}
        (sentence,) = _warnings_of(result, "NCCL warnings or errors")
        assert sentence.startswith("3 NCCL warnings or errors were counted but not kept (past the first 2 distinct "
                                   "ones; "), sentence
