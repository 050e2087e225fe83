"""`amd-smi static --bus` (and the BUS, ASIC and NUMA parts of a whole `amd-smi static`): each GPU's PCI bus id,
its PCIe capability (width, speed, generation), slot type, name and NUMA node.

Layouts in the fixtures (ROCm/amdsmi README, 2023 and current):

    GPU: 0                                   GPU: 0            (2023: sections not indented)
        ASIC:                                ASIC:
            MARKET_NAME: MI300A                  MARKET_NAME: 0x73bf
        BUS:                                 BUS:
            BDF: 0000:01:00.0                    BDF: 0000:23:00.0
            MAX_PCIE_WIDTH: 16                   MAX_PCIE_SPEED: 16 GT/s
            MAX_PCIE_SPEED: 32 GT/s              MAX_PCIE_LANES: 16
            PCIE_INTERFACE_VERSION: Gen 5        PCIE_INTERFACE_VERSION: Gen 4
            SLOT_TYPE: PCIE                      SLOT_TYPE: PCIE

`--json` prints `[{"gpu": 0, "bus": {"bdf": ..., "max_pcie_width": 16, "max_pcie_speed": {"value": 16,
"unit": "GT/s"}, "pcie_interface_version": "Gen 4", "slot_type": "CEM"}, "asic": {"market_name": ...}}]`.
CPU blocks (`CPU: 0`, MI300A hosts) are skipped.
"""

from __future__ import annotations

import json
import re

from k3diag.model.amd_records import AmdGpuFact, AmdTopology
from k3diag.model.source import SourceRef
from k3diag.parse.ids import is_bdf, normalize_bdf
from k3diag.parse.text import Section, normalize

FORMAT = "amd-smi-static-bus"
_DEVICE_RE = re.compile(r"^\s*(?P<kind>GPU|CPU)\s*:?\s*(?P<index>\d+)\s*:?\s*$")
_KV_RE = re.compile(r"^\s*(?P<key>[A-Z](?:[A-Z0-9_ ]*[A-Z0-9_])?)\s*:\s*(?P<value>(?:.*\S)?)\s*$")
_GEN_BY_SPEED = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_GEN_RE = re.compile(r"Gen\s*(\d)", re.I)
_JSON_START_RE = re.compile(r"\s*(?:\[\s*[{\]]|\{\s*[\"}])")


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    if re.search(r"(?m)^[^\S\n]*BUS:\s*$", head) and re.search(r"(?m)^[^\S\n]*BDF:\s*\S", head) and \
            re.search(r"MAX_PCIE_(?:WIDTH|LANES|SPEED)", head):
        return 0.95
    if re.search(r'"max_pcie_(?:width|speed)"\s*:', head) and re.search(r'"bdf"\s*:', head):
        return 0.9
    return 0.0


def _gen(speed: float | None, version: str | None) -> int | None:
    if speed is not None and speed in _GEN_BY_SPEED:
        return _GEN_BY_SPEED[speed]
    match = _GEN_RE.search(version or "")
    return int(match.group(1)) if match else None


def _speed(text: str | None) -> float | None:
    match = re.match(r"^\s*([\d.]+)\s*GT/s", text or "")
    return float(match.group(1)) if match else None


def _int(text) -> int | None:
    match = re.match(r"^\s*(-?\d+)", str(text)) if text is not None else None
    return int(match.group(1)) if match else None


