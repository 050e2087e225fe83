"""Throughput and peak memory of the NCCL log parser on a generated multi-node log.

    python benchmarks/bench_nccl_log.py                 # 1 GiB log
    python benchmarks/bench_nccl_log.py --size-mb 200   # smaller
    python benchmarks/bench_nccl_log.py --keep --path /tmp/big.log

The log is built from the line formats NCCL 2.19-2.2x prints with NCCL_DEBUG=INFO
(NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET,COLL): per rank the init lines (`Init START`, the
`comm ... nRanks ... nNodes` line, ring orders, Trees, P2P/CUMEM and NET/IB/GDRDMA
connection lines, `Init COMPLETE`), then per-collective COLL lines and application output,
interleaved across ranks the way a multi-node job's merged log looks. Several communicators
(world, tensor-parallel groups) are initialized, and jobs repeat until the size is reached.

Reported in one run, on the same file, after one warm-up read so both sides read from the
page cache: `grep -c ' via '` time, parser time (file path and the line-iterator path that
`k3diag analyze` uses), their ratio, and the parser's peak memory (ru_maxrss of a child
process that only parses).
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
                order = "".join(f"{r:4d}" for r in range(size))
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


_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])

def peak_mib():
    # VmHWM is reset by exec; ru_maxrss is not (it would report the parent's size)
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

from k3diag.parse import nccl_log
mode, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
c0 = time.process_time()
if mode == "path":
    result = nccl_log.parse_path(path)
else:
    from pathlib import Path
    from k3diag.evidence import Evidence
    item = Evidence(name=path, path=Path(path))
    result = nccl_log.parse_stream(item.iter_lines(), path)
elapsed = time.perf_counter() - t0
cpu = time.process_time() - c0
print(json.dumps({"elapsed": elapsed, "cpu": cpu, "maxrss_mib": peak_mib(), "runs": len(result.runs),
                  "connections": sum(len(r.connections) for r in result.runs),
                  "nranks": [r.nranks for r in result.runs][:4], "warnings": result.warnings[:3]}))
"""


def _baseline_rss() -> float:
    code = ("import k3diag.parse.nccl_log\n"
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0])")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[1])
        return int(out.stdout.strip()) / 1024
    except (subprocess.CalledProcessError, ValueError, IndexError):
        return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--path", type=Path, default=None, help="where to write the log (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--skip-stream", action="store_true", help="only time the file path, not the line iterator")
    args = parser.parse_args(argv)

    repo = Path(__file__).resolve().parents[1]
    tmpdir = None
    if args.path is None:
        tmpdir = tempfile.mkdtemp(prefix="k3diag-bench-")
        path = Path(tmpdir) / "nccl-big.log"
    else:
        path = args.path
    try:
        t0 = time.perf_counter()
        info = generate(path, args.size_mb, nodes=args.nodes)
        gen_s = time.perf_counter() - t0
        size_mb = info["bytes"] / (1024 * 1024)
        print(f"generated {size_mb:.0f} MiB ({info['jobs']} job(s) x {info['ranks_per_job']} ranks, "
              f"{info['via_lines']} connection lines) in {gen_s:.1f} s: {path}")

        with open(path, "rb") as handle:  # warm the page cache for both contenders
            while handle.read(1 << 24):
                pass
        grep = shutil.which("grep")
        grep_s = grep_cpu = None
        if grep:
            before = os.times()
            t0 = time.perf_counter()
            out = subprocess.run([grep, "-c", " via ", str(path)], capture_output=True, text=True)
            grep_s = time.perf_counter() - t0
            after = os.times()
            grep_cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
            print(f"grep -c ' via ': {out.stdout.strip()} lines in {grep_s:.2f} s wall, {grep_cpu:.2f} s CPU")

        modes = ["path"] + ([] if args.skip_stream else ["stream"])
        base = _baseline_rss()
        for mode in modes:
            out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path), str(repo)],
                                 capture_output=True, text=True, cwd=repo)
            if out.returncode != 0:
                print(out.stderr)
                return 1
            stats = json.loads(out.stdout.strip().splitlines()[-1])
            rate = size_mb / stats["elapsed"]
            ratio = f", {stats['elapsed'] / grep_s:.1f}x grep's wall time" if grep_s else ""
            if grep_cpu:
                ratio += f", {stats['cpu'] / grep_cpu:.1f}x grep's CPU time ({stats['cpu']:.2f} s CPU)"
            label = "parse_path (file)" if mode == "path" else "parse_stream (Evidence.iter_lines)"
            print(f"{label}: {stats['elapsed']:.2f} s = {rate:.0f} MiB/s{ratio}; peak RSS {stats['maxrss_mib']:.0f} MiB "
                  f"(interpreter + imports alone {base:.0f} MiB); runs {stats['runs']}, "
                  f"connections kept {stats['connections']}, nranks {stats['nranks']}")
            for warning in stats["warnings"]:
                print(f"  warning: {warning}")
        return 0
    finally:
        if not args.keep:
            if tmpdir:
                shutil.rmtree(tmpdir, ignore_errors=True)
            elif args.path and args.path.exists():
                args.path.unlink()


if __name__ == "__main__":
    raise SystemExit(main())
