"""benchmarks/bench_live.py on a host without a GPU: the fact-by-fact comparison on real reports, and
the whole script end to end with an nvidia-smi on PATH that replays recorded outputs."""

from __future__ import annotations

import copy
import importlib.util
import json
import shlex
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_live", REPO / "benchmarks" / "bench_live.py")
bench_live = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_live)  # type: ignore[union-attr]


def _report(*paths: Path) -> dict:
    return json.loads(CliRunner().invoke(app, ["analyze", *map(str, paths), "--json"]).stdout)


def test_identical_reports_have_no_mismatch(fixtures_dir: Path) -> None:
    report = _report(fixtures_dir / "nvml" / "h100-sxm-8x-nvswitch-gpu3-link-down.json")
    assert bench_live.compare_reports(report, copy.deepcopy(report)) == ([], [])


def test_every_differing_fact_is_named(fixtures_dir: Path) -> None:
    live = _report(fixtures_dir / "nvml" / "h100-sxm-8x-nvswitch-gpu3-link-down.json")
    texts = copy.deepcopy(live)
    texts["topology"]["gpus"][1]["pcie"]["width_max"] = 8
    texts["topology"]["gpus"][2]["pcie"]["gen_current"] = 1
    texts["topology"]["gpus"][4]["bus_id"] = texts["topology"]["gpus"][4]["bus_id"].upper().replace("0000:", "00000000:")
    link = next(l for l in texts["topology"]["links"] if (l["a"], l["b"]) == ("GPU0", "GPU3"))
    link["path"] = "SYS"
    texts["topology"]["p2p"] = [p for p in texts["topology"]["p2p"] if (p["src"], p["dst"]) != ("GPU5", "GPU6")]
    mismatches, volatile = bench_live.compare_reports(live, texts)
    assert "GPU1 pcie.width_max: NVML 16, nvidia-smi 8" in mismatches
    assert any(m.startswith("GPU0-GPU3 path: NVML \"NV") and m.endswith('nvidia-smi "SYS"') for m in mismatches)
    assert any(m.startswith("GPU5->GPU6 p2p ") and m.endswith("nvidia-smi null") for m in mismatches)
    assert not any(m.startswith("GPU4 bus_id") for m in mismatches)  # one address, two spellings
    assert [v.split(":")[0] for v in volatile] == ["GPU2 pcie.gen_current"]


def _fake_nvidia_smi(bin_dir: Path, fixtures_dir: Path) -> None:
    topo = shlex.quote(str(fixtures_dir / "nvidia" / "topo-m-h100-nv18-narrow.txt"))
    p2p = shlex.quote(str(fixtures_dir / "nvidia" / "topo-p2p-r-h100-8x-ok.txt"))
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n"
                    f'case "$*" in "topo -m") /bin/cat {topo};; "topo -p2p r") /bin/cat {p2p};; '
                    '*) echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver"; exit 9;; esac\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_whole_script_logs_and_fails_when_nvml_misses_what_nvidia_smi_prints(
        tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_nvidia_smi(bin_dir, fixtures_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out = tmp_path / "live"
    code = bench_live.main(["--out", str(out), "--repeat", "1", "--no-tests", "--no-probe"])
    log = (out / "bench_live.log").read_text()
    # no NVML here: topo fell back to nvidia-smi's texts, and a check of nvidia-smi against itself proves nothing
    assert code == 1
    assert "MISMATCH the live report did not come from NVML (" in log
    assert "so this compares nvidia-smi with itself" in log
    assert "nvidia-smi topo -m: exit 0" in log
    assert (out / "nvidia-smi-topo-m.txt").read_text().startswith((fixtures_dir / "nvidia" /
                                                                  "topo-m-h100-nv18-narrow.txt").read_text()[:20])
    assert "## timing, median of 1: k3diag topo" in log
    assert json.loads((out / "saved.json").read_text())["schema"] == "k3diag.report/1"


def test_without_nvidia_smi_it_says_so(tmp_path: Path) -> None:
    code = bench_live.main(["--out", str(tmp_path / "o")], which=lambda name: None)
    assert code == 3
    assert (tmp_path / "o" / "bench_live.log").exists()
