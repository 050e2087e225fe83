"""A file of many `nvidia-smi topo -m` outputs (`pdsh -a nvidia-smi topo -m > fleet.txt`) holds every parsed
section until its machines are built, so what one section keeps is what the file costs per host."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_cli import topo_matrix  # noqa: E402

from k3diag.parse import nvidia_topo_matrix  # noqa: E402
from k3diag.parse.text import Section  # noqa: E402

SECTIONS = 300


def test_a_parsed_8_gpu_section_keeps_under_18_kb() -> None:
    text = topo_matrix(8)
    sections = [Section(text=text, first_line=1 + index * text.count("\n")) for index in range(SECTIONS)]
    nvidia_topo_matrix.parse(sections[0], "warm-up")  # compiled patterns and caches are not the sections'
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        results = [nvidia_topo_matrix.parse(section, "fleet.txt") for section in sections]
        gc.collect()
        per_section = (tracemalloc.get_traced_memory()[0] - before) / SECTIONS
    finally:
        tracemalloc.stop()
    # what the user would see is unchanged: every section read whole
    assert all(len(result.rows) == len(results[0].rows) >= 8 and not result.warnings for result in results)
    assert results[0].cells[0].value in nvidia_topo_matrix.TOPOLOGY_CODES or results[0].cells[0].value.startswith("NV")
    assert per_section < 18_000, f"{per_section:,.0f} bytes a section (about 23,000 before the cells were slotted)"
