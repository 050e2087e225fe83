"""detect's command patterns (which format a prompt line's command prints) are compiled on first use, like every
pattern on the start-up path (`parse.lazy_re`): importing detect compiles none of them, and each command still
names its format."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from k3diag.parse.detect import command_format

ROOT = Path(__file__).resolve().parents[2]
_COUNT = """
import re
compiled = []
original = re._compile
def counting(pattern, flags):
    compiled.append(pattern)
    return original(pattern, flags)
re._compile = counting
import k3diag.parse.detect as detect
at_import = list(compiled)
# the sources, read without compiling (a lazy pattern's `.pattern` would compile it)
sources = {p.pattern if isinstance(p, re.Pattern) else p.__dict__["_source"][0] for p, _ in detect._COMMAND_FORMATS}
print(len(sources), sum(1 for pattern in at_import if pattern in sources))
"""


def test_importing_detect_compiles_no_command_pattern() -> None:
    out = subprocess.run([sys.executable, "-c", _COUNT], capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.stdout.split() == ["12", "0"]  # 12 patterns, none compiled


def test_each_command_names_its_format() -> None:
    assert [command_format(command) for command in (
        "nvidia-smi topo -m", "nvidia-smi.exe topo --p2p r", "nvidia-smi --query-gpu=index,pci.bus_id --format=csv",
        "nvidia-smi -q", "sudo lspci -tv", "sudo lspci -vvv", "rocm-smi --showtopo", "amd-smi topology",
        "./rocm-bandwidth-test -a", "./nvbandwidth -t 0", "./P2PBandwidthLatencyTest", "./all_reduce_perf -g 8",
        "uptime", None)] == [
        "nvidia-smi-topo-matrix", "nvidia-smi-topo-p2p", "nvidia-smi-query-gpu-csv", "nvidia-smi-query", "lspci-tv",
        "lspci-vv", "rocm-smi-showtopo", "amd-smi-topology", "rocm-bandwidth-test", "nvbandwidth",
        "p2p-bandwidth-latency-test", "nccl-tests", None, None]
