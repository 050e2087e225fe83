"""Whole-process timings of the k3diag CLI against baselines run in the same process, alternating.

    python benchmarks/bench_cli.py                      # every case, 5 runs each
    python benchmarks/bench_cli.py --only lspci,topo --repeat 7
    python benchmarks/bench_cli.py --devices 20000 --gpus 8,72,144,288

Every figure is the median wall time of `--repeat` runs of a separate process (start-up, reading,
parsing, analysis, rendering: what a user waits for), its median CPU time (user + system: steadier
than wall time on a shared machine), with its peak RSS (the largest of the runs, via GNU time),
next to a baseline timed in the same loop, run for run, so that the load of the machine weighs on
both alike. Cases (the targets of issue 13 in brackets):

  startup  `k3diag --version`, and `k3diag analyze SMALL` on a terminal (a pty), piped, and `--json`,
           against `python -c "import typer"` [each at most 2x]
  lspci    `k3diag analyze LSPCI --json` of a generated 5,000-device `lspci -vv` (25 MB), against
           `grep -c LnkSta` and `wc -l` of the same file [at most 30x grep]
  topo     `k3diag analyze TOPO --json` of generated 8-, 72- and 144-GPU NVLink `nvidia-smi topo -m`
           outputs, each against the 8-GPU one [72: at most 4x, 144: at most 20x]
  audit    `k3diag audit EXAMPLE --model k3` of the packaged example bundle, against
           `python -c "import typer"` [at most 4x]
  sections (only when asked: `--only sections`) one file of many 8-GPU `nvidia-smi topo -m` sections,
           each naming no host (one machine read many times) or each after a prompt naming its own
           host (`pdsh -a nvidia-smi topo -m` of a fleet: one machine per section), N and 10 N sections
           (`--sections N`, default 1,000 and 500 hosts), the larger against the smaller [at most 12x:
           linear; grouping the sections was quadratic, 10,000 sections took minutes]; and N / 10 and N
           copies of a real 8-GPU `nvidia-smi -q` (80 KB each, fixtures/nvidia), told apart only by GPU
           UUID [at most 12x]

The generated inputs are written to a temporary folder (`--keep DIR` keeps them). NCCL logs have
their own benchmark, `bench_nccl_log.py`.
"""

from __future__ import annotations

import argparse
import os
import pty
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_lspci import generate as generate_lspci  # noqa: E402

EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"
SMALL = REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"
PYTHON = sys.executable
TIMEOUT_S = 600

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing a single PCIe switch
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

