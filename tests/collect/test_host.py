"""The host collector against a fixture root (a dual-socket sysfs/proc tree)."""

from __future__ import annotations

import json
from pathlib import Path

from k3diag.collect.host import collect_host, parse_cpulist, read_host
from k3diag.join.build import build_machine


def test_parse_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []
    assert parse_cpulist("x,2") == [2]


def test_dual_socket_layout(fixtures_dir: Path) -> None:
    reading = read_host(fixtures_dir / "hostroot" / "dual_socket")
    assert [node["id"] for node in reading["numa_nodes"]] == [0, 1]
    assert reading["numa_nodes"][1]["cpus"] == "32-63,96-127"
    assert reading["numa_nodes"][0]["distance"] == [10, 21]
    assert reading["cpu_model"].startswith("Intel(R) Xeon(R) Platinum 8358")
    assert reading["kernel_cmdline"].endswith("intel_iommu=on iommu=pt")
    assert [p["id"] for p in reading["packages"]] == [0, 1]
    assert "hostname" not in reading  # a fixture root is not this host


def test_readings_go_through_the_model(fixtures_dir: Path) -> None:
    evidence = collect_host(fixtures_dir / "hostroot" / "dual_socket")
    assert json.loads(evidence.data)["schema"] == "k3diag.host-readings/1"
    machine = build_machine([evidence])
    assert machine.inputs[0].format == "host-readings"
    packages = machine.host.packages
    assert [(p.id, p.cpus, p.numa_nodes) for p in packages] == [(0, "0-31,64-95", [0]), (1, "32-63,96-127", [1])]
    assert [n.package for n in machine.host.numa_nodes] == [0, 1]
    assert machine.host.memory_total_bytes == 528056132 * 1024
    assert machine.extras["numa_distances"] == {0: [10, 21], 1: [21, 10]}


def test_container_root_with_nothing(tmp_path: Path) -> None:
    reading = read_host(tmp_path)
    assert reading["numa_nodes"] == [] and reading["packages"] == []
    machine = build_machine([collect_host(tmp_path)])
    assert machine.host.numa_nodes == []
