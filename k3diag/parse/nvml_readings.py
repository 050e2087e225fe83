"""The NVML readings document `k3diag.collect.nvml` writes (live, or recorded in a bundle).

Chosen by the evidence's format hint; a text file is recognized only when it is that JSON
document (its `schema` field), so a readings file given to `k3diag analyze` by hand works.
Every fact cites the NVML call it came from, since a reading has no line number.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from k3diag.model.source import SourceRef
from k3diag.parse.json_values import whole_number
from k3diag.parse.text import Section

SCHEMA_PREFIX = "k3diag.nvml-readings/"
_P2P_STATUSES = {"OK", "CNS", "GNS", "TNS", "NS", "U", "DR"}
_CAPABILITIES = {"read", "write", "nvlink", "atomics", "pcie"}


@dataclass
class NvmlDevice:
    index: int
    name: str | None = None
    bus_id: str | None = None
    uuid: str | None = None
    numa_node: int | None = None
    gpu_numa_id: int | None = None
    cpu_affinity: str | None = None
    gen_current: int | None = None
    gen_max: int | None = None
    gen_device_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None
    performance_state: str | None = None
    memory_total_mib: int | None = None
    nvlinks_active: int | None = None
    nvlinks_total: int | None = None
    source: SourceRef | None = None
    pcie_source: SourceRef | None = None
    # Per link {link, active, remote_bus_id, remote_type} and the fabric registration, as recorded.
    nvlinks: list[dict] = field(default_factory=list)
    fabric: dict | None = None


@dataclass
class NvmlPair:
    a: int
    b: int
    path: str | None
    pcie_path: str | None
    nvlinks: int | None
    source: SourceRef


@dataclass
class NvmlP2P:
    src: int
    dst: int
    capability: str
    status: str | None
    source: SourceRef


@dataclass
class NvmlReadingsResult:
    error: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    devices: list[NvmlDevice] = field(default_factory=list)
    pairs: list[NvmlPair] = field(default_factory=list)
    p2p: list[NvmlP2P] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    head = text.lstrip()[:4096]
    if not head.startswith("{"):
        return 0.0
    # sort_keys puts "schema" late in the document, so look for it anywhere in a bounded prefix.
    return 1.0 if re.search(r'"schema"\s*:\s*"k3diag\.nvml-readings/', text[:200_000]) else 0.0


def parse(section: Section, input_name: str) -> NvmlReadingsResult:
    result = NvmlReadingsResult()
    try:
        document = json.loads(section.text)
    except (ValueError, RecursionError) as exc:
        result.warnings.append(f"{input_name}: the NVML readings are not valid JSON ({exc})")
        return result
    if not isinstance(document, dict):
        result.warnings.append(f"{input_name}: the NVML readings are not a JSON object")
        return result
    schema = document.get("schema")
    if not (isinstance(schema, str) and schema.startswith(SCHEMA_PREFIX)):
        result.warnings.append(f"{input_name}: unexpected readings schema {schema!r}; read as {SCHEMA_PREFIX}1")
    result.error = _str(document.get("error"))
    result.driver_version = _str(document.get("driver_version"))
    cuda = document.get("cuda_driver_version")
    if isinstance(cuda, int) and cuda > 0:
        result.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"

    def cite(call: str) -> SourceRef:
        return SourceRef(input_name, None, call)

    for raw in _list(document.get("devices"), "devices", result):
        device = _device(raw, cite, result)
        if device is not None:
            result.devices.append(device)
    for raw in _list(document.get("links"), "links", result):
        if not isinstance(raw, dict):
            result.warnings.append(f"{input_name}: a link reading that is not an object was skipped")
            continue
        a, b = _int(raw.get("a")), _int(raw.get("b"))
        if a is None or b is None or a == b:
            result.warnings.append(f"{input_name}: a link reading without two GPU indices was skipped")
            continue
        path = _str(raw.get("path"))
        result.pairs.append(
            NvmlPair(
                a=a,
                b=b,
                path=path,
                pcie_path=_str(raw.get("pcie_path")),
                nvlinks=_int(raw.get("nvlinks")),
                source=cite(_link_call(a, b, raw)),
            )
        )
    for raw in _list(document.get("p2p"), "p2p", result):
        if not isinstance(raw, dict):
            result.warnings.append(f"{input_name}: a P2P reading that is not an object was skipped")
            continue
        src, dst = _int(raw.get("src")), _int(raw.get("dst"))
        capability = _str(raw.get("capability"))  # a list or object here is no capability (and unhashable)
        status = _str(raw.get("status"))
        if src is None or dst is None or capability not in _CAPABILITIES:
            result.warnings.append(f"{input_name}: a P2P reading without GPUs or a known capability was skipped")
            continue
        if status is not None and status not in _P2P_STATUSES:
            result.warnings.append(f"{input_name}: unknown P2P status {status!r} from GPU{src} to GPU{dst}")
        result.p2p.append(
            NvmlP2P(
                src=src,
                dst=dst,
                capability=capability,
                status=status,
                source=cite(f"nvmlDeviceGetP2PStatus(GPU{src}, GPU{dst}, {capability})="
                            + " ".join(_said(raw.get("raw"), f"({status})" if status is not None else None))),
            )
        )
    return result


def _said(*values: Any) -> list[str]:
    """The values the file holds, as text; those it lacks left out (an evidence line never reads "None")."""
    return [str(value) for value in values if value is not None] or ["not read"]


def _link_call(a: int, b: int, raw: dict) -> str:
    level, pcie_path, nvlinks = raw.get("topology_level"), raw.get("pcie_path"), raw.get("nvlinks")
    text = f"nvmlDeviceGetTopologyCommonAncestor(GPU{a}, GPU{b})=" + " ".join(
        _said(level, f"({pcie_path})" if pcie_path is not None else None))
    return text + (f", NVLinks joining them: {nvlinks}" if nvlinks is not None else "")


def _device(raw: Any, cite, result: NvmlReadingsResult) -> NvmlDevice | None:
    if not isinstance(raw, dict) or _int(raw.get("index")) is None:
        result.warnings.append("a device reading without an index was skipped")
        return None
    index = _int(raw["index"])
    pcie = raw.get("pcie") if isinstance(raw.get("pcie"), dict) else {}
    links = raw.get("nvlinks") if isinstance(raw.get("nvlinks"), list) else []
    memory_total_mib = _reading(raw.get("memory_total_mib"), 1, f"GPU{index}: memory_total_mib", "a size in MiB", result)

    def pcie_count(key: str) -> int | None:  # 0 stays: a link NVML reads as down
        return _reading(pcie.get(key), 0, f"GPU{index}: pcie.{key}", "a count", result)

    device = NvmlDevice(
        index=index,
        name=_str(raw.get("name")),
        bus_id=_str(raw.get("bus_id")),
        uuid=_str(raw.get("uuid")),
        numa_node=_int(raw.get("numa_node")),
        gpu_numa_id=_int(raw.get("gpu_numa_id")),
        cpu_affinity=_str(raw.get("cpu_affinity")),
        gen_current=pcie_count("gen_current"),
        gen_max=pcie_count("gen_max"),
        gen_device_max=_int(pcie.get("gen_device_max")),
        width_current=pcie_count("width_current"),
        width_max=pcie_count("width_max"),
        performance_state=_str(raw.get("performance_state")),
        memory_total_mib=memory_total_mib,
        nvlinks_active=sum(1 for link in links if isinstance(link, dict) and link.get("active")) if links else None,
        nvlinks_total=len(links) if links else None,
    )
    device.nvlinks = [link for link in links if isinstance(link, dict) and _int(link.get("link")) is not None]
    device.fabric = raw.get("fabric") if isinstance(raw.get("fabric"), dict) else None
    named = " at ".join(part for part in (device.name, device.bus_id) if part)
    device.source = cite(f"NVML device {index}" + (f": {named}" if named else ""))
    # the readings as the file gives them (a damaged one quoted, not as the "None" it was read as); one
    # the file lacks is left out
    calls = (("nvmlDeviceGetCurrPcieLinkGeneration", pcie.get("gen_current")),
             ("nvmlDeviceGetMaxPcieLinkGeneration", pcie.get("gen_max")),
             ("nvmlDeviceGetCurrPcieLinkWidth", pcie.get("width_current")),
             ("nvmlDeviceGetMaxPcieLinkWidth", pcie.get("width_max")),
             ("nvmlDeviceGetPerformanceState", raw.get("performance_state")))
    device.pcie_source = cite(" ".join([f"GPU{index}"] + [f"{call}={value}" for call, value in calls
                                                          if value is not None]))
    return device


def _reading(value: Any, minimum: int, where: str, kind: str, result: NvmlReadingsResult) -> int | None:
    """A count or size NVML gives, when it is an integer of at least `minimum`. A value of another type, or
    out of range, is not a reading (a hand-edited or damaged file): said, naming `where`, and not used (a GPU
    of -5 MiB made advise plan for -0.0 GiB)."""
    number = whole_number(value, minimum)
    if number is not None:
        return number
    if value is not None:
        result.warnings.append(f"{where} is {value!r}, not {kind}; ignored")
    return None


def _list(value: Any, name: str, result: NvmlReadingsResult) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        result.warnings.append(f"the readings' {name!r} is not a list; ignored")
        return []
    return value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
