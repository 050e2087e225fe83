"""The host readings JSON written by `k3diag.collect.host` (CPU packages, NUMA nodes, kernel)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from k3diag.model.host import CpuPackage, HostInfo, NumaNode
from k3diag.parse.text import Section


@dataclass
class HostReadingsResult:
    host: HostInfo
    numa_distances: dict[int, list[int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    return 0.9 if '"k3diag.host-readings/1"' in text[:4096] else 0.0


def _compress(cpus: list[int]) -> str:
    """The kernel's cpulist spelling for a sorted list of cpu numbers."""
    ranges: list[str] = []
    start = prev = None
    for cpu in cpus:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = cpu
    if start is not None:
        ranges.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(ranges)


def parse(section: Section, input_name: str) -> HostReadingsResult:
    from k3diag.model.ids import parse_cpulist

    try:
        data = json.loads(section.text)
    except ValueError as exc:
        return HostReadingsResult(host=HostInfo(), warnings=[f"host readings are not valid JSON: {exc}"])
    if not isinstance(data, dict):
        return HostReadingsResult(host=HostInfo(), warnings=["host readings are not a JSON object"])
    from k3diag.model.identity import is_hostname, refused_hostname

    warnings: list[str] = []
    hostname = _str(data.get("hostname"))
    if hostname is not None and not is_hostname(hostname):
        warnings.append(f"host readings: the host name {refused_hostname(hostname)}; not used")
        hostname = None
    host = HostInfo(
        hostname=hostname,
        kernel=_str(data.get("kernel")),
        os=_str(data.get("os")),
        cpu_model=_str(data.get("cpu_model")),
        logical_cpus=_int(data.get("logical_cpus")),
        memory_total_bytes=_int(data.get("memory_total_bytes")),
        kernel_cmdline=_str(data.get("kernel_cmdline")),
        virtualized=data.get("virtualized") if isinstance(data.get("virtualized"), bool) else None,
        sys_vendor=_str(data.get("sys_vendor")),
        product_name=_str(data.get("product_name")),
        container=_str(data.get("container")),
    )
    distances: dict[int, list[int]] = {}
    node_cpus: dict[int, set[int]] = {}
    for node in data.get("numa_nodes") or []:
        if not isinstance(node, dict) or _int(node.get("id")) is None:
            continue
        node_id = int(node["id"])
        cpus = _str(node.get("cpus"))
        host.numa_nodes.append(NumaNode(id=node_id, cpus=cpus, memory_total_kib=_int(node.get("memory_total_kib"))))
        node_cpus[node_id] = set(parse_cpulist(cpus)) if cpus else set()
        if isinstance(node.get("distance"), list):
            distances[node_id] = [d for d in node["distance"] if isinstance(d, int)]
    for package in data.get("packages") or []:
        if not isinstance(package, dict) or _int(package.get("id")) is None:
            continue
        cpus = sorted(c for c in package.get("cpus") or [] if isinstance(c, int))
        members = set(cpus)
        numa = sorted(node_id for node_id, node_set in node_cpus.items() if node_set & members)
        host.packages.append(CpuPackage(id=int(package["id"]), cpus=_compress(cpus), numa_nodes=numa))
    for node in host.numa_nodes:
        owners = [pkg.id for pkg in host.packages if node.id in pkg.numa_nodes]
        node.package = owners[0] if len(owners) == 1 else None
    return HostReadingsResult(host=host, numa_distances=distances, warnings=warnings)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
