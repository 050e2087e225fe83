"""Throughput and peak memory of `k3diag fleet` over many node reports.

    python benchmarks/bench_fleet.py                   # 1,000 then 10,000 reports
    python benchmarks/bench_fleet.py --nodes 2000 --workers 2

The reports are what `k3diag check --format json` writes on each node (built once from the fixture bundle
fixtures/bundles/good-8x-h100-nvlink, about 100 KB each), copied under node names n00001..., with one node
in a hundred carrying a GPU trained to x8 and one in two hundred another driver. Reported per size, in one
run: the baseline (this process reading and `json.loads`-ing every file one after another, the least any
reader must do), `k3diag fleet DIR --json` wall time and nodes per second, the ratio to the baseline, and
peak RSS of the fleet process and of its largest worker (ru_maxrss of a child that runs the CLI). Memory
grows with the node count only by the compact per-node shapes; compare the two sizes' parent RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RUNNER = r"""
import resource, sys
from k3diag.cli import app
try:
    app(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
child_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
sys.stderr.write(f"RSS {self_kib} {child_kib}\n")
"""


def _template() -> dict:
    from k3diag.fleet.check_run import CheckRequest, perform_check

    outcome = perform_check(CheckRequest(from_paths=[REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"], node="__NODE__"))
    return outcome["report"]


def _variants(report: dict) -> dict[str, str]:
    normal = json.dumps(report)
    narrow = json.loads(normal)
    narrow["topology"]["gpus"][3]["pcie"]["width_current"] = 8
    narrow["shape"]["features"]["GPU3 PCIe width"] = "x8 of x16"
    narrow["shape"]["evidence"]["GPU3 PCIe width"] = "__NODE__:evidence/nvml-readings.json: GPU3 nvmlDeviceGetCurrPcieLinkWidth=8"
    narrow["shape"]["state"] = "fail"
    driver = json.loads(normal)
    driver["host"]["driver_version"] = "550.54.15"
    driver["shape"]["features"]["driver version"] = "550.54.15"
    return {"normal": normal, "narrow": json.dumps(narrow), "driver": json.dumps(driver)}


def _write(folder: Path, count: int, variants: dict[str, str]) -> tuple[int, int]:
    narrow = driver = 0
    for number in range(1, count + 1):
        name = f"n{number:05d}"
        if number % 100 == 37:
            kind, narrow = "narrow", narrow + 1
        elif number % 200 == 11:
            kind, driver = "driver", driver + 1
        else:
            kind = "normal"
        (folder / f"{name}.json").write_text(variants[kind].replace("__NODE__", name))
    return narrow, driver


def _baseline(folder: Path) -> float:
    started = time.perf_counter()
    for path in sorted(folder.iterdir()):
        json.loads(path.read_bytes())
    return time.perf_counter() - started


def _fleet(folder: Path, workers: int) -> tuple[float, int, int, dict]:
    out = folder.parent / "fleet.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.perf_counter()
    with out.open("w") as handle:
        result = subprocess.run([sys.executable, "-c", RUNNER, "fleet", str(folder), "--json", "--workers", str(workers)],
                                stdout=handle, stderr=subprocess.PIPE, text=True, env=env, timeout=3600)
    elapsed = time.perf_counter() - started
    line = next(l for l in result.stderr.splitlines() if l.startswith("RSS "))
    _, self_kib, child_kib = line.split()
    return elapsed, int(self_kib), int(child_kib), json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,10000", help="comma-separated fleet sizes")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--keep", action="store_true", help="keep the generated reports")
    args = parser.parse_args()
    variants = _variants(_template())
    print(f"report size: {len(variants['normal']) / 1024:.0f} KiB; workers: {args.workers}; cpus: {os.cpu_count()}")
    print(f"{'nodes':>7} {'baseline s':>10} {'fleet s':>8} {'nodes/s':>8} {'x baseline':>10} "
          f"{'parent RSS MiB':>14} {'worker RSS MiB':>14}  outliers found/expected")
    for count in (int(n) for n in args.nodes.split(",")):
        root = Path(tempfile.mkdtemp(prefix="k3diag-bench-fleet-"))
        folder = root / "reports"
        folder.mkdir()
        try:
            narrow, driver = _write(folder, count, variants)
            _baseline(folder)  # warm the page cache so both sides read from memory
            base = _baseline(folder)
            elapsed, parent_kib, worker_kib, report = _fleet(folder, args.workers)
            found = report["totals"]["outliers"]
            assert report["totals"]["nodes"] == count, report["totals"]
            print(f"{count:>7} {base:>10.2f} {elapsed:>8.2f} {count / elapsed:>8.0f} {elapsed / base:>10.2f} "
                  f"{parent_kib / 1024:>14.0f} {worker_kib / 1024:>14.0f}  {found}/{narrow + driver}")
        finally:
            if args.keep:
                print(f"kept {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
