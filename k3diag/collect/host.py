"""The host's own layout (CPU packages, NUMA nodes, kernel, memory) from sysfs and /proc.

Reads under a configurable root so tests can point it at a fixture tree. Needs no root
privileges and no GPU. Produces one `host-readings` evidence so a bundle carries it.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from pathlib import Path

from k3diag.evidence import Evidence
from k3diag.model import json_text
from k3diag.model.ids import parse_cpulist  # noqa: F401  (re-exported: callers import it from here)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


_CONTAINER_RE = re.compile(r"\b(docker|kubepods|containerd|cri-containerd|libpod|lxc|garden)\b")


def _container(root: Path, proc_root: Path) -> str | None:
    """Which container runtime the collector runs under: its cgroup path (v1 and v2 name the runtime),
    or the marker files Docker and Podman leave at the root."""
    cgroup = _read(proc_root / "self" / "cgroup") or _read(proc_root / "1" / "cgroup") or ""
    match = _CONTAINER_RE.search(cgroup)
    if match:
        return match.group(1)
    if (root / ".dockerenv").exists():
        return "docker"
    if (root / "run" / ".containerenv").exists():
        return "podman"
    return None


def read_host(root: Path = Path("/")) -> dict:
    """A JSON-ready dict of what the host says about itself. Missing files give missing keys."""
    sys_root = root / "sys"
    proc_root = root / "proc"
    reading: dict = {"schema": "k3diag.host-readings/1", "root": str(root)}
    live = root == Path("/")
    if live:
        reading["hostname"] = socket.gethostname()
        uname = platform.uname()
        reading["kernel"] = uname.release
        reading["machine"] = uname.machine
    os_release = _read(root / "etc" / "os-release")
    if os_release:
        match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', os_release, re.M)
        if match:
            reading["os"] = match.group(1)
    cpuinfo = _read(proc_root / "cpuinfo")
    if cpuinfo:
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        if match:
            reading["cpu_model"] = match.group(1).strip()
        reading["logical_cpus"] = len(re.findall(r"^processor\s*:", cpuinfo, re.M)) or None
        hypervisor = re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.M)
        reading["virtualized"] = bool(hypervisor)
    for name in ("sys_vendor", "product_name"):
        value = _read(sys_root / "class" / "dmi" / "id" / name)
        if value:
            reading[name] = value
    container = _container(root, proc_root)
    if container:
        reading["container"] = container
    meminfo = _read(proc_root / "meminfo")
    if meminfo:
        match = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, re.M)
        if match:
            reading["memory_total_bytes"] = int(match.group(1)) * 1024
    cmdline = _read(proc_root / "cmdline")
    if cmdline is not None:
        reading["kernel_cmdline"] = cmdline

    nodes = []
    node_dir = sys_root / "devices" / "system" / "node"
    if node_dir.is_dir():
        for entry in sorted(node_dir.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            node: dict = {"id": int(entry.name[4:])}
            cpulist = _read(entry / "cpulist")
            if cpulist is not None:
                node["cpus"] = cpulist
            node_meminfo = _read(entry / "meminfo")
            if node_meminfo:
                match = re.search(r"MemTotal:\s*(\d+)\s*kB", node_meminfo)
                if match:
                    node["memory_total_kib"] = int(match.group(1))
            distance = _read(entry / "distance")
            if distance:
                node["distance"] = [int(x) for x in distance.split() if x.isdigit()]
            nodes.append(node)
    reading["numa_nodes"] = nodes

    packages: dict[int, list[int]] = {}
    cpu_dir = sys_root / "devices" / "system" / "cpu"
    if cpu_dir.is_dir():
        for entry in cpu_dir.glob("cpu[0-9]*"):
            package = _read(entry / "topology" / "physical_package_id")
            if package is not None and package.lstrip("-").isdigit():
                packages.setdefault(int(package), []).append(int(entry.name[3:]))
    reading["packages"] = [{"id": pkg, "cpus": sorted(cpus)} for pkg, cpus in sorted(packages.items())]

    if live:
        try:
            import psutil

            reading.setdefault("logical_cpus", psutil.cpu_count(logical=True))
            reading.setdefault("memory_total_bytes", psutil.virtual_memory().total)
        except Exception:  # psutil is a convenience here, never a requirement
            pass
        reading.setdefault("logical_cpus", os.cpu_count())
    return reading


def collect_host(root: Path = Path("/")) -> Evidence:
    reading = read_host(root)
    return Evidence(
        name="host-readings.json",
        kind="reading",
        data=json_text.dumps(reading, indent=1, sort_keys=True).encode(),
        format_hint="host-readings",
    )
