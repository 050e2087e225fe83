"""Views of an AMD host that the AMD rules share: its GPU pairs by source, XGMI hives, names in a sentence."""

from __future__ import annotations

from typing import Iterable

from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef
from k3diag.model.topology import Link, endpoint_sort_key, gpu_index

AMD_ORIGINS: tuple[str, ...] = ("amdsmi", "amd-smi-topology", "rocm-smi-showtopo")

# -- shared views -----------------------------------------------------------------------------


def amd_links(machine: Machine) -> dict[tuple[str, str], Link]:
    """One XGMI/PCIE link per GPU pair from AMD sources, the most direct source winning."""
    chosen: dict[tuple[str, str], Link] = {}
    for link in machine.links:
        if link.origin not in AMD_ORIGINS or link.path not in ("XGMI", "PCIE"):
            continue
        if gpu_index(link.a) is None or gpu_index(link.b) is None:
            continue
        key = link.key()
        current = chosen.get(key)
        if current is None or AMD_ORIGINS.index(link.origin) < AMD_ORIGINS.index(current.origin):
            chosen[key] = link
    return chosen


def xgmi_components(links: dict[tuple[str, str], Link]) -> list[list[str]]:
    """Groups of GPUs joined by XGMI links (directly or through other GPUs), sorted."""
    parent: dict[str, str] = {}

    def find(name: str) -> str:
        parent.setdefault(name, name)
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for (a, b), link in links.items():
        find(a)
        find(b)
        if link.path == "XGMI":
            parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for name in parent:
        groups.setdefault(find(name), []).append(name)
    ordered = [sorted(group, key=endpoint_sort_key) for group in groups.values()]
    return sorted(ordered, key=lambda group: endpoint_sort_key(group[0]))


def by_pair(items: Iterable[tuple[tuple[str, str], Link]]) -> list[tuple[tuple[str, str], Link]]:
    return sorted(items, key=lambda item: (endpoint_sort_key(item[0][0]), endpoint_sort_key(item[0][1])))


def has_amd(machine: Machine) -> bool:
    return any(gpu.vendor == "AMD" for gpu in machine.gpus.values()) or bool(amd_links(machine))


def gpu_span(names: list[str]) -> str:
    if len(names) > 3:
        return f"{names[0]}-{names[-1]} ({len(names)} GPUs)" if _contiguous(names) else ", ".join(names)
    return ", ".join(names)


def _contiguous(names: list[str]) -> bool:
    numbers = [gpu_index(name) for name in names]
    if any(number is None for number in numbers):
        return False
    first = numbers[0] or 0
    return numbers == list(range(first, first + len(numbers)))


def distinct_refs(*refs: SourceRef | None) -> list[SourceRef]:
    seen: list[SourceRef] = []
    for ref in refs:
        if ref is not None and ref not in seen:
            seen.append(ref)
    return seen


def describe_link(link: Link) -> str:
    extra = []
    if link.hops is not None:
        extra.append(f"hops {link.hops}")
    if link.weight is not None:
        extra.append(f"weight {link.weight}")
    return f"{link.path}" + (f" ({', '.join(extra)})" if extra else "")
