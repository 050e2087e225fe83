"""The whole `k3diag analyze LOG --json` against `grep -c ' via '` and `wc -l` on generated NCCL logs.

    python benchmarks/bench_nccl_log.py                          # 300 MiB and 1 GiB, rank blocks, plus interleaved
    python benchmarks/bench_nccl_log.py --sizes 100 --repeat 3   # smaller
    python benchmarks/bench_nccl_log.py --keep --dir /tmp/bench  # keep (and reuse) the generated logs
    python benchmarks/bench_nccl_log.py --sizes '' --interleave-mb 0 --big-job-mb 100  # 8,192-rank jobs only

The log is built from the line formats NCCL 2.19-2.2x prints with NCCL_DEBUG=INFO
(NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET,COLL): per rank the init lines (`Init START`, the
`comm ... nRanks ... nNodes` line, ring orders, Trees, P2P/CUMEM and NET/IB/GDRDMA
connection lines, `Init COMPLETE`), then per-collective COLL lines and application output,
interleaved across ranks the way a multi-node job's merged log looks. Several communicators
(world, tensor-parallel groups) are initialized, and jobs repeat until the size is reached.

Each size is measured as whole processes on the same file, after a warm-up read so every contender reads
from the page cache, in alternating order (grep, wc, k3diag, grep, ...; the machine is shared, so the median
of `--repeat` runs is reported): wall time of each, k3diag's ratio to grep and to wc, the peak RSS of the
largest k3diag process (the CLI or a pool worker: `wait4`'s ru_maxrss) and the size of the JSON it wrote.
`--interleave-mb` adds a log whose ranks are mixed a few lines at a time (the exact path's case).
The `CPU/n x grep` column is k3diag's CPU time (its pool workers included) over the n processes a big log is
split into here (the cores available, at most `pool.MAX_WORKERS`), over grep's wall time: about
the wall ratio on an otherwise idle machine, a bound that moves less with other load than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # `_parallel` asks the pool how many processes it starts

NODES = 32
GPUS_PER_NODE = 8
CHANNELS = 16


def _bus(gpu: int) -> str:
    return ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"][gpu % 8]


def _job_lines(job: int, rng: random.Random, nodes: int, nranks_world: int) -> list[list[str]]:
    """Per-rank line lists for one job's communicator inits (world + TP groups of 8)."""
    per_rank: list[list[str]] = []
    comm_world = rng.getrandbits(64)
    comm_tp = [rng.getrandbits(64) for _ in range(nodes)]
    for rank in range(nranks_world):
        node, gpu = divmod(rank, GPUS_PER_NODE)
        host = f"gpu-node-{node:03d}"
        pid = 10000 + job * 1000 + rank
        tid = pid + 93
        pre = f"{host}:{pid}:{tid} [{gpu}] NCCL INFO "
        out = []
        if rank == 0:
            out.append("NCCL version 2.21.5+cuda12.4")
        out.append(f"{host}:{pid}:{pid} [{gpu}] NCCL INFO cudaDriverVersion 12040")
        out.append(f"{host}:{pid}:{pid} [{gpu}] NCCL INFO Bootstrap : Using eth0:10.1.{node}.{gpu + 10}<0>")
        out.append(pre + "NCCL_IB_HCA set by environment to mlx5")
        out.append(pre + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB eth0:10.1.0.1<0>")
        out.append(pre + "Using network IB")
        for comm_id, size, crank, offset in (
            (comm_world, nranks_world, rank, 0),
            (comm_tp[node], GPUS_PER_NODE, gpu, node * GPUS_PER_NODE),
        ):
            ptr = f"0x{0x55d000000000 + rng.getrandbits(32):x}"
            out.append(pre + f"ncclCommInitRank comm {ptr} rank {crank} nranks {size} cudaDev {gpu} nvmlDev {gpu} "
                             f"busId {_bus(gpu)} commId 0x{comm_id:x} - Init START")
            out.append(pre + f"Setting affinity for GPU {gpu} to ffff,ffffffff,00000000")
            nnodes = size // GPUS_PER_NODE if size > GPUS_PER_NODE else 1
            out.append(pre + f"comm {ptr} rank {crank} nRanks {size} nNodes {nnodes} localRanks 8 localRank {gpu} MNNVL 0")
            if crank == 0:
                # NCCL's `dumpLine` writes " %*d" (the width of the largest rank); the width is at least 3 here,
                # the bytes the earlier figures were taken with ("%4d", which glued the ranks of a job of over
                # 1,000 into one number). NCCL 2.19+ also cuts the line at 128 characters with "..."; the whole
                # order is kept here, for the same reason.
                width = max(3, len(str(size - 1)))
                order = "".join(f" {r:{width}d}" for r in range(size))
                for ch in range(CHANNELS):
                    out.append(pre + f"Channel {ch:02d}/{CHANNELS:02d} :{order}")
            out.append(pre + f"Trees [0] {crank + 1 if crank + 1 < size else -1}/-1/-1->{crank}->{crank - 1 if crank else -1}")
            out.append(pre + "P2P Chunksize set to 131072")
            for ch in range(CHANNELS):
                nxt = (crank + 1) % size
                g_next = (gpu + 1) % GPUS_PER_NODE
                if gpu < GPUS_PER_NODE - 1 or size == GPUS_PER_NODE:
                    out.append(pre + f"Channel {ch:02d}/0 : {crank}[{gpu}] -> {nxt}[{g_next}] via P2P/CUMEM/read")
                else:
                    out.append(pre + f"Channel {ch:02d}/0 : {crank}[{gpu}] -> {nxt}[0] [send] via NET/IB/{ch % 4}/GDRDMA")
                if gpu == 0 and size > GPUS_PER_NODE:
                    prv = (crank - 1) % size
                    out.append(pre + f"Channel {ch:02d}/0 : {prv}[7] -> {crank}[0] [receive] via NET/IB/{ch % 4}/GDRDMA")
            out.append(pre + "Connected all rings, use ring PXN 0 GDR 1")
            for ch in range(CHANNELS):
                if gpu:
                    out.append(pre + f"Channel {ch:02d}/0 : {crank}[{gpu}] -> {crank - 1}[{gpu - 1}] via P2P/CUMEM/read")
            out.append(pre + "Connected all trees")
            out.append(pre + "threadThresholds 8/8/64 | 512/8/64 | 512 | 512")
            out.append(pre + f"{CHANNELS} coll channels, 0 collnet channels, 0 nvls channels, {CHANNELS} p2p channels, 2 p2p channels per peer")
            out.append(pre + f"ncclCommInitRank comm {ptr} rank {crank} nranks {size} cudaDev {gpu} nvmlDev {gpu} "
                             f"busId {_bus(gpu)} commId 0x{comm_id:x} - Init COMPLETE")
            out.append(pre + f"Init timings - ncclCommInitRank: rank {crank} nranks {size} total 1.52 (kernels 0.21, alloc 0.05, "
                             "bootstrap 0.30, allgathers 0.02, topo 0.44, graphs 0.02, connections 0.45, rest 0.03)")
        per_rank.append(out)
    return per_rank


def _coll_lines(rng: random.Random, nranks: int, steps: int) -> list[str]:
    lines = []
    for step in range(steps):
        rank = rng.randrange(nranks)
        node, gpu = divmod(rank, GPUS_PER_NODE)
        host = f"gpu-node-{node:03d}"
        pid = 10000 + rank
        lines.append(
            f"{host}:{pid}:{pid} [{gpu}] NCCL INFO AllReduce: opCount {step:x} sendbuff 0x7f3a1c000000 "
            f"recvbuff 0x7f3a1c000000 count 16777216 datatype 7 op 0 root 0 comm 0x55d0a1b2c3d0 "
            f"[nranks={nranks}] stream 0x55d0a4b5c6d0"
        )
        if step % 8 == 0:
            lines.append(f"[rank{rank}]: step {step} loss {2.0 + rng.random():.4f} lr 3.0e-04 tokens/s 41234.5")
    return lines


def generate(path: Path, size_mb: float, seed: int = 7, nodes: int = NODES, coll_per_rank: int = 200,
             interleave: bool = True) -> dict:
    """A log of `size_mb` MiB. `interleave=False` writes each rank's init block whole (per-rank
    `NCCL_DEBUG_FILE`s concatenated, or a launcher that buffers by line group); True mixes ranks a
    few lines at a time, the way a merged multi-process stdout looks."""
    rng = random.Random(seed)
    target = int(size_mb * 1024 * 1024)
    nranks = nodes * GPUS_PER_NODE
    written = 0
    jobs = 0
    via_lines = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            per_rank = _job_lines(jobs, rng, nodes, nranks)
            # interleave ranks the way a merged multi-process log looks
            cursors = [0] * nranks
            live = list(range(nranks))
            buf: list[str] = []
            while live:
                r = rng.choice(live)
                lines = per_rank[r]
                take = rng.randint(1, 6) if interleave else len(lines)
                chunk = lines[cursors[r]:cursors[r] + take]
                cursors[r] += take
                buf.extend(chunk)
                if cursors[r] >= len(lines):
                    live.remove(r)
            buf.extend(_coll_lines(rng, nranks, coll_per_rank * nranks))
            text = "\n".join(buf) + "\n"
            via_lines += text.count(" via ")
            out.write(text)
            written += len(text.encode("utf-8"))
            jobs += 1
    return {"bytes": written, "jobs": jobs, "ranks_per_job": nranks, "via_lines": via_lines}


def _generate_apart(path: Path, size_mb: int, **options: object) -> None:
    """`generate` in a process of its own. Generated here, a log of big jobs left this process hundreds of
    MiB large, and the kernel counts the size a child had before its exec in the child's ru_maxrss: k3diag's
    peak read as 356 MiB where it was 178."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
            f"from pathlib import Path; from bench_nccl_log import generate; "
            f"generate(Path({str(path)!r}), {size_mb!r}, **{options!r})")
    subprocess.run([sys.executable, "-c", code], check=True)


def _run(argv: list[str], out_path: Path | None, cwd: Path, env: dict) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one process tree (largest process). Output goes to a file, never
    /dev/null: GNU grep stops at the first match when its output is /dev/null."""
    with open(out_path, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _parallel() -> int:
    """How many processes `k3diag.parse.nccl.pool` splits a big log into on this machine."""
    from k3diag.parse.nccl.pool import MAX_WORKERS, available_cores

    return min(available_cores(), MAX_WORKERS)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def measure(path: Path, repeat: int, repo: Path) -> dict:
    with open(path, "rb") as handle:  # warm the page cache for every contender
        while handle.read(1 << 24):
            pass
    env = dict(os.environ, PYTHONPATH=str(repo))
    json_path = path.with_suffix(".json")
    contenders = {
        "grep": ["grep", "-c", " via ", str(path)],
        "wc": ["wc", "-l", str(path)],
        "k3diag": [sys.executable, "-m", "k3diag", "analyze", str(path), "--json"],
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    rss: list[float] = []
    for _ in range(repeat):
        for name, argv in contenders.items():
            wall, peak, seconds = _run(argv, json_path if name == "k3diag" else path.with_suffix(".out"), repo, env)
            times[name].append(wall)
            cpu[name].append(seconds)
            if name == "k3diag":
                rss.append(peak)
    report = json.loads(json_path.read_text())
    summary = report.get("nccl_summary") or {}
    result = {name: _median(values) for name, values in times.items()}
    result.update(rss_mib=max(rss), json_bytes=json_path.stat().st_size,
                  runs_total=summary.get("runs_total", len(report.get("nccl_runs", []))),
                  runs_detailed=len(report.get("nccl_runs", [])), all_k3diag=times["k3diag"],
                  cpu_grep=_median(cpu["grep"]), cpu_k3diag=_median(cpu["k3diag"]))
    json_path.unlink()
    path.with_suffix(".out").unlink(missing_ok=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="300,1024", help="MiB of the rank-block logs, comma-separated")
    parser.add_argument("--interleave-mb", type=int, default=300, help="MiB of the interleaved log (0: none)")
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the logs (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs (and reuse them next time)")
    parser.add_argument("--big-job-mb", type=int, default=0,
                        help="MiB of a log of jobs of 8,192 ranks (1,024 nodes; 0: none): the peak memory of "
                             "communicators that stay open across a whole part of the file")
    args = parser.parse_args(argv)

    repo = Path(__file__).resolve().parents[1]
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="k3diag-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cases = [(int(size), False) for size in args.sizes.split(",") if size.strip()]
    if args.interleave_mb:
        cases.append((args.interleave_mb, True))
    if args.big_job_mb:
        cases.append((args.big_job_mb, "8192-ranks"))
    made: list[Path] = []
    print(f"cores available: {len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'log':<28} {'grep -c':>8} {'wc -l':>7} {'k3diag':>8} {'x grep':>7} {'x wc':>6} {'peak RSS':>9} "
          f"{'JSON':>8}  {'CPU/n x grep':>12}  runs (in full)")
    try:
        for size, interleave in cases:
            kind = interleave if isinstance(interleave, str) else "interleaved" if interleave else "blocks"
            path = workdir / f"nccl-{size}mb-{kind}.log"
            if not path.exists():
                if kind == "8192-ranks":  # two jobs of 8,192 ranks in 100 MiB (146.7 MB: the jobs are whole)
                    _generate_apart(path, size, nodes=1024, coll_per_rank=1, interleave=False)
                else:
                    _generate_apart(path, size, nodes=args.nodes, coll_per_rank=2, interleave=bool(interleave))
                made.append(path)
            r = measure(path, args.repeat, repo)
            label = f"{path.stat().st_size / 2**20:.0f} MiB {'rank blocks' if kind == 'blocks' else kind}"
            print(f"{label:<28} {r['grep']:>7.2f}s {r['wc']:>6.2f}s {r['k3diag']:>7.2f}s {r['k3diag'] / r['grep']:>6.1f}x "
                  f"{r['k3diag'] / r['wc']:>5.1f}x {r['rss_mib']:>6.0f} MiB {r['json_bytes'] / 1e6:>6.2f}MB  "
                  f"{r['cpu_k3diag'] / _parallel() / r['grep']:>11.1f}x  "
                  f"{r['runs_total']} ({r['runs_detailed']}); k3diag runs: "
                  + ", ".join(f"{t:.2f}" for t in r["all_k3diag"]))
        return 0
    finally:
        if not args.keep:
            for path in made:
                path.unlink(missing_ok=True)
            if args.dir is None:
                shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
