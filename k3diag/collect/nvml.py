"""Live NVML readings: what `nvidia-smi topo -m/-p2p/-q` would say, read from the library directly.

`collect_nvml()` asks an `NvmlBackend` for every fact and writes one JSON document, the
"nvml-readings" evidence a bundle stores and `k3diag.parse.nvml_readings` reads back, so
live runs and recorded readings take the same path into the model.

Every call goes through `_read`, which turns any failure into None (the nvitop way): a
field one driver does not support costs that field, never the collection. The real backend
imports pynvml (the nvidia-ml-py package) only when used, and refuses the legacy `pynvml`
package that shadows it. `k3diag.collect.nvml_fake.FakeNvmlBackend` replays a recorded readings
document so tests run the collector itself on machines without a GPU.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from k3diag.evidence import Evidence
from k3diag.model import json_text
from k3diag.model.ids import fold_ranges

SCHEMA = "k3diag.nvml-readings/1"
READINGS_NAME = "nvml-readings.json"
FORMAT = "nvml-readings"

# nvmlGpuTopologyLevel_t -> the code `nvidia-smi topo -m` prints for that level.
TOPOLOGY_LEVEL_PATH: dict[int, str] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlGpuP2PCapsIndex_t, in the order `topo -p2p r|w|n|a|p` lists them. Spelled out because some
# nvidia-ml-py releases define NVML_P2P_CAPS_INDEX_READ as the tuple (0,).
P2P_CAPABILITY_INDEX: dict[str, int] = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pcie": 4}
# nvmlGpuP2PStatus_t -> the code `nvidia-smi topo -p2p` prints.
P2P_STATUS_CODE: dict[int, str] = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
# nvmlNvLinkDeviceType_t
NVLINK_REMOTE_TYPE: dict[int, str] = {0: "gpu", 1: "ibmnpu", 2: "switch", 255: "unknown"}
PSTATE_UNKNOWN = 32

T = TypeVar("T")


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host; the message is one sentence a user can act on."""


class NvmlBackend(Protocol):
    """The NVML calls k3diag needs, one method per call, by device index.

    Methods raise on failure (any exception); the collector treats that as "unknown".
    Each method names the nvidia-smi field it matches, so a reading can be checked by hand.
    """

    def init(self) -> None: ...  # nvmlInit; raises NvmlUnavailable

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...  # nvidia-smi --query-gpu=driver_version

    def cuda_driver_version(self) -> int: ...  # 12040 for CUDA 12.4 (the "CUDA Version" of nvidia-smi)

    def device_count(self) -> int: ...  # nvidia-smi --query-gpu=count

    def name(self, index: int) -> str: ...  # name

    def bus_id(self, index: int) -> str: ...  # pci.bus_id

    def uuid(self, index: int) -> str: ...  # uuid

    def gpu_numa_id(self, index: int) -> int: ...  # topo -m "GPU NUMA ID" (nvmlDeviceGetNumaNodeId)

    def sysfs_numa_node(self, bus_id: str) -> int | None: ...  # /sys/bus/pci/devices/BDF/numa_node

    def cpu_affinity_masks(self, index: int) -> list[int]: ...  # topo -m "CPU Affinity", 64 CPUs a word

    def pcie_gen_current(self, index: int) -> int: ...  # pcie.link.gen.current

    def pcie_gen_max(self, index: int) -> int: ...  # pcie.link.gen.max (GPU and system together)

    def pcie_gen_device_max(self, index: int) -> int: ...  # pcie.link.gen.gpumax

    def pcie_width_current(self, index: int) -> int: ...  # pcie.link.width.current

    def pcie_width_max(self, index: int) -> int: ...  # pcie.link.width.max

    def performance_state(self, index: int) -> int: ...  # pstate, 0..15 (32 unknown)

    def memory_total_bytes(self, index: int) -> int: ...  # memory.total

    def topology_common_ancestor(self, a: int, b: int) -> int: ...  # topo -m cell, as nvmlGpuTopologyLevel_t

    def nvlink_max_links(self) -> int: ...

    def nvlink_active(self, index: int, link: int) -> bool: ...  # nvidia-smi nvlink -s

    def nvlink_remote_bus_id(self, index: int, link: int) -> str: ...  # nvidia-smi nvlink -R

    def nvlink_remote_type(self, index: int, link: int) -> int: ...  # gpu / switch

    def p2p_status(self, a: int, b: int, capability_index: int) -> int: ...  # topo -p2p cell

    # nvidia-smi -q Fabric block: {state, status, clique_id, cluster_uuid, health_summary, health_mask} as the
    # strings nvidia-smi prints (nvmlDeviceGetGpuFabricInfoV where the library has it, else the v1 call).
    def gpu_fabric_info(self, index: int) -> dict: ...


