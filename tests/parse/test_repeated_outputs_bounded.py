"""Fast at any size: an output repeated thousands of times (a command run in a loop, a kernel log of many boots,
a list pasted twice) costs time and memory in proportion to its size, and reads as what it is.

Each case was found by growing every fixture to 0.25 and 1 MB (its middle lines repeated, or the whole file)
and flagging growth worse than linear (docs/performance.md, 2026-12-04 21:15)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

from k3diag.analyze.planner import seen_gpus
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.join.merge_pci import platform_state
from k3diag.model.source import MAX_SOURCES_KEPT
from k3diag.parse import p2p_bandwidth
from k3diag.parse.text import Section

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


def test_a_device_list_repeated_lists_each_gpu_once() -> None:
    # Before: every `Device: N` line added a GPU, and the peer-access matrix was sized by them: a paste whose
    # device lines repeat 1,600 times made a 13,000 x 13,000 matrix (33 s for 1 MB, and quadratic memory).
    lines = (FIXTURES / "bench" / "p2pbw-8x2080ti-cannot-access-head.txt").read_text().split("\n")
    text = "\n".join(lines[:2] + lines[2:10] * 1600 + lines[10:])
    result = p2p_bandwidth.parse(Section(text, 1), "p2p.txt")
    bench = result.benchmarks[0]
    assert [gpu.index for gpu in bench.gpus] == list(range(8))
    assert bench.gpus[4].bus_id == "0000:84:00.0"
    assert len(bench.can_access) == 8 and all(len(row) == 8 for row in bench.can_access)
    assert bench.can_access[0][1] is False
    assert any(warning.startswith("12,792 device lines list a device index listed before (lines 11, 12, 13, 14, 15 "
                                  "and 12,787 more): a second run pasted without its banner?")
               for warning in result.warnings), result.warnings


class _Pair:
    def __init__(self, known: bool) -> None:
        self.path = "NV4" if known else None
        self.measured = False


def _seen_by_recount(pairs: dict, gpus: list[int]) -> list[int]:
    """The rule as it was first written (each GPU's unknown pairs recounted over every pair, each round)."""
    kept = list(gpus)
    while True:
        unknown = {i: sum(1 for (a, b), pq in pairs.items() if pq.path is None and not pq.measured and i in (a, b)
                          and a in kept and b in kept) for i in kept}
        worst = max(kept, key=lambda i: (unknown[i], i), default=None)
        if worst is None or unknown[worst] == 0:
            return kept
        kept.remove(worst)


def test_the_gpus_seen_are_those_the_recount_finds() -> None:
    rng = random.Random(7)
    for _ in range(300):
        count = rng.randint(0, 12)
        gpus = rng.sample(range(16), count)
        share = rng.random()
        pairs = {(a, b): _Pair(rng.random() > share) for a in gpus for b in gpus if a < b}
        if pairs and rng.random() < 0.2:
            pairs[next(iter(pairs))[::-1]] = _Pair(False)  # a pair given both ways round
        assert seen_gpus(pairs, gpus) == _seen_by_recount(pairs, gpus)


def test_hundreds_of_fabric_blocks_without_paths_are_judged_in_seconds() -> None:
    # `nvidia-smi -q -d FABRIC` blocks pasted without their GPU headers: each block is one GPU, none with a
    # known path. Choosing the GPUs whose every pair is known was O(n^4): 300 blocks did not finish in a minute.
    block = (FIXTURES / "fabric" / "query-fabric-in-progress-b200-gpu-operator2511.txt").read_text()
    script = ("import sys; from k3diag.cli import main; sys.argv = ['k3diag', 'analyze', '-']; main()")
    done = subprocess.run([sys.executable, "-c", script], input=block * 300, capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert "The NVLink fabric is not ready: the fabric registration of GPU0, GPU1, GPU2" in done.stdout
    assert "300 GPUs" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_kernel_log_of_many_boots_keeps_a_bounded_evidence_list() -> None:
    # Each boot prints its IOMMU lines; every line was checked against all those kept before (27 s for 1 MB).
    boot = (FIXTURES / "sysfs" / "dual_socket_switch" / "var" / "log" / "dmesg").read_text()
    machine = build_machine([Evidence(name="kern.log", data=(boot * 5000).encode())])
    iommu = platform_state(machine).iommu
    assert iommu.default_domain == "passthrough"
    assert iommu.enabled is True
    assert len(iommu.sources) == MAX_SOURCES_KEPT
    assert iommu.sources[0].line == 2 and "IOMMU performance counters supported" in iommu.sources[0].text
    assert len(set(iommu.sources)) == len(iommu.sources)


def test_more_gpus_than_any_machine_holds_are_not_planned_for() -> None:
    # 4,200 headerless fabric blocks (each read as a GPU) in a 1 MB paste: the planner weighed 8.8 million
    # pairs (over a minute, gigabytes). Past 576 GPUs (the largest NVLink domain announced) it says why it
    # proposes no grouping.
    from k3diag.analyze.pipeline import analyze_machine
    from k3diag.render.terminal import make_console, render
    import io

    block = (FIXTURES / "fabric" / "query-fabric-insufficient-resources-azhpc506.txt").read_text()
    machine = build_machine([Evidence(name="fabric.txt", data=(block * 1200).encode())])
    analysis = analyze_machine(machine)
    assert analysis.recommendation is None
    assert [note.message for note in machine.notes if note.subject == "planner"] == [
        "1,200 GPUs on one machine is more than any machine or NVLink domain holds (at most 576 are planned "
        "for): no TP grouping is proposed; were several machines' outputs read as one, or GPU blocks repeated?"]
    shown = io.StringIO()
    render(analysis, make_console(shown), "k3diag", details=False)
    assert "Machine: 1,200 GPUs" in shown.getvalue()
    assert "(and 1,199 more like it)" in shown.getvalue()


def test_a_thousand_inputs_are_counted_with_separators(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from k3diag.cli import app

    topo = (FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt").read_bytes()
    paths = []
    for number in range(1200):
        path = tmp_path / f"topo-{number}.txt"
        path.write_bytes(topo)
        paths.append(str(path))
    junk = tmp_path / "notes.txt"
    junk.write_text("nothing any tool prints\n")
    out = CliRunner().invoke(app, ["analyze", *paths, str(junk)]).stdout
    assert out.startswith("k3diag analyze: 1,201 inputs\n")
    assert "Inputs: 1,200 read, 1 not used" in out
    assert "Machine: 8 GPUs" in out  # the same output given 1,200 times is one machine
