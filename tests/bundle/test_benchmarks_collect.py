"""Benchmark runs for bundles, against fake all_reduce_perf / p2pBandwidthLatencyTest executables that
print real outputs (fixtures) and record how they were called."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from k3diag.collect.benchmarks import find_all_reduce_perf, gpu_steps, run_benchmarks

REPO = Path(__file__).resolve().parents[2]
NCCL_TESTS = REPO / "fixtures" / "bench" / "nccl-tests-8x4090-tree-head.txt"
P2P = REPO / "fixtures" / "bench" / "p2pbw-8xh100-nvlink-diag-over-1000.txt"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _fake_nccl_tests(folder: Path, calls: Path) -> Path:
    # Prints a real nccl-tests output, logs its arguments, and writes an NCCL debug file the way
    # NCCL does when NCCL_DEBUG_FILE is set (%p replaced by the pid).
    body = (
        f'echo "$@" >> {calls}\n'
        'echo "NCCL_DEBUG=$NCCL_DEBUG SUBSYS=$NCCL_DEBUG_SUBSYS" >> ' + str(calls) + "\n"
        'if [ -n "$NCCL_DEBUG_FILE" ]; then\n'
        '  f=$(echo "$NCCL_DEBUG_FILE" | sed "s/%p/$$/")\n'
        '  echo "gpu59:28307:28307 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read" > "$f"\n'
        "fi\n"
        f"cat {NCCL_TESTS}\n"
    )
    return _script(folder / "build" / "all_reduce_perf", body)


def test_gpu_steps() -> None:
    assert gpu_steps(1) == [1]
    assert gpu_steps(4) == [1, 2, 4]
    assert gpu_steps(8) == [1, 2, 4, 8]
    assert gpu_steps(6) == [1, 2, 4, 6]
    assert gpu_steps(16) == [1, 2, 4, 8, 16]


def test_all_reduce_runs_at_each_gpu_count_with_the_seed_sizes(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    _fake_nccl_tests(tmp_path / "nccl-tests", calls)
    seen: list[str] = []
    evidence = run_benchmarks(tmp_path / "nccl-tests", None, gpu_count=4, timeout_s=30, progress=seen.append)
    results = [e for e in evidence if e.name.startswith("all_reduce_perf")]
    logs = [e for e in evidence if e.name.startswith("nccl-debug")]
    assert [e.name for e in results] == ["all_reduce_perf-g1.txt", "all_reduce_perf-g2.txt", "all_reduce_perf-g4.txt"]
    for item, gpus in zip(results, (1, 2, 4)):
        assert item.kind == "command" and item.exit_code == 0 and item.error is None and not item.timed_out
        assert item.command.endswith(f"all_reduce_perf -b 8M -e 8G -f 2 -g {gpus}")
        assert item.data == NCCL_TESTS.read_bytes()
        assert item.format_hint == "nccl-tests"
        assert item.duration_s is not None and item.duration_s >= 0
    assert [log.meta["log_of"] for log in logs] == [e.name for e in results]
    assert b"via P2P/IPC/read" in logs[0].data
    lines = calls.read_text().splitlines()
    assert lines[0] == "-b 8M -e 8G -f 2 -g 1"
    assert lines[1] == "NCCL_DEBUG=INFO SUBSYS=INIT,GRAPH,P2P,NET"
    assert seen == ["all_reduce_perf -g 1 (1/3)", "all_reduce_perf -g 2 (2/3)", "all_reduce_perf -g 4 (3/3)"]


def test_caller_can_shrink_the_sizes(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    binary = _fake_nccl_tests(tmp_path / "nt", calls)
    assert find_all_reduce_perf(binary) == binary  # the binary itself may be given
    run_benchmarks(binary, None, gpu_count=2, timeout_s=30, min_bytes="1M", max_bytes="64M", nccl_debug=False)
    assert calls.read_text().splitlines()[0] == "-b 1M -e 64M -f 2 -g 1"


def test_p2p_test_runs_and_missing_tools_are_evidence(tmp_path: Path) -> None:
    p2p = _script(tmp_path / "p2pBandwidthLatencyTest", f"cat {P2P}\n")
    evidence = run_benchmarks(tmp_path / "no-such-dir", p2p, gpu_count=8, timeout_s=30)
    missing, ran = evidence
    assert "no executable all_reduce_perf" in missing.error and missing.data is None
    assert ran.name == "p2pBandwidthLatencyTest.txt" and ran.data == P2P.read_bytes()
    assert ran.format_hint == "p2p-bandwidth-latency-test"
    not_exec = tmp_path / "plain"
    not_exec.write_text("x")
    (bad,) = run_benchmarks(None, not_exec, gpu_count=8, timeout_s=30)
    assert "is not an executable file" in bad.error


def test_a_hanging_benchmark_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    _script(tmp_path / "nt" / "all_reduce_perf", f"sleep 60 &\necho $! > {pid_file}\nsleep 60\n")
    started = time.monotonic()
    evidence = run_benchmarks(tmp_path / "nt", None, gpu_count=1, timeout_s=0.5, nccl_debug=False)
    assert time.monotonic() - started < 10
    (item,) = evidence
    assert item.timed_out is True and "did not finish within 0.5 s" in item.error
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the benchmark's child process survived the timeout")


def test_no_gpu_means_no_run(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    _fake_nccl_tests(tmp_path / "nt", calls)
    (item,) = run_benchmarks(tmp_path / "nt", None, gpu_count=0, timeout_s=5)
    assert "no GPU was found" in item.error and not calls.exists()
