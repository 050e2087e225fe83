"""Start-up cost of the CLI against a bare `import typer`, measured in the same run.

    python benchmarks/bench_startup.py [--repeat 10] [--topo FILE]

Prints the median wall time of each command and its ratio to the baseline. The target
is a ratio under 2 for `k3diag --version` and for `k3diag analyze` of one topology file.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def median_seconds(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    default_topo = next(iter(sorted((REPO / "fixtures" / "nvidia").glob("topo*"))), None)
    parser.add_argument("--topo", type=Path, default=default_topo)
    args = parser.parse_args()
    python = sys.executable
    baseline = median_seconds([python, "-c", "import typer"], args.repeat)
    cases = {"k3diag --version": [python, "-m", "k3diag", "--version"]}
    if args.topo is not None:
        cases[f"k3diag analyze {args.topo.name}"] = [python, "-m", "k3diag", "analyze", str(args.topo)]
        cases[f"k3diag analyze {args.topo.name} --json"] = [python, "-m", "k3diag", "analyze", str(args.topo), "--json"]
    print(f"baseline  python -c 'import typer': {baseline * 1000:7.1f} ms")
    for label, argv in cases.items():
        seconds = median_seconds(argv, args.repeat)
        print(f"{label:45s} {seconds * 1000:7.1f} ms  ratio {seconds / baseline:4.2f}")


if __name__ == "__main__":
    main()