def parse(section: Section, input_name: str) -> AmdTopology:
    text = normalize(section.text)
    # `[root@host ~]# amd-smi static` above the text output starts with "[" too: JSON is "[" then "{" or "]".
    if _JSON_START_RE.match(text) or re.search(r'"bus"\s*:\s*\{', text[:4000]):
        return _parse_json(text, section.first_line, input_name)
    result = AmdTopology(tool=FORMAT)
    lines = text.split("\n")
    fact: AmdGpuFact | None = None
    block: str | None = None
    values: dict[str, tuple[str, SourceRef]] = {}

    def finish() -> None:
        if fact is None:
            return
        _apply(fact, values, result)
        values.clear()

    for offset, raw in enumerate(lines):
        line = raw.rstrip()
        if not line.strip():
            continue
        ref = SourceRef(input_name, section.first_line + offset, line)
        device = _DEVICE_RE.match(line)
        if device:
            finish()
            block = None
            if device.group("kind") == "GPU":
                fact = result.gpu_by_index(int(device.group("index")))
                fact.source = ref
            else:
                fact = None
            continue
        if fact is None:
            continue
        kv = _KV_RE.match(line)
        if kv is None:
            continue
        key, value = kv.group("key").strip(), kv.group("value")
        if not value:
            block = key  # a section title: ASIC, BUS, NUMA...
            continue
        values[f"{block}/{key}"] = (value, ref)
    finish()
    if not result.gpus:
        result.warnings.append(f"{input_name}: no `GPU: N` block with a BUS section in this amd-smi static output")
    return result


def _apply(fact: AmdGpuFact, values: dict[str, tuple[str, SourceRef]], result: AmdTopology) -> None:
    def get(*keys: str) -> tuple[str, SourceRef] | None:
        for key in keys:
            if key in values and values[key][0] not in ("N/A", ""):
                return values[key]
        return None

    bdf = get("BUS/BDF")
    if bdf and is_bdf(bdf[0]):
        fact.bus_id = normalize_bdf(bdf[0])
        fact.source = bdf[1]
    width = get("BUS/MAX_PCIE_WIDTH", "BUS/MAX_PCIE_LANES")
    fact.pcie_width_max = _int(width[0]) if width else None
    speed = get("BUS/MAX_PCIE_SPEED")
    version = get("BUS/MAX_PCIE_INTERFACE_VERSION", "BUS/PCIE_INTERFACE_VERSION")
    fact.pcie_gen_max = _gen(_speed(speed[0]) if speed else None, version[0] if version else None)
    name = get("ASIC/MARKET_NAME")
    if name and not re.fullmatch(r"0x[0-9a-fA-F]+", name[0]):
        fact.name = name[0]
    numa = get("NUMA/NODE")
    if numa and _int(numa[0]) is not None and _int(numa[0]) >= 0:
        fact.numa_node = _int(numa[0])
    if fact.bus_id is None:
        result.warnings.append(f"GPU {fact.index}: no BDF in its BUS section")


def _parse_json(text: str, first_line: int, input_name: str) -> AmdTopology:
    result = AmdTopology(tool=FORMAT)
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=0)
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        result.warnings.append(f"{input_name}: the amd-smi static JSON could not be read ({exc})")
        return result
    items = data if isinstance(data, list) else data.get("gpu_data", [data]) if isinstance(data, dict) else []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("bus"), dict) or _int(item.get("gpu")) is None:
            continue
        fact = result.gpu_by_index(_int(item["gpu"]))  # type: ignore[arg-type]
        bus = item["bus"]
        line_no = first_line + text[:start].count("\n")
        if isinstance(bus.get("bdf"), str) and is_bdf(bus["bdf"]):
            fact.bus_id = normalize_bdf(bus["bdf"])
            fact.source = SourceRef(input_name, line_no, f'"bdf": "{bus["bdf"]}"')
        fact.pcie_width_max = _int(bus.get("max_pcie_width"))
        speed = bus.get("max_pcie_speed")
        value = speed.get("value") if isinstance(speed, dict) else speed
        fact.pcie_gen_max = _gen(float(value) if isinstance(value, (int, float)) else None,
                                 str(bus.get("max_pcie_interface_version") or bus.get("pcie_interface_version") or ""))
        asic = item.get("asic") if isinstance(item.get("asic"), dict) else {}
        if isinstance(asic.get("market_name"), str) and asic["market_name"] not in ("N/A", ""):
            fact.name = asic["market_name"]
        numa = item.get("numa") if isinstance(item.get("numa"), dict) else {}
        if _int(numa.get("node")) is not None and _int(numa.get("node")) >= 0:
            fact.numa_node = _int(numa.get("node"))
    if not result.gpus:
        result.warnings.append(f"{input_name}: no GPU with a `bus` object in this amd-smi static JSON")
    return result
