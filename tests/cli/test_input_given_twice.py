"""A file given twice (`k3diag analyze a.log a.log`, `dir dir/lspci.txt`, a bundle named twice) is read once:
nothing in the report counts twice, and the input says it came again. Before, every kind of record doubled:
'2 communicators' for one NCCL log, two benchmark runs, two P2P readings per GPU pair, twice the PCIe devices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
runner = CliRunner()


def _json(*paths: Path) -> dict:
    result = runner.invoke(app, ["analyze", "--json", *map(str, paths)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return json.loads(result.output)


@pytest.mark.parametrize("name, field", [
    ("nccl/nccl-2.2x-8x4090-graph-gpu-paths-two-sockets.log", "nccl_runs"),
    ("bench/nccl-tests-2nodes-a100-header-nccl-info.txt", "benchmarks"),
    ("amd/rocm-bandwidth-test-2.6.0-2x-mi50-no-p2p.txt", "benchmarks"),
    ("pcie/grep-acsctl-tabs-nccl-629.txt", "pci"),
])
def test_a_file_given_twice_counts_once(name: str, field: str) -> None:
    once, twice = _json(FIXTURES / name), _json(FIXTURES / name, FIXTURES / name)
    assert len(twice[field]) == len(once[field]) > 0
    assert [f["id"] for f in twice["findings"]] == [f["id"] for f in once["findings"]]
    assert twice["exit_code"] == once["exit_code"]
    assert [record["path"] for record in twice["inputs"]] == [str(FIXTURES / name)]
    assert f"{FIXTURES / name} was given twice: it was read once" in twice["inputs"][0]["warnings"]


def test_an_amd_topology_given_twice_has_one_reading_per_pair() -> None:
    name = FIXTURES / "amd" / "amd-smi-topology-2x-rx7900xtx-access-disabled-legend.txt"
    once, twice = _json(name), _json(name, name)
    assert len(twice["topology"]["p2p"]) == len(once["topology"]["p2p"]) == 2


def test_a_folder_and_a_file_in_it_read_the_file_once() -> None:
    folder = FIXTURES / "pcie" / "dual-socket-server"
    result = runner.invoke(app, ["analyze", str(folder), str(folder / "lspci-vv.txt")])
    assert "Inputs: 3 read, 0 not used, 1 with warnings" in result.output
    assert f"{folder / 'lspci-vv.txt'} was given twice: it was read once" in result.output
    once, twice = _json(folder), _json(folder, folder / "lspci-vv.txt")
    assert len(twice["pci"]) == len(once["pci"]) and len(twice["topology"]["gpus"]) == len(once["topology"]["gpus"])


def test_a_bundle_named_twice_is_one_machine_read_once() -> None:
    bundle = FIXTURES / "bundles" / "good-8x-h100-nvlink"
    once, twice = _json(bundle), _json(bundle, Path(str(bundle) + "/"))
    assert "machines" not in twice or len(twice["machines"]) == 1
    assert len(twice["topology"]["gpus"]) == len(once["topology"]["gpus"]) == 8
    assert len(twice["nccl_runs"]) == len(once["nccl_runs"]) and len(twice["benchmarks"]) == len(once["benchmarks"])
    bundle_record = next(record for record in twice["inputs"] if record["format"] == "bundle")
    assert any(w.endswith("(given twice): it was read once") or w.endswith("was given twice: it was read once")
               for w in bundle_record["warnings"])


def test_a_link_to_a_file_is_the_file(tmp_path: Path) -> None:
    log = FIXTURES / "nccl" / "nccl-2.2x-8x4090-graph-gpu-paths-two-sockets.log"
    link = tmp_path / "nccl.log"
    link.symlink_to(log)
    report = _json(log, link)
    assert len(report["nccl_runs"]) == 1
    assert f"{link} is {log} again (given twice): it was read once" in report["inputs"][0]["warnings"]


def test_a_gpu_tool_s_name_in_a_file_name_is_not_a_failed_gpu_tool() -> None:
    # the plain `nvidia-smi` table given twice: its file name holds `nvidia-smi`, and the sentence that says it
    # came twice quotes the name; before, that sentence was taken for a collector's "`nvidia-smi` failed" and
    # added a `no-gpu-found` finding the same file given once does not have
    name = FIXTURES / "nvidia" / "nvidia-smi-390-2x-m40-table-nvidia-docker-759.txt"
    once, twice = _json(name), _json(name, name)
    assert [f["id"] for f in once["findings"]] == [f["id"] for f in twice["findings"]] == []
    assert twice["exit_code"] == once["exit_code"] == 3