def _read(call: Callable[[], T]) -> T | None:
    """One NVML call; any failure (not supported, no permission, GPU lost) reads as unknown."""
    try:
        return call()
    except Exception:
        return None


def masks_to_cpulist(masks: list[int] | None) -> str | None:
    """`[0xffffffff, 0xffffffff]` (word 0 = CPUs 0-63) -> "0-31,64-95", the way topo -m prints it."""
    if not masks:
        return None
    cpus = [word * 64 + bit for word, mask in enumerate(masks) for bit in range(64) if int(mask) >> bit & 1]
    if not cpus:
        return None
    return fold_ranges(cpus)


def cpulist_to_masks(cpulist: str | None) -> list[int]:
    masks: list[int] = []
    for part in (cpulist or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        for cpu in range(int(low), int(high or low) + 1):
            word, bit = divmod(cpu, 64)
            masks.extend([0] * (word + 1 - len(masks)))
            masks[word] |= 1 << bit
    return masks


def cuda_version_text(version: int | None) -> str | None:
    if version is None or version <= 0:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def collect_nvml(backend: NvmlBackend | None = None, sysfs_root: Path = Path("/")) -> Evidence:
    """Read every GPU fact NVML gives and return it as "nvml-readings" evidence (JSON)."""
    if backend is None:
        try:
            backend = PynvmlBackend(sysfs_root=sysfs_root)
        except NvmlUnavailable as exc:
            return _evidence({"schema": SCHEMA, "error": str(exc), "devices": [], "links": [], "p2p": []}, str(exc))
    try:
        backend.init()
    except NvmlUnavailable as exc:
        return _evidence({"schema": SCHEMA, "error": str(exc), "devices": [], "links": [], "p2p": []}, str(exc))
    except Exception as exc:  # an NVML error class we did not map: still one sentence
        message = f"NVML could not start ({type(exc).__name__}: {exc}); is the NVIDIA driver loaded?"
        return _evidence({"schema": SCHEMA, "error": message, "devices": [], "links": [], "p2p": []}, message)
    try:
        readings = read_all(backend)
    finally:
        _read(backend.shutdown)
    return _evidence(readings, readings.get("error"))


def read_all(backend: NvmlBackend) -> dict[str, Any]:
    """Every reading, as the JSON document `parse/nvml_readings.py` reads."""
    count = _read(backend.device_count)
    readings: dict[str, Any] = {
        "schema": SCHEMA,
        "error": None,
        "driver_version": _read(backend.driver_version),
        "cuda_driver_version": _read(backend.cuda_driver_version),
        "device_count": count,
        "devices": [],
        "links": [],
        "p2p": [],
    }
    if not count:
        readings["error"] = (
            "NVML reports no NVIDIA GPU on this host" if count == 0 else "NVML could not count the GPUs"
        )
        return readings
    devices = [_read_device(backend, index) for index in range(count)]
    readings["devices"] = devices
    bus_to_index = {device["bus_id_normalized"]: device["index"] for device in devices if device["bus_id_normalized"]}
    for a in range(count):
        for b in range(a + 1, count):
            level = _read(lambda: backend.topology_common_ancestor(a, b))
            nvlinks = _pair_nvlinks(devices[a], devices[b], bus_to_index)
            pcie_path = TOPOLOGY_LEVEL_PATH.get(level) if level is not None else None
            readings["links"].append(
                {
                    "a": a,
                    "b": b,
                    "topology_level": level,
                    "pcie_path": pcie_path,
                    "nvlinks": nvlinks,
                    # nvidia-smi prints NV# whenever NVLink joins the pair, the PCIe level otherwise.
                    "path": f"NV{nvlinks}" if nvlinks else pcie_path,
                }
            )
    for a in range(count):
        for b in range(count):
            if a == b:
                continue
            for capability, caps_index in P2P_CAPABILITY_INDEX.items():
                raw = _read(lambda: backend.p2p_status(a, b, caps_index))
                readings["p2p"].append(
                    {
                        "src": a,
                        "dst": b,
                        "capability": capability,
                        "raw": raw,
                        "status": P2P_STATUS_CODE.get(raw) if raw is not None else None,
                    }
                )
    return readings


def _read_device(backend: NvmlBackend, index: int) -> dict[str, Any]:
    from k3diag.model.ids import normalize_bdf

    bus_id = _read(lambda: backend.bus_id(index))
    sysfs_node = _read(lambda: backend.sysfs_numa_node(bus_id)) if bus_id else None
    gpu_numa_id = _read(lambda: backend.gpu_numa_id(index))
    pstate = _read(lambda: backend.performance_state(index))
    memory = _read(lambda: backend.memory_total_bytes(index))
    max_links = _read(backend.nvlink_max_links) or 0
    nvlinks = []
    for link in range(max_links):
        active = _read(lambda: backend.nvlink_active(index, link))
        if active is None:
            continue  # the link does not exist on this GPU
        nvlinks.append(
            {
                "link": link,
                "active": bool(active),
                "remote_bus_id": _read(lambda: backend.nvlink_remote_bus_id(index, link)) if active else None,
                "remote_type": NVLINK_REMOTE_TYPE.get(_read(lambda: backend.nvlink_remote_type(index, link)))
                if active
                else None,
            }
        )
    return {
        "index": index,
        "name": _read(lambda: backend.name(index)),
        "bus_id": bus_id,
        "bus_id_normalized": normalize_bdf(bus_id) if bus_id else None,
        "uuid": _read(lambda: backend.uuid(index)),
        # The CPU-side node (topo -m "NUMA Affinity") comes from sysfs; nvmlDeviceGetNumaNodeId answers
        # only where the GPU memory is a NUMA node itself, and then it is the "GPU NUMA ID".
        "numa_node": sysfs_node if sysfs_node is not None and sysfs_node >= 0 else None,
        "gpu_numa_id": gpu_numa_id if gpu_numa_id is not None and gpu_numa_id >= 0 else None,
        "cpu_affinity": masks_to_cpulist(_read(lambda: backend.cpu_affinity_masks(index))),
        "pcie": {
            "gen_current": _read(lambda: backend.pcie_gen_current(index)),
            "gen_max": _read(lambda: backend.pcie_gen_max(index)),
            "gen_device_max": _read(lambda: backend.pcie_gen_device_max(index)),
            "width_current": _read(lambda: backend.pcie_width_current(index)),
            "width_max": _read(lambda: backend.pcie_width_max(index)),
        },
        "performance_state": f"P{pstate}" if pstate is not None and pstate != PSTATE_UNKNOWN else None,
        "memory_total_mib": memory // (1024 * 1024) if memory is not None else None,
        "nvlinks": nvlinks,
        **_fabric(backend, index),
    }


def _fabric(backend: NvmlBackend, index: int) -> dict[str, Any]:
    """The GPU's fabric registration, only where NVML has it (recordings without it stay byte-identical)."""
    info = _read(lambda: backend.gpu_fabric_info(index))
    return {"fabric": info} if isinstance(info, dict) else {}


def _pair_nvlinks(a: dict, b: dict, bus_to_index: dict[str, int]) -> int | None:
    """NVLinks joining two GPUs: links wired to each other, plus links both have into an NVSwitch.

    On NVSwitch boards every link goes to a switch; nvidia-smi then prints NV<links> for every
    pair, and one link down on a GPU lowers every pair it is part of.
    """
    from k3diag.model.ids import normalize_bdf

    if not a["nvlinks"] and not b["nvlinks"]:
        return 0  # PCIe cards: NVML answers "not supported" for link 0

    def active(device: dict) -> list[dict]:
        return [link for link in device["nvlinks"] if link["active"]]

    direct = sum(
        1
        for link in active(a)
        if link["remote_bus_id"] and bus_to_index.get(normalize_bdf(link["remote_bus_id"])) == b["index"]
    )
    switch_a = sum(1 for link in active(a) if link["remote_type"] == "switch")
    switch_b = sum(1 for link in active(b) if link["remote_type"] == "switch")
    return direct + min(switch_a, switch_b)


def _evidence(readings: dict[str, Any], error: str | None) -> Evidence:
    data = json_text.dumps(readings, indent=1).encode()  # "schema" first, where a sniffer finds it
    return Evidence(name=READINGS_NAME, kind="reading", format_hint=FORMAT, data=data, error=error)


# --------------------------------------------------------------------------- real backend
def load_pynvml() -> Any:
    """Import nvidia-ml-py's `pynvml`, refusing the legacy `pynvml` package that shadows it."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        raise NvmlUnavailable(
            "the nvidia-ml-py package is not installed, so NVML cannot be read; install it with "
            "`pip install nvidia-ml-py`"
        ) from None
    needed = ("nvmlDeviceGetP2PStatus", "NVML_P2P_CAPS_INDEX_READ", "nvmlDeviceGetTopologyCommonAncestor", "nvmlInit")
    if not all(hasattr(pynvml, name) for name in needed):
        raise NvmlUnavailable(
            "the installed `pynvml` module is the old standalone package, which shadows nvidia-ml-py; run "
            "`pip uninstall pynvml && pip install nvidia-ml-py`"
        )
    return pynvml


class PynvmlBackend:
    """NVML through nvidia-ml-py. Raises NvmlUnavailable with one sentence when NVML cannot start."""

    def __init__(self, sysfs_root: Path = Path("/")) -> None:
        self._nvml = load_pynvml()
        self._sysfs_root = sysfs_root
        self._handles: dict[int, Any] = {}

    def init(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            raise NvmlUnavailable(_init_error_sentence(nvml, exc)) from None

    def shutdown(self) -> None:
        self._nvml.nvmlShutdown()

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def driver_version(self) -> str:
        return _text(self._nvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        nvml = self._nvml
        getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or nvml.nvmlSystemGetCudaDriverVersion
        return int(getter())

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def name(self, index: int) -> str:
        return _text(self._nvml.nvmlDeviceGetName(self._handle(index)))

    def bus_id(self, index: int) -> str:
        return _text(self._nvml.nvmlDeviceGetPciInfo(self._handle(index)).busId)

    def uuid(self, index: int) -> str:
        return _text(self._nvml.nvmlDeviceGetUUID(self._handle(index)))

    def gpu_numa_id(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetNumaNodeId(self._handle(index)))

    def sysfs_numa_node(self, bus_id: str) -> int | None:
        from k3diag.model.ids import normalize_bdf

        path = self._sysfs_root / "sys/bus/pci/devices" / normalize_bdf(bus_id) / "numa_node"
        value = int(path.read_text().strip())
        return value if value >= 0 else None

    def cpu_affinity_masks(self, index: int) -> list[int]:
        words = max(1, ((os.cpu_count() or 64) + 63) // 64)
        return [int(word) for word in self._nvml.nvmlDeviceGetCpuAffinity(self._handle(index), words)]

    def pcie_gen_current(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetCurrPcieLinkGeneration(self._handle(index)))

    def pcie_gen_max(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetMaxPcieLinkGeneration(self._handle(index)))

    def pcie_gen_device_max(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(self._handle(index)))

    def pcie_width_current(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetCurrPcieLinkWidth(self._handle(index)))

    def pcie_width_max(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetMaxPcieLinkWidth(self._handle(index)))

    def performance_state(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetPerformanceState(self._handle(index)))

    def memory_total_bytes(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle(index)).total)

    def topology_common_ancestor(self, a: int, b: int) -> int:
        return int(self._nvml.nvmlDeviceGetTopologyCommonAncestor(self._handle(a), self._handle(b)))

    def nvlink_max_links(self) -> int:
        return int(getattr(self._nvml, "NVML_NVLINK_MAX_LINKS", 18))

    def nvlink_active(self, index: int, link: int) -> bool:
        return bool(self._nvml.nvmlDeviceGetNvLinkState(self._handle(index), link))

    def nvlink_remote_bus_id(self, index: int, link: int) -> str:
        return _text(self._nvml.nvmlDeviceGetNvLinkRemotePciInfo(self._handle(index), link).busId)

    def nvlink_remote_type(self, index: int, link: int) -> int:
        return int(self._nvml.nvmlDeviceGetNvLinkRemoteDeviceType(self._handle(index), link))

    def p2p_status(self, a: int, b: int, capability_index: int) -> int:
        return int(self._nvml.nvmlDeviceGetP2PStatus(self._handle(a), self._handle(b), capability_index))

    def gpu_fabric_info(self, index: int) -> dict:
        nvml, handle = self._nvml, self._handle(index)
        info = None
        # V (driver 550+) adds the health mask and summary; calling it on older drivers fails cleanly here
        # (pynvml looks the symbol up at call time) and the v1 call answers instead.
        for struct_name, call in (("c_nvmlGpuFabricInfo_v3_t", "nvmlDeviceGetGpuFabricInfoV"),
                                  ("c_nvmlGpuFabricInfo_t", "nvmlDeviceGetGpuFabricInfo")):
            struct, function = getattr(nvml, struct_name, None), getattr(nvml, call, None)
            if struct is None or function is None:
                continue
            try:
                candidate = struct()
                function(handle, candidate)
                info = candidate
                break
            except Exception:
                continue
        if info is None:
            raise NvmlUnavailable("no GPU fabric info")
        return fabric_info_text(nvml, info)


def _error_name(nvml: Any, code: int) -> str:
    """NVML_ERROR_INSUFFICIENT_RESOURCES -> "Insufficient Resources", as nvidia-smi -q prints it (no driver call)."""
    for name in dir(nvml):
        if name.startswith("NVML_ERROR_") and getattr(nvml, name) == code:
            return name[len("NVML_ERROR_"):].replace("_", " ").title()
    return str(code)


def fabric_info_text(nvml: Any, info: Any) -> dict:
    """A fabric info struct as nvidia-smi -q prints its Fabric block."""
    states = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}
    summaries = {0: "Not Supported", 1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
    status = int(getattr(info, "status", 0))
    status_text = "Success" if status == 0 else _error_name(nvml, status)
    uuid_bytes = bytes(getattr(info, "clusterUuid", b"") or b"")
    hexed = uuid_bytes.hex()
    cluster = f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}" if len(hexed) >= 32 else None
    state = int(getattr(info, "state", 0))
    summary = getattr(info, "healthSummary", None)
    return {
        "state": states.get(state, str(state)),
        "status": status_text if state == 3 else None,  # NVML: status is meaningful only once completed
        "clique_id": int(getattr(info, "cliqueId", 0)),
        "cluster_uuid": cluster,
        "health_summary": summaries.get(int(summary), str(summary)) if summary is not None else None,
        "health_mask": int(getattr(info, "healthMask")) if hasattr(info, "healthMask") else None,
    }


def _text(value: Any) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _init_error_sentence(nvml: Any, exc: Exception) -> str:
    def is_a(name: str) -> bool:
        cls = getattr(nvml, name, None)
        return isinstance(cls, type) and isinstance(exc, cls)

    if is_a("NVMLError_LibraryNotFound"):
        return (
            "the NVIDIA driver library libnvidia-ml.so.1 was not found, so no NVIDIA driver is installed or visible "
            "here (in a container, run it with --gpus all)"
        )
    if is_a("NVMLError_DriverNotLoaded"):
        return "the NVIDIA kernel driver is not loaded (`lsmod | grep nvidia` shows nothing); load it or reboot"
    if is_a("NVMLError_NoPermission"):
        return "NVML refused access to the GPUs (no permission on /dev/nvidia*); run as a user in the video group"
    if is_a("NVMLError_LibRmVersionMismatch"):
        return "the NVIDIA driver library and kernel module versions differ (driver updated without a reboot); reboot"
    return f"NVML could not start ({type(exc).__name__}: {exc})"
