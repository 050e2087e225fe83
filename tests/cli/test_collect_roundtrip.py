"""`k3diag collect` on a fake host (fixture sysfs root + fake tools on PATH), then `analyze` of the bundle:
live and offline take the same path, so both reports must tell the same story."""

from __future__ import annotations

import json
import re
import shlex
import stat
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()


def _tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_host(tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    server = fixtures_dir / "pcie" / "dual-socket-server"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    topo = shlex.quote(str(server / "nvidia-smi-topo-m.txt"))
    lspci_vv = shlex.quote(str(server / "lspci-vv.txt"))
    lspci_tv = shlex.quote(str(server / "lspci-tv.txt"))
    # nvidia-smi answers `topo -m` from the fixture and fails like a real driverless box otherwise
    _tool(bin_dir, "nvidia-smi", f'if [ "$1 $2" = "topo -m" ]; then /bin/cat {topo}; exit 0; fi\n'
                                 'echo "unsupported in this fake" >&2; exit 6\n')
    _tool(bin_dir, "lspci", f'case "$*" in *-t*) /bin/cat {lspci_tv};; *) /bin/cat {lspci_vv};; esac\n')
    monkeypatch.setenv("PATH", str(bin_dir))
    return fixtures_dir / "sysfs" / "dual_socket_switch"


def _ids(report: dict) -> set[str]:
    return {f["id"] for f in report["findings"]}


def test_collect_then_analyze_tells_the_same_story(tmp_path: Path, fake_host: Path) -> None:
    bundle = tmp_path / "node.tar.gz"
    collected = runner.invoke(app, ["collect", "-o", str(bundle), "--root", str(fake_host)])
    assert collected.exit_code == 0, collected.output
    assert f"wrote {bundle}" in collected.output
    # counted in words, not 'evidence item(s), 4 GPU(s) seen'
    assert re.search(rf"wrote {re.escape(str(bundle))}: \d+ evidence items, 4 GPUs seen", collected.output), (
        collected.output)
    with tarfile.open(bundle) as archive:
        manifest_member = next(name for name in archive.getnames() if name.endswith("manifest.json"))
        manifest = json.load(archive.extractfile(manifest_member))
    commands = {entry.get("command") for entry in manifest["evidence"]}
    assert "nvidia-smi topo -m" in commands and "lspci -vv" in commands
    failed = [e for e in manifest["evidence"] if e.get("command") == "nvidia-smi -q"]
    assert failed and failed[0]["exit_code"] == 6 and "exited with code 6" in failed[0]["error"]

    live = json.loads(runner.invoke(app, ["topo", "--root", str(fake_host), "--json"]).stdout)
    offline = json.loads(runner.invoke(app, ["analyze", str(bundle), "--json"]).stdout)
    for report in (live, offline):
        assert [g["bus_id"] for g in report["topology"]["gpus"]] == [
            "0000:03:00.0", "0000:04:00.0", "0000:41:00.0", "0000:81:00.0"]
        assert {"pcie-link-width-limited-by-hop", "acs-redirect-between-gpus", "gpu-pair-sys"} <= _ids(report)
        assert report["recommendations"]["tp_groups"]
    assert _ids(live) == _ids(offline)
    assert live["recommendations"]["tp_groups"] == offline["recommendations"]["tp_groups"]


def test_collect_redacted_bundle_keeps_topology(tmp_path: Path, fake_host: Path) -> None:
    bundle = tmp_path / "redacted.tar.gz"
    result = runner.invoke(app, ["collect", "-o", str(bundle), "--root", str(fake_host), "--redact"])
    assert result.exit_code == 0, result.output
    assert "redacted:" in result.output
    report = json.loads(runner.invoke(app, ["analyze", str(bundle), "--json"]).stdout)
    # PCI bus ids carry the topology and are never redacted
    assert [g["bus_id"] for g in report["topology"]["gpus"]][:2] == ["0000:03:00.0", "0000:04:00.0"]
    assert "acs-redirect-between-gpus" in _ids(report)


def test_collect_to_unwritable_place_is_one_sentence(tmp_path: Path, fake_host: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["collect", "-o", str(blocker / "sub" / "b.tar.gz"), "--root", str(fake_host)])
    assert result.exit_code == 64
    assert result.output == (f"k3diag collect: could not write {blocker / 'sub' / 'b.tar.gz'}: {blocker} is a file, "
                             "not a folder; check the path\n")
    assert "Traceback" not in result.output