"""


def topo_matrix(gpus: int) -> str:
    """`nvidia-smi topo -m` of `gpus` GPUs in one NVLink domain (NV18 between every pair, as on an
    NVL72 rack seen as one system), one NIC per four GPUs under the same switch as them (PIX), two
    sockets. Tab-separated, as nvidia-smi prints it, with its legend and NIC legend."""
    nics = max(gpus // 4, 1)
    names = [f"GPU{i}" for i in range(gpus)] + [f"NIC{k}" for k in range(nics)]
    half = max(gpus // 2, 1)

    def socket(name: str) -> int:
        index = int(name[3:])
        return (index if name.startswith("GPU") else 4 * index) // half

    def path(a: str, b: str) -> str:
        if a == b:
            return " X "
        if a.startswith("GPU") and b.startswith("GPU"):
            return "NV18"
        gpu, nic = (a, b) if a.startswith("GPU") else (b, a)
        if nic.startswith("NIC") and gpu.startswith("GPU") and int(gpu[3:]) // 4 == int(nic[3:]):
            return "PIX"
        return "NODE" if socket(a) == socket(b) else "SYS"

    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for row in names:
        cells = [path(row, column) for column in names]
        if row.startswith("GPU"):
            node = socket(row)
            cells += [f"{node * 64}-{node * 64 + 63}", str(node), "N/A"]
        lines.append(row + "\t" + "\t".join(cells))
    legend = "\n".join(f"  NIC{k}: mlx5_{k}" for k in range(nics))
    return "\n".join(lines) + "\n" + LEGEND + legend + "\n"


@dataclass
class Timing:
    label: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)  # user + system seconds of the process
    peak_rss_kib: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.walls)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpus)


# GNU time reports the peak RSS of a process it starts itself: `ru_maxrss` from `wait4` here would
# carry this benchmark's own peak across the exec (it holds the generated inputs).
TIME = shutil.which("time") if Path("/usr/bin/time").exists() else None


# What an installed k3diag has: compiled modules. A shell with PYTHONDONTWRITEBYTECODE set (some CI images and
# sandboxes set it) would otherwise recompile every module of a fresh checkout on every run, ~150 ms of start-up.
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(REPO)}


def compile_project() -> None:
    import compileall

    compileall.compile_dir(str(REPO / "k3diag"), quiet=1)


def run_once(argv: list[str], timing: Timing, tty: bool = False) -> None:
    """One process: wall time from fork to exit, and its peak RSS (ru_maxrss, KiB on Linux)."""
    env = ENV
    rss_file = None
    if TIME is not None:
        rss_file = tempfile.NamedTemporaryFile(prefix="k3diag-bench-rss-", delete=False)
        rss_file.close()
        argv = [TIME, "-f", "%M", "-o", rss_file.name, *argv]
    if tty:
        # A pty as stdout and stderr, the way a person runs it; its output is read and dropped.
        master, slave = pty.openpty()
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=env, cwd=REPO)
        os.close(slave)
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the child closed its end
                break
        os.close(master)
    else:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                   env=env, cwd=REPO)
        assert process.stdout is not None
        while process.stdout.read(1 << 20):
            pass  # read it as a pipe reader would
        process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)
    timing.walls.append(time.perf_counter() - started)
    timing.cpus.append(usage.ru_utime + usage.ru_stime)
    if rss_file is not None:
        text = Path(rss_file.name).read_text().strip().splitlines()
        os.unlink(rss_file.name)
        peak = int(text[-1]) if text and text[-1].isdigit() else 0
    else:
        peak = usage.ru_maxrss
    timing.peak_rss_kib = max(timing.peak_rss_kib, peak)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1, 2, 3):
        raise SystemExit(f"{' '.join(argv)} exited {process.returncode}")


def alternate(cases: dict[str, tuple[list[str], bool]], repeat: int) -> dict[str, Timing]:
    """Run every case once per round, `repeat` rounds, so slow and fast moments fall on all of them."""
    timings = {label: Timing(label) for label in cases}
    for argv, tty in cases.values():  # warm the page cache and the .pyc files
        run_once(argv, Timing("warm-up"), tty)
    for _ in range(repeat):
        for label, (argv, tty) in cases.items():
            run_once(argv, timings[label], tty)
    return timings


def report(title: str, timings: dict[str, Timing], baseline: str, targets: dict[str, float]) -> None:
    print(f"\n{title}")
    base, base_cpu = timings[baseline].median, max(timings[baseline].median_cpu, 1e-3)
    print(f"  {'case':56s} {'wall':>8s} {'ratio':>7s} {'target':>10s} {'cpu':>8s} {'ratio':>7s} {'peak RSS':>9s}")
    for label, timing in timings.items():
        ratio = timing.median / base
        target = targets.get(label)
        mark = "" if target is None else (f"{target:g}x " + ("ok" if ratio <= target else "MISSED"))
        print(f"  {label[:56]:56s} {timing.median * 1000:6.0f}ms {ratio:6.1f}x {mark:>10s} "
              f"{timing.median_cpu * 1000:6.0f}ms {timing.median_cpu / base_cpu:6.1f}x "
              f"{timing.peak_rss_kib / 1024:6.0f} MiB")


def k3diag(*args: str) -> list[str]:
    return [PYTHON, "-m", "k3diag", *args]


def bench_startup(repeat: int) -> None:
    cases = {
        'python -c "import typer"': ([PYTHON, "-c", "import typer"], False),
        "k3diag --version": (k3diag("--version"), False),
        f"k3diag analyze {SMALL.name} (terminal)": (k3diag("analyze", str(SMALL)), True),
        f"k3diag analyze {SMALL.name} | cat": (k3diag("analyze", str(SMALL)), False),
        f"k3diag analyze {SMALL.name} --json": (k3diag("analyze", str(SMALL), "--json"), False),
    }
    labels = list(cases)
    report("start-up", alternate(cases, repeat), labels[0], {label: 2.0 for label in labels[1:]})


def bench_lspci(repeat: int, devices: int, folder: Path) -> None:
    path = folder / f"lspci-vv-{devices}.txt"
    path.write_text(generate_lspci(devices))
    size = path.stat().st_size / 1e6
    grep = shutil.which("grep") or "grep"
    wc = shutil.which("wc") or "wc"
    cases = {
        "grep -c LnkSta": ([grep, "-c", "LnkSta", str(path)], False),
        "wc -l": ([wc, "-l", str(path)], False),
        f"k3diag analyze ({devices} devices, {size:.0f} MB) --json": (k3diag("analyze", str(path), "--json"), False),
    }
    labels = list(cases)
    report(f"lspci -vv, {devices} devices", alternate(cases, repeat), labels[0], {labels[2]: 30.0})


def bench_topo(repeat: int, sizes: list[int], folder: Path) -> None:
    cases = {}
    for gpus in sizes:
        path = folder / f"topo-m-{gpus}gpu-nvlink.txt"
        path.write_text(topo_matrix(gpus))
        cases[f"k3diag analyze topo -m, {gpus} GPUs --json"] = (k3diag("analyze", str(path), "--json"), False)
    labels = list(cases)
    targets = {label: (4.0 if gpus == 72 else 20.0) for label, gpus in zip(labels, sizes) if gpus in (72, 144)}
    report(f"nvidia-smi topo -m, NVLink, {sizes} GPUs (against {sizes[0]})", alternate(cases, repeat), labels[0],
           targets)


def bench_audit(repeat: int) -> None:
    cases = {
        'python -c "import typer"': ([PYTHON, "-c", "import typer"], False),
        "k3diag audit EXAMPLE --model k3": (k3diag("audit", str(EXAMPLE), "--model", "k3"), False),
    }
    labels = list(cases)
    report("audit", alternate(cases, repeat), labels[0], {labels[1]: 4.0})


def topo_sections(count: int, hosts: bool) -> str:
    """`count` 8-GPU `topo -m` outputs in one file; with `hosts`, each after a prompt naming its own host."""
    section = topo_matrix(8)
    if not hosts:
        return section * count
    return "".join(f"root@gpu{index:05d}:~# nvidia-smi topo -m\n{section}" for index in range(count))


SMI_Q = REPO / "fixtures" / "nvidia" / "smi-q-8xh100-565-multi-gpu-fabric.txt"


def query_sections(count: int) -> str:
    """`count` copies of an 8-GPU `nvidia-smi -q`, each machine's GPU UUIDs made its own."""
    text = SMI_Q.read_text()
    return "".join(re.sub(r"GPU-[0-9a-f]{8}", f"GPU-{index:08x}", text) for index in range(count))


