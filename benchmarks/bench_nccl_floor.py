"""What the cheapest passes a Python reader of an NCCL log cannot avoid cost, against `grep -c ' via '`.

    python benchmarks/bench_nccl_floor.py                        # a 100 MiB rank-block log (generated)
    python benchmarks/bench_nccl_floor.py --log /tmp/nccl-bench/nccl-300mb-blocks.log

Issue 13 asks for `k3diag analyze LOG --json` within 5x grep's wall time on a 2-core machine. With both
cores busy that leaves 10x grep of CPU time for the whole command (start-up and the JSON included). This
prints, for the same file in one process (best of `--repeat`), the CPU time of passes that do no parsing at
all, each as a multiple of grep's: reading the file in 8 MiB chunks; finding each thread's run of lines
(the one C-level regex match per run the bulk path uses); splitting the runs into lines; one C-level
`map` over the lines (`startswith`), and one `partition` map (what telling `Channel` lines apart and
cutting them at ` : ` costs); and a bare Python `for` loop over the lines doing nothing. Whatever reads
the connections line by line pays at least the first four; a reader in Python bytecode pays the last too.
Each pass is timed one 8 MiB chunk at a time, the chunk dropped before the next is read, as the parser does.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from itertools import repeat
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_nccl_log import generate  # noqa: E402

CHUNK = 8 << 20
RUN_RE = re.compile(rb"([^\n]*? NCCL INFO )[^\n]*\n(?:\1[^\n]*\n)*")  # k3diag.parse.nccl.patterns.SAME_PREFIX_RUN_RE


def iter_chunks(path: Path):
    """The file in 8 MiB pieces cut after a newline, one at a time."""
    carry = b""
    with path.open("rb") as handle:
        while True:
            data = handle.read(CHUNK)
            if not data:
                break
            data = carry + data
            cut = data.rfind(b"\n") + 1
            yield data[:cut]
            carry = data[cut:]
    if carry:
        yield carry + b"\n"


def cpu(step, repeat_count: int) -> float:
    best = float("inf")
    for _ in range(repeat_count):
        start = time.process_time()
        step()
        best = min(best, time.process_time() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", type=Path, default=None, help="an NCCL log (default: generate 100 MiB)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    made = None
    path = args.log
    if path is None:
        made = Path(tempfile.mkdtemp(prefix="k3diag-floor-")) / "nccl-100mb-blocks.log"
        generate(made, 100, coll_per_rank=2, interleave=False)
        path = made
    try:
        for _ in iter_chunks(path):  # warms the page cache
            pass
        grep_cpu = float("inf")
        for _ in range(args.repeat):
            before = os.times()
            with open(path.with_suffix(".grep"), "wb") as out:  # not /dev/null: grep stops at the first match
                subprocess.run(["grep", "-c", " via ", str(path)], stdout=out, check=False)
            after = os.times()
            grep_cpu = min(grep_cpu, (after.children_user - before.children_user)
                           + (after.children_system - before.children_system))
        path.with_suffix(".grep").unlink(missing_ok=True)
        grep_cpu = max(grep_cpu, 0.01)

        # One 8 MiB chunk at a time, as the parser holds it: each step is timed on the chunk's runs and lines
        # (made by the steps before it), and the chunk is dropped before the next one is read. Holding every
        # chunk, run and line of a 300 MiB log at once (this script's first version) overstated the floor.
        def find_runs(chunk: bytes) -> list[tuple[bytes, bytes]]:
            runs = []
            pos, end = 0, len(chunk)
            match = RUN_RE.match
            while pos < end:
                found = match(chunk, pos)
                if found is None:
                    newline = chunk.find(b"\n", pos)
                    pos = end if newline < 0 else newline + 1
                    continue
                runs.append((found.group(1), chunk[pos:found.end()]))
                pos = found.end()
            return runs

        def split_runs(runs: list[tuple[bytes, bytes]]) -> list[list[bytes]]:
            return [block[len(prefix):].replace(b"\n" + prefix, b"\n").split(b"\n") for prefix, block in runs]

        def one_map(lines: list[list[bytes]]) -> None:
            for group in lines:
                list(map(bytes.startswith, group, repeat(b"Chan")))

        def partition_map(lines: list[list[bytes]]) -> None:
            for group in lines:
                list(map(bytes.partition, group, repeat(b" : ")))

        def bare_loop(lines: list[list[bytes]]) -> None:
            for group in lines:
                for _line in group:
                    pass

        names = ["read in 8 MiB chunks", "find each thread's runs", "split runs into lines", "one startswith map",
                 "one partition map", "bare Python loop over lines"]
        best = [float("inf")] * len(names)
        count = 0
        for _ in range(args.repeat):
            spent = [0.0] * len(names)
            count = 0
            clock = time.process_time
            started = clock()
            for chunk in iter_chunks(path):
                spent[0] += clock() - started
                at = clock()
                runs = find_runs(chunk)
                spent[1] += clock() - at
                at = clock()
                lines = split_runs(runs)
                spent[2] += clock() - at
                count += sum(map(len, lines))
                for index, step in ((3, one_map), (4, partition_map), (5, bare_loop)):
                    at = clock()
                    step(lines)
                    spent[index] += clock() - at
                del runs, lines, chunk
                started = clock()
            best = [min(b, t) for b, t in zip(best, spent)]
        size = path.stat().st_size
        print(f"log: {path} ({size / 2**20:.0f} MiB); load average {os.getloadavg()[0]:.1f}")
        print(f"grep -c ' via ' CPU: {grep_cpu:.3f} s; 5x grep wall on 2 cores allows at most {10 * grep_cpu:.2f} s "
              f"of CPU for the whole command")
        total = 0.0
        for name, seconds in zip(names, best):
            total += seconds
            print(f"  {name:<30} {seconds:7.3f} s  {seconds / grep_cpu:5.1f}x grep  (sum so far {total / grep_cpu:5.1f}x)")
        print(f"lines: {count:,}; the sum is {total / grep_cpu:.1f}x grep's CPU before any line is parsed "
              f"(budget: 10x, start-up and JSON included)")
        return 0
    finally:
        if made is not None:
            made.unlink(missing_ok=True)
            made.parent.rmdir()


if __name__ == "__main__":
    raise SystemExit(main())
