"""`k3diag collect` against tools that misbehave the way a broken GPU host makes them: one hangs and ignores
SIGTERM, one leaves a `setsid` child holding its stdout, one prints a gigabyte. Real executables on PATH,
the console script in a real subprocess; each test asserts wall time, memory, the bundle's contents, and
that no process of theirs is left running and no temporary file is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_ROOT = REPO / "fixtures" / "sysfs" / "dual_socket_switch"

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists() or sys.platform != "linux",
                                reason="finding leftover processes needs Linux /proc")


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def chaos(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    """PATH with the misbehaving tools, and an environment whose token every descendant inherits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Hangs and ignores SIGTERM (a GPU fallen off the bus); `sleep` inherits the ignored signal.
    _tool(bin_dir, "nvidia-smi", "trap '' TERM\nsleep 300\n")
    # Prints its answer, exits, and leaves a daemon in its own session holding stdout and stderr open.
    _tool(bin_dir, "lspci", "setsid sleep 300 &\necho '00:00.0 Host bridge: Intel Corporation Device 09a2'\nexit 0\n")
    # Prints a gigabyte (of NULs: what is kept is judged binary, so the test measures collection, not the
    # time the format detector takes over 64 MiB of text, which benchmarks/ measures).
    _tool(bin_dir, "amd-smi", "head -c 1073741824 /dev/zero\n")
    # Hangs ignoring SIGTERM, in a loop of children.
    _tool(bin_dir, "rocm-smi", "trap '' TERM\nwhile :; do sleep 1; done\n")
    for name in ("setsid", "sleep", "yes", "head"):
        real = subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True, text=True).stdout.strip()
        if real:
            os.symlink(real, bin_dir / name)
    script = tmp_path / "k3diag"
    # The console script, reporting its own peak memory when it ends.
    script.write_text(
        f"#!{sys.executable}\n"
        "import atexit, os, resource, sys\n"
        "atexit.register(lambda: open(os.environ['RSS_FILE'], 'w').write(\n"
        "    str(int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]))))\n"
        "from k3diag.cli import main\n"
        "sys.exit(main())\n")
    script.chmod(0o755)
    token = uuid.uuid4().hex
    env = dict(os.environ, PATH=str(bin_dir), PYTHONPATH=str(REPO), NO_COLOR="1", CHAOS_TOKEN=token,
               RSS_FILE=str(tmp_path / "rss"))
    return script, env, token


def _left_running(token: str) -> list[str]:
    needle = f"CHAOS_TOKEN={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return found


def _hung_nvidia_smi_running(token: str) -> bool:
    return any("nvidia-smi" in c for c in _left_running(token))


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as archive:
        return {m.name.split("/", 1)[1]: archive.extractfile(m).read() for m in archive if m.isfile()}


def test_hung_flooding_and_setsid_tools_are_stopped_and_nothing_is_left(chaos, tmp_path: Path) -> None:
    script, env, token = chaos
    out = tmp_path / "node.tar.gz"
    started = time.monotonic()
    done = subprocess.run([str(script), "collect", "-o", str(out), "--root", str(FAKE_ROOT), "--timeout", "2"],
                          capture_output=True, timeout=120, env=env)
    wall = time.monotonic() - started
    try:
        assert done.returncode == 0, done.stderr.decode()
        assert wall < 30, wall  # two 2 s timeouts, two 0.5 s graces, start-up; never the 300 s the tools ask for
        rss_mib = int((tmp_path / "rss").read_text()) / 1024
        assert rss_mib < 800, rss_mib  # a gigabyte printed costs the 64 MiB kept, not the gigabyte
        members = _members(out)
        manifest = json.loads(members["manifest.json"])
        entries = {e["name"]: e for e in manifest["evidence"]}
        hung = entries["nvidia-smi-topo-m.txt"]
        assert hung["timed_out"] is True
        assert "did not finish within 2 s and was stopped" in hung["error"]
        assert "stopped_at_deadline" not in hung["meta"]  # its own limit: it hung
        # The tool exited; its setsid child held the pipe: the output it printed is kept, the child killed.
        lspci = entries["lspci-vv.txt"]
        assert lspci["exit_code"] == 0 and lspci["error"] is None
        assert members[lspci["member"]] == b"00:00.0 Host bridge: Intel Corporation Device 09a2\n"
        flood = entries["amd-smi-topology.json"]
        assert flood["meta"]["output_cut_at_bytes"] == 64 * 1024 * 1024
        assert flood["error"] == ("`amd-smi topology --json` printed more than 64 MiB; the first 64 MiB were kept "
                                  "and the command was stopped")
        assert len(members[flood["member"]]) == 64 * 1024 * 1024
        assert entries["rocm-smi-showtopo.txt"]["timed_out"] is True
        assert list(tmp_path.glob(".k3diag-*")) == []
    finally:
        left = _left_running(token)
    assert left == [], left


