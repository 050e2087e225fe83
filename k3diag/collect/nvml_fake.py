"""A fake of the NVML boundary: a recorded readings document (fixtures/nvml/*.json) replayed through the
`NvmlBackend` calls, so the collector itself runs, and is tested, on machines without a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from k3diag.collect.nvml import NVLINK_REMOTE_TYPE, P2P_CAPABILITY_INDEX, P2P_STATUS_CODE, NvmlUnavailable, cpulist_to_masks

class FakeNvmlError(Exception):
    """What the fake raises for a reading the recording does not have (NVML: not supported)."""


class FakeNvmlBackend:
    """Replays a recorded readings document (fixtures/nvml/*.json) through the NvmlBackend calls.

    Values are turned back into what NVML returns (topology levels, P2P status numbers,
    CPU masks), so `collect_nvml(FakeNvmlBackend(...))` runs every line of the collector.
    `fail` names backend methods that should raise, to test that a missing field costs only
    that field.
    """

    def __init__(self, readings: dict[str, Any], fail: frozenset[str] | set[str] = frozenset()) -> None:
        self.readings = readings
        self.fail = frozenset(fail)
        self.calls = 0

    @classmethod
    def from_file(cls, path: Path, fail: frozenset[str] | set[str] = frozenset()) -> "FakeNvmlBackend":
        return cls(json.loads(Path(path).read_text()), fail)

    def _value(self, method: str, value: Any) -> Any:
        self.calls += 1
        if method in self.fail or value is None:
            raise FakeNvmlError(f"{method}: not supported")
        return value

    def _device(self, index: int) -> dict:
        return self.readings["devices"][index]

    def init(self) -> None:
        if self.readings.get("error") and not self.readings.get("devices"):
            raise NvmlUnavailable(self.readings["error"])

    def shutdown(self) -> None:
        return None

    def driver_version(self) -> str:
        return self._value("driver_version", self.readings.get("driver_version"))

    def cuda_driver_version(self) -> int:
        return self._value("cuda_driver_version", self.readings.get("cuda_driver_version"))

    def device_count(self) -> int:
        return self._value("device_count", self.readings.get("device_count", len(self.readings["devices"])))

    def name(self, index: int) -> str:
        return self._value("name", self._device(index).get("name"))

    def bus_id(self, index: int) -> str:
        return self._value("bus_id", self._device(index).get("bus_id"))

    def uuid(self, index: int) -> str:
        return self._value("uuid", self._device(index).get("uuid"))

    def gpu_numa_id(self, index: int) -> int:
        return self._value("gpu_numa_id", self._device(index).get("gpu_numa_id"))

    def sysfs_numa_node(self, bus_id: str) -> int | None:
        from k3diag.model.ids import normalize_bdf

        for device in self.readings["devices"]:
            if device.get("bus_id") and normalize_bdf(device["bus_id"]) == normalize_bdf(bus_id):
                return self._value("sysfs_numa_node", device.get("numa_node"))
        raise FakeNvmlError(f"no sysfs entry for {bus_id}")

    def cpu_affinity_masks(self, index: int) -> list[int]:
        cpulist = self._device(index).get("cpu_affinity")
        return self._value("cpu_affinity_masks", cpulist_to_masks(cpulist) if cpulist else None)

    def _pcie(self, method: str, index: int, key: str) -> int:
        return self._value(method, (self._device(index).get("pcie") or {}).get(key))

    def pcie_gen_current(self, index: int) -> int:
        return self._pcie("pcie_gen_current", index, "gen_current")

    def pcie_gen_max(self, index: int) -> int:
        return self._pcie("pcie_gen_max", index, "gen_max")

    def pcie_gen_device_max(self, index: int) -> int:
        return self._pcie("pcie_gen_device_max", index, "gen_device_max")

    def pcie_width_current(self, index: int) -> int:
        return self._pcie("pcie_width_current", index, "width_current")

    def pcie_width_max(self, index: int) -> int:
        return self._pcie("pcie_width_max", index, "width_max")

    def performance_state(self, index: int) -> int:
        state = self._device(index).get("performance_state")
        return self._value("performance_state", int(state[1:]) if state else None)

    def memory_total_bytes(self, index: int) -> int:
        mib = self._device(index).get("memory_total_mib")
        return self._value("memory_total_bytes", mib * 1024 * 1024 if mib is not None else None)

    def topology_common_ancestor(self, a: int, b: int) -> int:
        for link in self.readings.get("links", []):
            if {link["a"], link["b"]} == {a, b}:
                return self._value("topology_common_ancestor", link.get("topology_level"))
        raise FakeNvmlError("no reading for this pair")

    def nvlink_max_links(self) -> int:
        counts = [len(device.get("nvlinks") or []) for device in self.readings["devices"]]
        return self._value("nvlink_max_links", max(counts, default=0))

    def _link(self, index: int, link: int) -> dict:
        for entry in self._device(index).get("nvlinks") or []:
            if entry["link"] == link:
                return entry
        raise FakeNvmlError("no such link")

    def nvlink_active(self, index: int, link: int) -> bool:
        return self._value("nvlink_active", self._link(index, link).get("active"))

    def nvlink_remote_bus_id(self, index: int, link: int) -> str:
        return self._value("nvlink_remote_bus_id", self._link(index, link).get("remote_bus_id"))

    def nvlink_remote_type(self, index: int, link: int) -> int:
        kinds = {name: number for number, name in NVLINK_REMOTE_TYPE.items()}
        return self._value("nvlink_remote_type", kinds.get(self._link(index, link).get("remote_type")))

    def gpu_fabric_info(self, index: int) -> dict:
        return self._value("gpu_fabric_info", self._device(index).get("fabric"))

    def p2p_status(self, a: int, b: int, capability_index: int) -> int:
        names = {number: name for name, number in P2P_CAPABILITY_INDEX.items()}
        codes = {code: number for number, code in P2P_STATUS_CODE.items()}
        for entry in self.readings.get("p2p", []):
            if entry["src"] == a and entry["dst"] == b and entry["capability"] == names.get(capability_index):
                return self._value("p2p_status", codes.get(entry.get("status")))
        raise FakeNvmlError("no reading for this pair")
