"""Issue 12's "Why", one test per bullet, on the real fixtures that showed it; and the exit codes CI gates on."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from k3diag.analyze.pipeline import analyze_machine
from k3diag.analyze.verdict import exit_code_for
from k3diag.inputs import load_machine
from k3diag.render.plain import Out
from k3diag.render.terminal import render

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


def _analyze(*paths: Path):
    machine, _ = load_machine(list(paths))
    analysis = analyze_machine(machine)
    return analysis, exit_code_for(machine, analysis.findings)


def _terminal(analysis, details: bool = False) -> str:
    buffer = io.StringIO()
    render(analysis, Out(buffer, color=False), "k3diag analyze", details=details)
    return buffer.getvalue()


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3diag", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


# -- unknown is not slow --------------------------------------------------------------------------------


def test_a_p2p_matrix_alone_says_the_paths_are_unknown_and_how_to_see_them() -> None:
    analysis, code = _analyze(FIXTURES / "nvidia" / "topo-p2p-r-h100-8x-ok.txt")
    text = analysis.verdict.text
    assert "None" not in text and "slow" not in text
    assert "the paths between them are not in these inputs" in text and "`nvidia-smi topo -m`" in text
    assert analysis.verdict.level == "unknown" and code == 0
    assert "Verdict [UNKNOWN]:" in _terminal(analysis)


def test_topo_mp_hides_nvlink_so_it_never_reads_as_pcie_bound() -> None:
    analysis, code = _analyze(FIXTURES / "nvidia" / "topo-mp-4x-a100-juwels-booster-percent-prompt.txt")
    text = analysis.verdict.text
    assert "PCIe-bound is unknown" in text and "slow" not in text and "prefer replicas" not in text
    assert "`nvidia-smi topo -m`" in text and code == 0
    assert not [f for f in analysis.findings if f.id == "gpu-pair-sys"]  # SYS from -mp may hide an NVLink


def test_a_cut_matrix_is_advised_on_what_was_seen_and_says_what_is_missing() -> None:
    analysis, _ = _analyze(FIXTURES / "nvidia" / "topo-m-8gpu-mlx4-old-driver-cut.txt")
    text = analysis.verdict.text
    assert text.startswith("Of the GPUs whose links to each other were all seen (GPU0, GPU1, GPU2, GPU3, GPU4 and GPU5): serve "
                           "with TP2 on {0,1} {2,3} {4,5}")
    assert "Not in these inputs: the paths of 3 GPU pairs" in text


# -- a log without an inventory leads with what it found --------------------------------------------------


def test_an_rccl_log_alone_leads_with_its_finding_not_with_no_gpu() -> None:
    analysis, code = _analyze(FIXTURES / "nccl" / "rccl-mi250x-warn-missing-iommu.log")
    text = analysis.verdict.text
    assert "No GPU was found" not in text
    lead = next(f for f in analysis.findings if f.key == analysis.verdict.lead)
    assert text.startswith(lead.title) and "no GPU inventory" in text and code == 1


# -- design properties do not warn -------------------------------------------------------------------------


def test_a_healthy_dgx1_exits_0_and_its_nvlink_ring_makes_tp8_good() -> None:
    analysis, code = _analyze(FIXTURES / "nvidia" / "topo-m-dgx1-v100-mlx5-tabs.txt")
    assert code == 0 and analysis.verdict.level == "good" and analysis.verdict.best_tp == 8
    assert "all-reduce rings run over NVLink" in analysis.verdict.text
    [crossing] = [f for f in analysis.findings if f.id == "gpu-pair-sys"]
    assert crossing.severity == "info" and crossing.kind == "design" and len(crossing.data["pairs"]) == 12


def test_a_healthy_dual_socket_8_gpu_pcie_box_exits_0_with_one_advisory() -> None:
    analysis, code = _analyze(FIXTURES / "scenarios" / "topo-m-8gpu-pcie-switches-quda-669.txt")
    assert code == 0
    assert analysis.verdict.text.startswith("Serve with TP4 on {0,1,2,3} {4,5,6,7}; TP8 would cross SYS")
    assert analysis.verdict.text.endswith("(no problems found)")
    assert [f.id for f in analysis.findings if f.id == "gpu-pair-sys"] == ["gpu-pair-sys"]
    done = _cli("analyze", str(FIXTURES / "scenarios" / "topo-m-8gpu-pcie-switches-quda-669.txt"))
    assert done.returncode == 0, done.stdout


def test_an_nvswitch_box_gets_no_pair_talk() -> None:
    analysis, code = _analyze(FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt")
    assert code == 0 and "every GPU pair is joined by NV18" in analysis.verdict.text
    assert "GPU0" not in analysis.verdict.text and analysis.recommendation.comparison is None


# -- TP advice for real boxes ---------------------------------------------------------------------------------


def test_three_gpus_with_an_nvlink_pair_get_tp2_and_a_replica() -> None:
    analysis, code = _analyze(FIXTURES / "nvidia" / "topo-m-3x-a6000-nv4-pair-node-prompt.txt")
    assert analysis.verdict.text.startswith("Serve with TP2 on {0,1}, GPU2 as a replica (data parallelism).")
    assert analysis.verdict.plan == {"tp": 2, "groups": [[0, 1]], "replicas": [2], "path": "NV4"}
    out = _terminal(analysis)
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 numactl --cpunodebind=1 --membind=1   # TP2 {0,1}" in out
    assert "CUDA_VISIBLE_DEVICES=2 numactl --cpunodebind=1 --membind=1   # replica on GPU2 (TP1)" in out


def test_a_tp_size_that_cannot_be_planned_says_why() -> None:
    done = _cli("analyze", str(FIXTURES / "nvidia" / "topo-m-3x-a6000-nv4-pair-node-prompt.txt"), "--tp", "16")
    assert "TP16 cannot be planned: only 3 GPUs are known." in done.stdout


# -- a report that fits a screen --------------------------------------------------------------------------------


def test_the_8_gpu_report_fits_a_screen_without_box_drawing_or_rich() -> None:
    bundle = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"
    probe = ("import sys, runpy; sys.argv = ['k3diag', 'analyze', %r]\n"
             "try:\n    runpy.run_module('k3diag', run_name='__main__')\n"
             "except SystemExit as exit:\n    print('RICH' if 'rich' in sys.modules else 'NO-RICH'); raise\n") % str(bundle)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = done.stdout.splitlines()
    assert lines[-1] == "NO-RICH" and done.returncode == 2
    assert len(lines) <= 60, len(lines)
    assert not any(ch in done.stdout for ch in "┏━┃│└─╇") and "\x1b[" not in done.stdout
    assert lines[1].startswith("Verdict [FAIL]: GPU2 link runs at x8 of x16 (fix first).")
    assert "--details" in lines[-2]
    details = _cli("analyze", str(bundle), "--details").stdout
    assert "Paths between GPUs and NICs (best first: NV# (NVLink)" in details and "P2P atomics (OK" not in details


# -- exit codes -------------------------------------------------------------------------------------------------


def test_a_down_trained_link_exits_2() -> None:
    done = _cli("analyze", str(REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"), "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 2 and report["exit_code"] == 2 and report["verdict"]["status"] == "fail"
    assert any(f["id"] == "pcie-width-below-max" and f["severity"] == "fail" for f in report["findings"])


def test_a_missing_path_and_a_bad_option_exit_64() -> None:
    missing = _cli("analyze", str(FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt"), "/nonexistent/topo.txt")
    assert missing.returncode == 64 and "/nonexistent/topo.txt" in missing.stderr
    assert _cli("analyze", "--fail-on", "sometimes", "x").returncode == 64
    assert _cli("analyze", "--no-such-option").returncode == 64


def test_a_bundle_collected_without_a_gpu_never_passes(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    bundle = tmp_path / "nogpu.tar.gz"
    collected = _cli("collect", "-o", str(bundle), "--timeout", "5", env={"PATH": str(empty)})
    assert bundle.is_file(), collected.stderr
    done = _cli("analyze", str(bundle))
    assert done.returncode == 3, done.stdout
    assert "Verdict [UNKNOWN]: No GPU was found, so this machine cannot be assessed" in done.stdout
    audit = _cli("audit", str(bundle), "--model", "k3")
    assert audit.returncode == 3
    assert "UNKNOWN: the machine cannot be assessed" in audit.stdout and "Usable" not in audit.stdout
