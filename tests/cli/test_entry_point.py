"""The installed `k3diag` console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3diag import __version__


def _k3diag() -> list[str]:
    """The console script installed beside this interpreter (the venv's bin), else the module."""
    script = Path(sys.executable).parent / "k3diag"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "k3diag"]


def test_version() -> None:
    done = subprocess.run([*_k3diag(), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == f"k3diag {__version__}"


def test_topo_json_on_fixture_root_without_gpu(tmp_path: Path, fixtures_dir: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path), NO_COLOR="1")
    done = subprocess.run(
        [*_k3diag(), "topo", "--root", str(fixtures_dir / "hostroot" / "dual_socket"), "--json"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    report = json.loads(done.stdout)
    assert done.returncode == 3  # a host without a GPU cannot be assessed, never passes
    assert report["findings"][0]["id"] == "no-gpu-found"
    assert done.stderr == ""


@pytest.mark.parametrize("no_color", ["1", None])
def test_piped_output_has_no_escape_codes(tmp_path: Path, fixtures_dir: Path, no_color: str | None) -> None:
    env = dict(os.environ, PATH=str(tmp_path))
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = no_color
    done = subprocess.run(
        [*_k3diag(), "topo", "--root", str(fixtures_dir / "hostroot" / "dual_socket")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert "\x1b[" not in done.stdout
    assert "Verdict [" in done.stdout


def _on_a_terminal(args: list[str], env: dict) -> str:
    """stdout on a pseudo-terminal, as a user's shell has it; what the command wrote there."""
    import pty

    leader, follower = pty.openpty()
    try:
        done = subprocess.run([*_k3diag(), *args], stdout=follower, stderr=subprocess.PIPE, timeout=120, env=env)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the other side is closed and everything was read
                break
            if not data:
                break
            chunks.append(data)
        assert done.returncode in (0, 1, 2, 3), done.stderr
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminals as Linux has them")
def test_term_dumb_gets_no_colour_on_a_terminal() -> None:
    example = Path(__file__).resolve().parents[2] / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    coloured = _on_a_terminal(["analyze", str(example)], dict(env, TERM="xterm-256color"))
    assert "\x1b[" in coloured and "Verdict [" in coloured  # a real terminal gets colour
    dumb = _on_a_terminal(["analyze", str(example)], dict(env, TERM="dumb"))
    assert "Verdict [" in dumb and "\x1b[" not in dumb