def test_the_deadline_bounds_the_whole_collection(chaos, tmp_path: Path) -> None:
    script, env, token = chaos
    out = tmp_path / "node.tar.gz"
    started = time.monotonic()
    done = subprocess.run([str(script), "collect", "-o", str(out), "--root", str(FAKE_ROOT), "--timeout", "20",
                           "--deadline", "3"], capture_output=True, timeout=120, env=env)
    wall = time.monotonic() - started
    try:
        assert done.returncode == 0, done.stderr.decode()
        assert wall < 20, wall  # not 20 s per hung tool: 3 s for all of them
        entries = {e["name"]: e for e in json.loads(_members(out)["manifest.json"])["evidence"]}
        hung = entries["nvidia-smi-topo-m.txt"]
        assert hung["timed_out"] is True
        assert "when the collection's deadline of 3 s was reached" in hung["error"]
        assert hung["meta"]["stopped_at_deadline"] is True  # the run's deadline: not a hang (`command-timed-out`)
        skipped = entries["rocm-smi-showtopo.txt"]
        assert skipped["meta"] == {"skipped": "deadline"}
        assert skipped["error"] == ("`rocm-smi --showtopo` was not run: the collection's deadline of 3 s had passed; "
                                    "run it by hand or give a longer --deadline")
        assert manifest_deadline(out) == 3.0
    finally:
        left = _left_running(token)
    assert left == [], left


def manifest_deadline(bundle: Path) -> float:
    return json.loads(_members(bundle)["manifest.json"])["deadline_s"]


def _foreground_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_sigterm_and_ctrl_c_stop_every_child_and_leave_no_partial_bundle(chaos, tmp_path: Path, signum: int, code: int,
                                                                         word: str) -> None:
    script, env, token = chaos
    out = tmp_path / "node.tar.gz"
    # Started as a shell starts a foreground job, whose Ctrl-C reaches it: a job a non-interactive shell put in
    # the background (`.ci/run &`, nohup) inherits SIGINT ignored, and so would k3diag, rightly (Unix leaves a
    # background job's SIGINT ignored), so the SIGINT case would wait out the 60 s command timeout.
    process = subprocess.Popen([str(script), "collect", "-o", str(out), "--root", str(FAKE_ROOT), "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=_foreground_job)
    try:
        deadline = time.monotonic() + 60
        # Until the hung nvidia-smi itself runs (lspci's setsid child also sleeps 300 s: not the event).
        while time.monotonic() < deadline and not _hung_nvidia_smi_running(token):
            time.sleep(0.1)
        assert _hung_nvidia_smi_running(token), "the fake nvidia-smi never started"
        process.send_signal(signum)
        # Bounded but generous: stopping the group and exiting takes a second alone, far more on a loaded
        # 2-core CI machine; the 60 s command timeout is what it must not wait for.
        _, stderr = process.communicate(timeout=50)
    finally:
        if process.poll() is None:
            process.kill()
    try:
        assert process.returncode == code, stderr.decode()
        assert stderr.decode().endswith(f"k3diag collect: {word}; every command it started was stopped and no bundle "
                                        "was written\n")
        assert not out.exists()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".k3diag-")] == []
    finally:
        left = _left_running(token)
    assert left == [], left
