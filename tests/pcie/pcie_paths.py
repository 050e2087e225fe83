from __future__ import annotations

from pathlib import Path

from k3diag.parse.text import Section

REPO = Path(__file__).resolve().parents[2]
PCIE = REPO / "fixtures" / "pcie"
SYSFS = REPO / "fixtures" / "sysfs"


def section(name: str) -> Section:
    return Section(text=(PCIE / name).read_text(), first_line=1)
