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


def chunks(path: Path) -> list[bytes]:
    out = []
    carry = b""
    with path.open("rb") as handle:
        while True:
            data = handle.read(CHUNK)
            if not data:
                break
            data = carry + data
            cut = data.rfind(b"\n") + 1
            out.append(data[:cut])
            carry = data[cut:]
    if carry:
        out.append(carry + b"\n")
    return out


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
        data = chunks(path)  # also warms the page cache
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

        runs: list[tuple[bytes, bytes]] = []

        def find_runs() -> None:
            runs.clear()
            for chunk in data:
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

        lines: list[list[bytes]] = []

        def split_runs() -> None:
            lines.clear()
            for prefix, block in runs:
                lines.append(block[len(prefix):].replace(b"\n" + prefix, b"\n").split(b"\n"))

        def one_map() -> None:
            for group in lines:
                list(map(bytes.startswith, group, repeat(b"Chan")))

        def partition_map() -> None:
            for group in lines:
                list(map(bytes.partition, group, repeat(b" : ")))

        def bare_loop() -> None:
            for group in lines:
                for _line in group:
                    pass

        steps = [("read in 8 MiB chunks", lambda: chunks(path)), ("find each thread's runs", find_runs),
                 ("split runs into lines", split_runs), ("one startswith map", one_map),
                 ("one partition map", partition_map), ("bare Python loop over lines", bare_loop)]
        size = path.stat().st_size
        count = sum(len(group) for group in lines) if lines else 0
        print(f"log: {path} ({size / 2**20:.0f} MiB); load average {os.getloadavg()[0]:.1f}")
        print(f"grep -c ' via ' CPU: {grep_cpu:.3f} s; 5x grep wall on 2 cores allows at most {10 * grep_cpu:.2f} s "
              f"of CPU for the whole command")
        total = 0.0
        for name, step in steps:
            seconds = cpu(step, args.repeat)
            total += seconds
            print(f"  {name:<30} {seconds:7.3f} s  {seconds / grep_cpu:5.1f}x grep  (sum so far {total / grep_cpu:5.1f}x)")
        count = sum(len(group) for group in lines)
        print(f"lines: {count:,}; the sum is {total / grep_cpu:.1f}x grep's CPU before any line is parsed "
              f"(budget: 10x, start-up and JSON included)")
        return 0
    finally:
        if made is not None:
            made.unlink(missing_ok=True)
            made.parent.rmdir()


if __name__ == "__main__":
    raise SystemExit(main())