def bench_sections(repeat: int, count: int, folder: Path) -> None:
    for hosts, smaller in ((False, count), (True, max(1, count // 2))):
        cases = {}
        for sections in (smaller, smaller * 10):
            path = folder / f"topo-m-{sections}-sections{'-hosts' if hosts else ''}.txt"
            path.write_text(topo_sections(sections, hosts))
            what = "hosts" if hosts else "sections naming no host"
            cases[f"k3diag analyze, {sections:,} {what} --json"] = (k3diag("analyze", str(path), "--json"), False)
        labels = list(cases)
        report(f"one file of many topo -m outputs ({'a host each' if hosts else 'no host'})",
               alternate(cases, repeat), labels[0], {labels[1]: 12.0})
    cases = {}
    for sections in (max(1, count // 10), max(1, count // 10) * 10):
        path = folder / f"smi-q-{sections}-sections.txt"
        path.write_text(query_sections(sections))
        cases[f"k3diag analyze, {sections:,} nvidia-smi -q --json"] = (k3diag("analyze", str(path), "--json"), False)
    labels = list(cases)
    report("one file of many nvidia-smi -q outputs (GPU UUIDs differ)", alternate(cases, repeat), labels[0],
           {labels[1]: 12.0})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="startup,lspci,topo,audit", help="comma-separated cases")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each, alternating; the median is shown")
    parser.add_argument("--devices", type=int, default=5000, help="devices in the generated lspci -vv")
    parser.add_argument("--gpus", default="8,72,144", help="GPU counts of the generated topo -m (first: the baseline)")
    parser.add_argument("--sections", type=int, default=1000, help="topo -m sections of the smaller file of `sections`")
    parser.add_argument("--keep", type=Path, default=None, help="write the generated inputs here and keep them")
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",")}
    folder = args.keep or Path(tempfile.mkdtemp(prefix="k3diag-bench-cli-"))
    folder.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f}; {args.repeat} runs of each, alternating; medians")
    compile_project()
    try:
        if "startup" in only:
            bench_startup(args.repeat)
        if "lspci" in only:
            bench_lspci(args.repeat, args.devices, folder)
        if "topo" in only:
            bench_topo(args.repeat, [int(n) for n in args.gpus.split(",")], folder)
        if "audit" in only:
            bench_audit(args.repeat)
        if "sections" in only:
            bench_sections(args.repeat, args.sections, folder)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
