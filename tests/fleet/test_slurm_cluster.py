"""A real single-node Slurm cluster (Debian's slurm-wlm and munge) on 127.0.0.1, in a temporary folder.

slurmd runs deploy/slurm/k3diag-healthcheck.sh as its HealthCheckProgram every few seconds; the wrapper
runs `k3diag check --slurm-drain` over a fixture bundle (`--from`, the test-only way to read evidence
instead of this host). A bad bundle must drain the node with a `k3diag:` reason; a good one must resume
it; a node drained by hand must stay drained. Every daemon is stopped when the module ends, pass or fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"
GOOD = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"
WRAPPER = REPO / "deploy" / "slurm" / "k3diag-healthcheck.sh"
NODE = "k3node"
BINARIES = ("munged", "slurmctld", "slurmd", "scontrol")
MISSING = [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]

pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=f"Slurm/munge not installed ({', '.join(MISSING)} missing: "
                                             "apt-get install slurm-wlm munge)"),
    pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0,
                       reason="the test cluster runs slurmd as root (SlurmdUser=root), as HealthCheckProgram does"),
]


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin") / name)


def _free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=5)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.current = root / "current-bundle"
        self.log = root / "k3diag.log"

    def scontrol(self, *args: str) -> str:
        result = subprocess.run([_binary("scontrol"), *args], env=self.env, capture_output=True, text=True, timeout=20)
        return result.stdout + result.stderr

    def show(self) -> str:
        return self.scontrol("show", "node", NODE)

    def wait_for(self, predicate, what: str, timeout: float = 180.0) -> str:
        # Bounded, but sized for a loaded 2-core CI machine where one health-check pass can take a minute.
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.show()
            if predicate(text):
                return text
            time.sleep(1.0)
        log = self.log.read_text() if self.log.exists() else "(no k3diag log)"
        slurmd = (self.root / "log" / "slurmd.log").read_text()[-3000:]
        raise AssertionError(f"timed out waiting for {what}; last `scontrol show node`:\n{text}\nk3diag log:\n{log}\n"
                             f"slurmd log:\n{slurmd}")

    def wait_for_text(self, path: Path, needle: str, timeout: float = 120.0) -> str:
        """The file's text once it contains `needle` (it may not exist yet: it is written after the event
        slurmctld shows); fails with the file's last text after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while needle not in _read(path) and time.monotonic() < deadline:
            time.sleep(0.5)
        text = _read(path)
        assert needle in text, f"{path.name} never said {needle!r} within {timeout:g} s; it has:\n{text or '(no file)'}"
        return text


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _write_config(root: Path, ctld_port: int, slurmd_port: int) -> None:
    (root / "state").mkdir()
    (root / "spool").mkdir()
    (root / "log").mkdir()
    hc = root / "healthcheck.sh"
    # slurm.conf takes a program, not arguments: this one-line script points the real wrapper at the test's
    # settings file, which is where an operator's /etc/default/k3diag would be.
    hc.write_text(f"#!/bin/sh\nK3DIAG_CONF={root}/k3diag.conf exec {WRAPPER}\n")
    hc.chmod(0o755)
    (root / "k3diag.conf").write_text(
        f"K3DIAG='env PYTHONPATH={REPO} SLURM_CONF={root}/slurm.conf {sys.executable} -m k3diag'\n"
        f"K3DIAG_ARGS=\"--from $(cat {root}/current-bundle) --scontrol {_binary('scontrol')}\"\n"
        f"K3DIAG_LOG={root}/k3diag.log\n"
        f"K3DIAG_PROM_DIR={root}/textfile\n"
        "K3DIAG_DEADLINE=20\n"
    )
    (root / "textfile").mkdir()
    host = socket.gethostname()
    (root / "slurm.conf").write_text(f"""\
ClusterName=k3test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
HealthCheckProgram={hc}
HealthCheckInterval=3
HealthCheckNodeState=ANY
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs=1 State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES State=UP
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("slurm")
    munge = root / "munge"
    munge.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ctld_port, slurmd_port = _free_ports(2)
    _write_config(root, ctld_port, slurmd_port)
    cluster = Cluster(root)
    cluster.current.write_text(str(BAD))
    started: list[subprocess.Popen] = []
    try:
        started.append(subprocess.Popen(
            [_binary("munged"), "-F", "--force", f"--key-file={key}", f"--socket={munge}/sock",
             f"--pid-file={munge}/pid", f"--seed-file={munge}/seed", f"--log-file={munge}/log"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(50):
            if (munge / "sock").exists():
                break
            time.sleep(0.1)
        started.append(subprocess.Popen([_binary("slurmctld"), "-D", "-i", "-f", str(cluster.conf)], env=cluster.env,
                                        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)
        started.append(subprocess.Popen([_binary("slurmd"), "-D", "-N", NODE, "-f", str(cluster.conf)], env=cluster.env,
                                        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for process in started:
            if process.poll() is not None:
                logs = "\n".join(p.read_text()[-2000:] for p in (root / "log").glob("*.log"))
                pytest.skip(f"the test Slurm cluster did not start (exit {process.returncode}): {logs}")
        yield cluster
    finally:
        for process in reversed(started):
            _stop(process)


def test_bad_bundle_drains_the_node_with_a_k3diag_reason_and_a_good_one_resumes_it(cluster: Cluster) -> None:
    cluster.current.write_text(str(BAD))
    shown = cluster.wait_for(lambda text: "DRAIN" in text and "Reason=k3diag:" in text, "the k3diag drain")
    assert "Reason=k3diag: pcie-width-below-max GPU2" in shown
    assert "State=" in shown and "DRAIN" in shown.split("State=", 1)[1].split()[0]
    # slurmctld shows the drain as soon as `k3diag check` asked for it; the check then writes the Prometheus
    # file node_exporter would read and the wrapper appends its log line: wait for those, not for a time.
    prom = cluster.wait_for_text(cluster.root / "textfile" / "k3diag.prom", "k3diag_check_success 0")
    assert "k3diag_check_success 0" in prom
    log = cluster.wait_for_text(cluster.log, "ERROR: k3diag: pcie-width-below-max GPU2")
    assert "ERROR: k3diag: pcie-width-below-max GPU2" in log

    cluster.current.write_text(str(GOOD))
    shown = cluster.wait_for(lambda text: "DRAIN" not in text.split("State=", 1)[1].split()[0], "the resume")
    assert "Reason=k3diag" not in shown
    log = cluster.wait_for_text(cluster.log, "slurm: resumed k3node")
    assert "slurm: resumed k3node (its drain reason was k3diag: pcie-width-below-max GPU2)" in log


def test_a_node_drained_by_hand_is_not_resumed(cluster: Cluster) -> None:
    cluster.current.write_text(str(GOOD))
    cluster.scontrol("update", f"NodeName={NODE}", "State=DRAIN", "Reason=maintenance: PSU swap")
    before = cluster.log.read_text().count("\n") if cluster.log.exists() else 0
    # Wait for two more health-check passes after the manual drain.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and cluster.log.read_text().count("\n") < before + 2:
        time.sleep(1.0)
    shown = cluster.show()
    assert "Reason=maintenance: PSU swap" in shown and "DRAIN" in shown
    assert "was drained by someone else (Reason=maintenance: PSU swap); not resumed" in cluster.log.read_text()
    cluster.scontrol("update", f"NodeName={NODE}", "State=RESUME")


def test_the_rack_recipe_collects_one_bundle_per_node_and_summarizes(cluster: Cluster, tmp_path: Path) -> None:
    """deploy/slurm/collect-rack.sh through sbatch: srun puts one `k3diag collect` on each node of the
    allocation (here the one node), then `k3diag fleet` summarizes the bundles."""
    cluster.current.write_text(str(GOOD))
    cluster.wait_for(lambda text: "DRAIN" not in text.split("State=", 1)[1].split()[0], "an idle node")
    shim = tmp_path / "bin" / "k3diag"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m k3diag \"$@\"\n")
    shim.chmod(0o755)
    out = tmp_path / "rack"
    env = dict(cluster.env, PATH=f"{shim.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    script = REPO / "deploy" / "slurm" / "collect-rack.sh"
    result = subprocess.run([shutil.which("sbatch") or "/usr/bin/sbatch", "--wait", "-N", "1", "-t", "5",
                             "-o", str(tmp_path / "job.out"), str(script), str(out)],
                            env=env, capture_output=True, text=True, timeout=240)
    job_output = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert result.returncode == 0, result.stdout + result.stderr + job_output
    bundles = sorted(p.name for p in out.glob("*.tar.gz"))
    assert bundles == [f"{socket.gethostname().split('.')[0]}.tar.gz"], job_output
    summary = (out / "fleet.md").read_text()
    assert "1 node in 1 group" in summary
    assert (out / "fleet.html").read_text().count('class="node') == 1
