"""The textfile written by `check --prom-file`, read by Debian's real prometheus-node-exporter on 127.0.0.1
and by `promtool check metrics` (Debian's prometheus package)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"
GOOD = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"
EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMTOOL = shutil.which("promtool")


def _write(folder: Path, bundle: Path) -> Path:
    target = folder / "k3diag.prom"
    result = CliRunner().invoke(app, ["check", "--from", str(bundle), "--node", "gpu004", "--format", "prom",
                                      "--prom-file", str(target)])
    assert result.exit_code in (0, 2), result.output
    return target


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
@pytest.mark.parametrize("bundle", [BAD, GOOD], ids=["bad", "good"])
def test_promtool_accepts_the_file(tmp_path: Path, bundle: Path) -> None:
    target = _write(tmp_path, bundle)
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=target.read_text(), capture_output=True,
                            text=True, timeout=60)
    # promtool prints lint problems (naming, units, duplicate HELP) and exits 1 on any of them.
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                return response.read().decode()
        except OSError as exc:
            last = exc
            time.sleep(0.2)
    raise AssertionError(f"node_exporter did not answer on 127.0.0.1:{port}: {last}")


@pytest.mark.skipif(EXPORTER is None, reason="prometheus-node-exporter not installed (apt-get install prometheus-node-exporter)")
def test_node_exporter_serves_the_k3diag_metrics_without_scrape_error(tmp_path: Path) -> None:
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    _write(textfile, BAD)
    port = _free_port()
    process = subprocess.Popen(
        [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
         "--collector.textfile", f"--collector.textfile.directory={textfile}"],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        body = _scrape(port)
        lines = body.splitlines()
        assert "node_textfile_scrape_error 0" in lines
        assert 'k3diag_finding{id="pcie-width-below-max",severity="fail",subject="GPU2"} 1' in lines
        assert 'k3diag_gpu_pcie_link_width{bus_id="0000:3d:00.0",gpu="2"} 8' in lines
        assert "k3diag_check_success 0" in lines
        assert any(line.startswith('node_textfile_mtime_seconds{file=') and "k3diag.prom" in line for line in lines)
        # The next run replaces the file atomically; the exporter sees the new values and still no error.
        _write(textfile, GOOD)
        body = _scrape(port)
        assert "k3diag_check_success 1" in body.splitlines()
        assert "node_textfile_scrape_error 0" in body.splitlines()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
