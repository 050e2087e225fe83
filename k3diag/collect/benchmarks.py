"""Optional benchmark runs for a bundle: nccl-tests all_reduce_perf and p2pBandwidthLatencyTest.

Only binaries the user points at are run; nothing is ever downloaded or built. Each run
has a timeout (its whole process group is killed when it is up), and its output becomes
evidence like any other command's. all_reduce_perf runs at 1, 2, 4 and 8 GPUs (as many as
exist) with the seed article's sizes, so the audit can judge bandwidth and how it scales;
NCCL's own INFO log of each run is kept beside it (in a file of its own, so the nccl-tests
table stays clean), because it says which transport each pair really used.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path
from typing import Callable

from k3diag.collect.runner import run_command
from k3diag.evidence import Evidence

GPU_STEPS = (1, 2, 4, 8)
NCCL_TESTS_FORMAT = "nccl-tests"
P2P_TEST_FORMAT = "p2p-bandwidth-latency-test"
# Debug logs of one run are a few hundred KB; keep a bound so a runaway log cannot fill the bundle.
MAX_DEBUG_LOG_BYTES = 32 * 1024 * 1024


def gpu_steps(gpu_count: int) -> list[int]:
    """1, 2, 4, 8 up to the GPU count, plus the full count when it is not one of those."""
    steps = [n for n in GPU_STEPS if n <= gpu_count]
    if gpu_count > 1 and gpu_count not in steps:
        steps.append(gpu_count)
    return steps


def find_all_reduce_perf(nccl_tests_dir: Path) -> Path | None:
    """all_reduce_perf in the folder, its build/ folder, or the path itself when it is the binary."""
    candidates = [nccl_tests_dir] if nccl_tests_dir.is_file() else [
        nccl_tests_dir / "all_reduce_perf",
        nccl_tests_dir / "build" / "all_reduce_perf",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def run_benchmarks(
    nccl_tests_dir: Path | None,
    p2p_test: Path | None,
    gpu_count: int,
    timeout_s: float,
    progress: Callable[[str], None] | None = None,
    *,
    min_bytes: str = "8M",
    max_bytes: str = "8G",
    step_factor: int = 2,
    nccl_debug: bool = True,
) -> list[Evidence]:
    """Run the benchmarks the user pointed at; every outcome (including "not found") is evidence."""
    evidence: list[Evidence] = []
    say = progress or (lambda message: None)
    if nccl_tests_dir is not None:
        binary = find_all_reduce_perf(Path(nccl_tests_dir))
        if binary is None:
            evidence.append(Evidence(
                name="all_reduce_perf.txt",
                kind="command",
                command=f"{shlex.quote(str(nccl_tests_dir))}/build/all_reduce_perf",
                format_hint=NCCL_TESTS_FORMAT,
                error=(f"no executable all_reduce_perf in {nccl_tests_dir} or its build/ folder; build nccl-tests "
                       "(`make` in its folder) and point --nccl-tests at it"),
            ))
        elif gpu_count < 1:
            evidence.append(Evidence(
                name="all_reduce_perf.txt", kind="command", command=str(binary), format_hint=NCCL_TESTS_FORMAT,
                error="no GPU was found, so all_reduce_perf was not run",
            ))
        else:
            steps = gpu_steps(gpu_count)
            for position, gpus in enumerate(steps, start=1):
                say(f"all_reduce_perf -g {gpus} ({position}/{len(steps)})")
                evidence.extend(_run_all_reduce(binary, gpus, timeout_s, min_bytes, max_bytes, step_factor,
                                                nccl_debug))
    if p2p_test is not None:
        p2p_path = Path(p2p_test)
        say("p2pBandwidthLatencyTest")
        if not (p2p_path.is_file() and os.access(p2p_path, os.X_OK)):
            evidence.append(Evidence(
                name="p2pBandwidthLatencyTest.txt", kind="command", command=str(p2p_path),
                format_hint=P2P_TEST_FORMAT,
                error=(f"{p2p_path} is not an executable file; build p2pBandwidthLatencyTest from NVIDIA's "
                       "cuda-samples and give the path of the binary"),
            ))
        else:
            evidence.append(run_command([str(p2p_path)], "p2pBandwidthLatencyTest.txt", timeout_s=timeout_s,
                                        format_hint=P2P_TEST_FORMAT))
    return evidence


def _run_all_reduce(
    binary: Path, gpus: int, timeout_s: float, min_bytes: str, max_bytes: str, step_factor: int, nccl_debug: bool
) -> list[Evidence]:
    argv = [str(binary), "-b", min_bytes, "-e", max_bytes, "-f", str(step_factor), "-g", str(gpus)]
    name = f"all_reduce_perf-g{gpus}.txt"
    env = dict(os.environ)
    if not nccl_debug:
        return [run_command(argv, name, timeout_s=timeout_s, format_hint=NCCL_TESTS_FORMAT, env=env)]
    with tempfile.TemporaryDirectory(prefix="k3diag-nccl-") as folder:
        env.update({
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,P2P,NET",
            # %p: NCCL writes one file per process; a single-process -g run makes one.
            "NCCL_DEBUG_FILE": os.path.join(folder, f"nccl-g{gpus}.%p.log"),
        })
        result = run_command(argv, name, timeout_s=timeout_s, format_hint=NCCL_TESTS_FORMAT, env=env)
        result.meta["env"] = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": env["NCCL_DEBUG_SUBSYS"]}
        logs = sorted(Path(folder).glob(f"nccl-g{gpus}.*.log"))
        log_data = b""
        for log in logs:
            try:
                with log.open("rb") as handle:
                    log_data += handle.read(MAX_DEBUG_LOG_BYTES - len(log_data))
            except OSError:
                continue
            if len(log_data) >= MAX_DEBUG_LOG_BYTES:
                break
    evidence = [result]
    if log_data:
        evidence.append(Evidence(
            name=f"nccl-debug-all_reduce-g{gpus}.log",
            data=log_data,
            kind="file",
            command=f"NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET {shlex.join(argv)}",
            meta={"log_of": name},
        ))
    return evidence
