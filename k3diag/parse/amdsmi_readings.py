"""Recorded amdsmi readings (`amdsmi-readings.json`, written by `k3diag.collect.amdsmi`).

Live evidence carries `format_hint="amdsmi-readings"`; a saved file is recognized only by
its own schema id, never by its content otherwise. Facts cite the library call that
produced them (line None: a library reading has no line).
"""

from __future__ import annotations

import json
import re
from typing import Any

from k3diag.model.amd_records import AmdTopology, normalize_link_type
from k3diag.model.source import SourceRef
from k3diag.parse.ids import is_bdf, normalize_bdf
from k3diag.parse.json_values import whole_number
from k3diag.parse.text import Section

FORMAT = "amdsmi-readings"
ORIGIN = "amdsmi"


def sniff(text: str) -> float:
    if not text.lstrip()[:16].startswith("{"):
        return 0.0
    # sort_keys puts "schema" late in the document: look in a bounded prefix.
    return 1.0 if re.search(r'"schema"\s*:\s*"k3diag\.amdsmi-readings/', text[:200_000]) else 0.0


def parse(section: Section, input_name: str) -> AmdTopology:
    result = AmdTopology(tool=ORIGIN)
    try:
        readings = json.loads(section.text)
    except (json.JSONDecodeError, ValueError) as exc:
        result.warnings.append(f"amdsmi readings are not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})")
        return result
    if not isinstance(readings, dict):
        result.warnings.append("amdsmi readings are not a JSON object")
        return result
    for error in _list(readings.get("errors")):
        result.warnings.append(f"amdsmi: {error}")
    index_to_bus: dict[int, str | None] = {}
    for gpu in _list(readings.get("processors")):
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            result.warnings.append("an amdsmi processor reading without an index was skipped")
            continue
        index = gpu["index"]
        bus = gpu.get("bus_id")
        bus = normalize_bdf(bus) if isinstance(bus, str) and is_bdf(bus) else None
        index_to_bus[index] = bus
        fact = result.gpu_by_index(index)
        fact.bus_id = bus
        fact.name = gpu.get("name") if isinstance(gpu.get("name"), str) else None
        # -1: amdsmi's "no NUMA node" (a single-socket host), not a damaged reading
        fact.numa_node = _int(gpu.get("numa_node"), f"GPU{index} numa_node", result, minimum=-1)
        if fact.numa_node is not None and fact.numa_node < 0:
            fact.numa_node = None
        pcie = gpu.get("pcie") if isinstance(gpu.get("pcie"), dict) else {}
        fact.pcie_gen_current = _int(pcie.get("gen_current"), f"GPU{index} pcie.gen_current", result)
        fact.pcie_gen_max = _int(pcie.get("gen_max"), f"GPU{index} pcie.gen_max", result)
        fact.pcie_width_current = _int(pcie.get("width_current"), f"GPU{index} pcie.width_current", result)
        fact.pcie_width_max = _int(pcie.get("width_max"), f"GPU{index} pcie.width_max", result)
        # what was read, and only that: a reading the file lacks is left out, never quoted as "None"
        said = [f"bdf {bus}" if bus else "", f"NUMA node {fact.numa_node}" if fact.numa_node is not None else "",
                fact.name or ""]
        fact.source = SourceRef(input_name, None, f"amdsmi GPU{index}: " + (", ".join(filter(None, said))
                                                                              or "no bdf, NUMA node or name read"))
        errors = gpu.get("errors") if isinstance(gpu.get("errors"), dict) else {}
        for key, error in errors.items():
            result.warnings.append(f"amdsmi GPU{index} {key}: {error}")
    result.tables.append("processors")
    for pair in _list(readings.get("pairs")):
        if not isinstance(pair, dict) or not isinstance(pair.get("src"), int) or not isinstance(pair.get("dst"), int):
            continue
        src, dst = pair["src"], pair["dst"]
        if src == dst:
            continue
        fact = result.pair(
            src_index=src, dst_index=dst, src_bus_id=index_to_bus.get(src), dst_bus_id=index_to_bus.get(dst)
        )
        raw = pair.get("link_type")
        fact.link_type = normalize_link_type(raw) if isinstance(raw, str) else None
        fact.link_type_raw = None if raw is None else str(raw)
        label = f"GPU{src} -> GPU{dst}"
        fact.hops = _int(pair.get("hops"), f"{label} hops", result)
        fact.weight = _int(pair.get("weight"), f"{label} weight", result)
        accessible = pair.get("p2p_accessible")
        fact.accessible = accessible if isinstance(accessible, bool) else None
        fact.bandwidth_min = _int(pair.get("bandwidth_min"), f"{label} bandwidth_min", result)
        fact.bandwidth_max = _int(pair.get("bandwidth_max"), f"{label} bandwidth_max", result)
        hops = f", hops {fact.hops}" if fact.hops is not None else ""
        fact.sources["link_type"] = SourceRef(
            input_name, None, f"amdsmi_topo_get_link_type({label}): {fact.link_type_raw or 'not read'}{hops}"
        )
        fact.sources["weight"] = SourceRef(input_name, None, f"amdsmi_topo_get_link_weight({label}): "
                                                             f"{'not read' if fact.weight is None else fact.weight}")
        fact.sources["accessible"] = SourceRef(
            input_name, None, f"amdsmi_is_P2P_accessible({label}): "
                              f"{'not read' if fact.accessible is None else fact.accessible}"
        )
        if fact.bandwidth_max is not None:
            fact.sources["bandwidth"] = SourceRef(
                input_name,
                None,
                f"amdsmi_get_minmax_bandwidth_between_processors({label}): {fact.bandwidth_min}-{fact.bandwidth_max}",
            )
    result.tables.append("pairs")
    return result


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _int(value: Any, where: str, result: AmdTopology, minimum: int = 0) -> int | None:
    """A count amdsmi gave, when it is a whole number of at least `minimum`. Another value (`NaN`, `Infinity` or
    `1e999`, which Python's JSON reader takes; a string, a fraction, a negative count: a damaged or hand-edited
    file) is no reading, and said, naming `where`; an absent one (`null`) is only unknown."""
    number = whole_number(value, minimum)
    if number is not None or value is None:
        return number
    shown = json.dumps(value) if isinstance(value, (int, float, str, bool)) else type(value).__name__
    result.warnings.append(f"amdsmi {where} is {shown[:40]}, not a count; read as not known")
    return None
