"""Time of the `lspci -vv` parser on a generated 5,000-device output, against `grep -c LnkSta`.

    python benchmarks/bench_lspci.py                  # 5,000 devices
    python benchmarks/bench_lspci.py --devices 20000
    python benchmarks/bench_lspci.py --keep --path /tmp/lspci-big.txt

The file is built from a real block: the two root-port blocks of a Dell server in
`fixtures/pcie/lspci-vvv-dell-root-ports-acs-gpud.txt` (LnkCap/LnkSta/LnkCtl2, AER, ACS, bus
ranges), cloned with the bus id rewritten (domains 0000.., buses 00-ff, devices 00-1f) so
every block is a distinct device, as `lspci -D -vv` prints a very large host. Reported in one
run, on the same file, after one warm-up read so both read from the page cache: the time of
`grep -c LnkSta`, the time of `k3diag.parse.lspci.parse` (text normalization included, file
read excluded), the parser's time per device and the ratio. The two alternate, `--repeat`
rounds of grep then the parser, so a change of the machine's speed weighs on both: the best of
each against the other, and the median and range of the rounds' own ratios.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from k3diag.parse import lspci  # noqa: E402
from k3diag.parse.text import Section  # noqa: E402

TEMPLATE = REPO / "fixtures" / "pcie" / "lspci-vvv-dell-root-ports-acs-gpud.txt"
_HEADER_RE = re.compile(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] ", re.M)


def template_blocks() -> list[str]:
    text = TEMPLATE.read_text()
    starts = [match.start() for match in _HEADER_RE.finditer(text)] + [len(text)]
    return [text[a:b].strip("\n") for a, b in zip(starts, starts[1:])]


def generate(devices: int) -> str:
    blocks = template_blocks()
    out = []
    for index in range(devices):
        block = blocks[index % len(blocks)]
        device, bus_index = index % 32, index // 32
        domain, bus = divmod(bus_index, 256)
        bdf = f"{domain:04x}:{bus:02x}:{device:02x}.0"
        out.append(bdf + block[len("00:0c.0"):])
    return "\n\n".join(out) + "\n"


def time_grep_once(grep: str, path: Path) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run([grep, "-c", "LnkSta", str(path)], capture_output=True, text=True, check=False, timeout=300)
    return time.perf_counter() - started, int(done.stdout.strip() or 0)


def time_parser_once(text: str, name: str) -> tuple[float, int]:
    started = time.perf_counter()
    result = lspci.parse(Section(text, 1), name)
    seconds = time.perf_counter() - started
    devices = sum(1 for device in result.devices if device.link is not None and device.link.source is not None)
    result = None  # freed here, not inside the next timed call
    return seconds, devices


def alternate(path: Path, repeat: int) -> tuple[list[float], list[float], int, int]:
    """grep and the parser one after the other, `repeat` rounds: this VM's speed changes from one minute to
    the next (1.5x), so each round's ratio compares two runs made at the same speed."""
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep is not on PATH")
    text = path.read_text()
    grep_times, parse_times = [], []
    grep_count = devices = 0
    for _ in range(repeat):
        seconds, grep_count = time_grep_once(grep, path)
        grep_times.append(seconds)
        seconds, devices = time_parser_once(text, path.name)
        parse_times.append(seconds)
    return grep_times, parse_times, grep_count, devices


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    parser.add_argument("--path", type=Path, default=None, help="where to write the generated file")
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    args = parser.parse_args()
    workdir = None
    if args.path is None:
        workdir = tempfile.mkdtemp(prefix="k3diag-bench-lspci-")
        path = Path(workdir) / "lspci-vv.txt"
    else:
        path = args.path
    path.write_text(generate(args.devices))
    try:
        path.read_bytes()  # warm the page cache for both contenders
        grep_times, parse_times, grep_count, parsed = alternate(path, args.repeat)
        grep_s, parse_s = min(grep_times), min(parse_times)
        ratios = sorted(p / g for p, g in zip(parse_times, grep_times))
        size_mb = path.stat().st_size / 1e6
        print(f"file: {path} ({args.devices} devices, {size_mb:.1f} MB); {args.repeat} rounds, grep then the parser")
        print(f"grep -c LnkSta : {grep_s * 1000:8.1f} ms  ({grep_count} lines: LnkSta and LnkSta2)")
        print(f"k3diag lspci   : {parse_s * 1000:8.1f} ms  ({parsed} devices with a LnkSta, "
              f"{parse_s / max(args.devices, 1) * 1e6:.1f} us/device)")
        print(f"ratio          : {parse_s / grep_s:8.1f}x grep (best against best)")
        print(f"round ratios   : median {statistics.median(ratios):.1f}x, from {ratios[0]:.1f}x to {ratios[-1]:.1f}x")
        if parsed != args.devices:
            print(f"warning: {args.devices} devices generated, the parser read a LnkSta on {parsed}")
    finally:
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
