"""A small fleet built from the real fixture bundles: six H100 nodes of one kind, one of them with a GPU
trained to x8 and one with another driver, plus a dual-socket L40S node of another kind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOOD = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"


def make_node(folder: Path, hostname: str, width_gpu3: int = 16, driver: str | None = None,
              source: Path = GOOD) -> Path:
    """A copy of a fixture bundle under another host name, optionally with GPU3 at another width or
    another driver version (the two edits an odd node of a fleet most often shows)."""
    out = folder / hostname
    shutil.copytree(source, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["host"] = {"hostname": hostname}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    readings_path = out / "evidence" / "nvml-readings.json"
    readings = json.loads(readings_path.read_text())
    if source == GOOD:
        readings["devices"][3]["pcie"]["width_current"] = width_gpu3
    if driver is not None:
        readings["driver_version"] = driver
    readings_path.write_text(json.dumps(readings, indent=1))
    return out


@pytest.fixture(scope="session")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fleet") / "bundles"
    folder.mkdir()
    for number in range(1, 7):
        name = f"gpu{number:03d}"
        make_node(folder, name, width_gpu3=8 if number == 4 else 16, driver="550.54.15" if number == 6 else None)
    make_node(folder, "l40s-01", source=BAD)
    return folder


@pytest.fixture
def node_maker():
    """`make_node` for tests that build their own small fleet."""
    return make_node
