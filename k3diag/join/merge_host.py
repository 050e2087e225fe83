"""Host readings into the model: fill what is unknown, never overwrite what another source said."""

from __future__ import annotations

from dataclasses import fields

from k3diag.model.machine import InputRecord, Machine


def merge_host(result, machine: Machine, record: InputRecord) -> None:
    incoming = result.host
    for item in fields(incoming):
        if item.name in ("packages", "numa_nodes", "sources"):
            continue
        if getattr(machine.host, item.name) is None and getattr(incoming, item.name) is not None:
            setattr(machine.host, item.name, getattr(incoming, item.name))
    if not machine.host.packages:
        machine.host.packages = list(incoming.packages)
    if not machine.host.numa_nodes:
        machine.host.numa_nodes = list(incoming.numa_nodes)
    if result.numa_distances:
        machine.extras.setdefault("numa_distances", result.numa_distances)
