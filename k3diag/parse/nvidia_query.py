"""`nvidia-smi -q`: per-GPU identity, PCIe link state and performance state.

The output is an indented tree of `Key : Value` lines, one block per GPU opened by
`GPU 00000000:1B:00.0` (`GPU 0:2:0` on 2011-era drivers). Layouts by driver generation:

* R270-era: `Memory Usage > Total : 5375 Mb`, the P-state as `Power Readings > Power State`,
  no GPU Link Info.
* R4xx: `FB Memory Usage`, `Performance State`, GPU Link Info with Max/Current only.
* R5xx and later: PCIe Generation adds Device Current / Device Max / Host Max.

Blocks appear in bus-id order, which is nvidia-smi's own index order; `-i N` shows one GPU,
and then its index is N, not 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.fabric import GpuFabricState
from k3diag.model.identity import InputIdentity
from k3diag.model.source import SourceRef
from k3diag.parse.lazy_re import lazy
from k3diag.parse.nvidia_fabric import NVSMI_LOG_RE, read_block as read_fabric_block
from k3diag.parse.nvidia_topo_matrix import bare_command
from k3diag.parse.text import Section, normalize

START_RE = lazy(r"^\s*=+\s*NVSMI LOG\s*=+\s*$")

_GPU_BLOCK_RE = lazy(r"^GPU\s+([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\s*$")
# A key starts after the indentation (`\S`, then the shortest run to a `\S` before ` :`), and a value or a
# title ends at its last non-blank: no two repeats can take the same blank, so a line of 20,000 blanks (or
# with them inside) is read in one pass (`\s*` then `[^:]*?\S`, and `.*?\s*$`, were quadratic in it: 2.4 s).
_KEY_VALUE_RE = lazy(r"^(?P<indent>\s*)(?P<key>\S|[^\s:][^:]*?\S)\s+:\s*(?P<value>(?:.*\S)?)\s*$")
_SECTION_RE = lazy(r"^(?P<indent>\s*)(?P<name>[A-Za-z](?:[^:]*[^:\s])?)\s*$")
_INDEX_ARG_RE = lazy(r"(?:^|\s)(?:-i\s*|--id=)(\d+)(?:\s|$)")
_NUMBER_RE = lazy(r"^(\d+)")


@dataclass
class QueryGpu:
    block_bus_id: str  # as printed on the `GPU ...` line
    index: int | None = None
    index_from: str | None = None  # "order" | "command" | "minor"
    name: str | None = None
    bus_id: str | None = None  # PCI > Bus Id as printed
    uuid: str | None = None
    minor_number: int | None = None
    performance_state: str | None = None
    memory_total_mib: int | None = None
    gen_max: int | None = None
    gen_current: int | None = None
    gen_device_current: int | None = None
    gen_device_max: int | None = None
    gen_host_max: int | None = None
    width_max: int | None = None
    width_current: int | None = None
    utilization_gpu_percent: int | None = None
    idle_throttle_active: bool | None = None  # Clocks (Throttle|Event) Reasons > Idle
    sources: dict[str, SourceRef] = field(default_factory=dict)  # field name -> line it came from
    # The NVLink fabric registration (`Fabric` block: State, Status, CliqueId, ClusterUUID, Health), when printed.
    fabric: GpuFabricState | None = None


@dataclass
class NvidiaQueryResult:
    driver_version: str | None = None
    cuda_version: str | None = None
    attached_gpus: int | None = None
    gpus: list[QueryGpu] = field(default_factory=list)
    sources: dict[str, SourceRef] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # What the output says of its machine beyond the GPUs it shows: `Attached GPUs : 8` above the one block
    # of `nvidia-smi -q -i 0` is a machine of 8 GPUs, not of 1 (`k3diag.join.identity` keeps the larger count)
    identity: InputIdentity = field(default_factory=InputIdentity)


# (path suffix under the GPU block, field, converter); paths are section names joined by "/".
def _int(value: str) -> int | None:
    match = _NUMBER_RE.match(value.strip())
    return int(match.group(1)) if match else None


def _text(value: str) -> str | None:
    value = value.strip()
    # `CUDA Version : Not Found` on a vGPU host driver (R580 on an RTX PRO 6000 server), which has no CUDA.
    return None if value in ("", "N/A", "[N/A]", "Unknown Error", "Not Supported", "[Not Supported]", "Not Found") else value


def _pstate(value: str) -> str | None:
    value = value.strip()
    return value if re.fullmatch(r"P\d{1,2}", value) else None


def _active(value: str) -> bool | None:
    value = value.strip().lower()
    if value == "active":
        return True
    if value == "not active":
        return False
    return None


_GPU_FIELDS: tuple[tuple[str, str, object], ...] = (
    ("Product Name", "name", _text),
    ("GPU UUID", "uuid", _text),
    ("Minor Number", "minor_number", _int),
    ("PCI/Bus Id", "bus_id", _text),
    ("Performance State", "performance_state", _pstate),
    ("FB Memory Usage/Total", "memory_total_mib", _int),
    ("PCI/GPU Link Info/PCIe Generation/Max", "gen_max", _int),
    ("PCI/GPU Link Info/PCIe Generation/Current", "gen_current", _int),
    ("PCI/GPU Link Info/PCIe Generation/Device Current", "gen_device_current", _int),
    ("PCI/GPU Link Info/PCIe Generation/Device Max", "gen_device_max", _int),
    ("PCI/GPU Link Info/PCIe Generation/Host Max", "gen_host_max", _int),
    ("PCI/GPU Link Info/Link Width/Max", "width_max", _int),
    ("PCI/GPU Link Info/Link Width/Current", "width_current", _int),
    ("Utilization/Gpu", "utilization_gpu_percent", _int),
    ("Clocks Throttle Reasons/Idle", "idle_throttle_active", _active),
    ("Clocks Event Reasons/Idle", "idle_throttle_active", _active),
)
# 2011-era names, used only when the current name is absent.
_OLD_FIELDS: tuple[tuple[str, str, object], ...] = (
    ("Memory Usage/Total", "memory_total_mib", _int),
    ("Power Readings/Power State", "performance_state", _pstate),
)


# tried only where a run of blanks starts (searched from inside a long run, it was quadratic in its length)
_MARKDOWN_BREAK_RE = re.compile(r"(?<!\s)\s+\\$")


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    if NVSMI_LOG_RE.search(head):
        return 1.0
    score = 0.0
    if re.search(r"(?m)^GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$", head):
        score += 0.4
    for marker in ("Product Name", "GPU Link Info", "PCIe Generation", "Bus Id", "Performance State"):
        if re.search(rf"(?m)^[^\S\n]+{marker}\b", head):
            score += 0.15
    return min(score, 1.0)


def parse(section: Section, input_name: str) -> NvidiaQueryResult:
    result = NvidiaQueryResult()
    # Markdown hard line breaks: a paste that ends lines with ` \` (`GPU 0000:00:1E.0 \`); no value ends so.
    raw_lines = normalize(section.text).split("\n")
    # (only a line ending in the backslash can hold one: a regex over every line was a quarter of the parse)
    lines = [_MARKDOWN_BREAK_RE.sub("", line) if line.endswith("\\") else line for line in raw_lines]

    def ref(index: int) -> SourceRef:
        return SourceRef(input_name, section.first_line + index, raw_lines[index].rstrip())

    blocks: list[tuple[int, int]] = []  # (header line index, end)
    for index, line in enumerate(lines):
        if _GPU_BLOCK_RE.match(line.strip()) and not line[:1].isspace():
            if blocks:
                blocks[-1] = (blocks[-1][0], index)
            blocks.append((index, len(lines)))

    header_end = blocks[0][0] if blocks else len(lines)
    for index in range(header_end):
        match = _KEY_VALUE_RE.match(lines[index])
        if not match or match.group("indent"):
            continue
        key, value = match.group("key"), match.group("value")
        if key == "Driver Version":
            result.driver_version = _text(value)
            result.sources["driver_version"] = ref(index)
        elif key == "CUDA Version":
            result.cuda_version = _text(value)
            result.sources["cuda_version"] = ref(index)
        elif key == "Attached GPUs":
            result.attached_gpus = _int(value)
            if result.attached_gpus:
                result.identity.set_count(result.attached_gpus, ref(index))

    for start, end in blocks:
        gpu = QueryGpu(block_bus_id=_GPU_BLOCK_RE.match(lines[start].strip()).group(1))
        gpu.sources["block"] = ref(start)
        _parse_block(lines, start + 1, end, gpu, ref, result)
        for index in range(start + 1, end):
            if lines[index].strip() == "Fabric":
                gpu.fabric, _ = read_fabric_block(lines, index, section.first_line, input_name)
                break
        result.gpus.append(gpu)

    if not blocks:
        result.warnings.append(
            f"{input_name}: no GPU block (a line `GPU 00000000:1B:00.0`) in this nvidia-smi -q output"
        )
    _assign_indices(section, lines, result)
    return result


def _parse_block(lines: list[str], start: int, end: int, gpu: QueryGpu, ref, result: NvidiaQueryResult) -> None:
    indents = {len(line) - len(line.lstrip()) for line in lines[start:end] if line.strip()}
    # Pastes that lost their indentation cannot nest by indent; the last section title wins.
    flat = len(indents) <= 1
    stack: list[tuple[int, str]] = []
    found: dict[str, tuple[str, int]] = {}
    for index in range(start, end):
        line = lines[index]
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _KEY_VALUE_RE.match(line)
        if match is None:
            section = _SECTION_RE.match(line)
            if section is None:
                continue
            if flat:
                stack = _flat_push(stack, section.group("name"))
            else:
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                stack.append((indent, section.group("name")))
            continue
        if not flat:
            while stack and stack[-1][0] >= indent:
                stack.pop()
        path = "/".join([name for _, name in stack] + [match.group("key")])
        found.setdefault(path, (match.group("value"), index))
        if flat:
            # Top-level keys after a section title look nested when nothing is indented.
            found.setdefault(match.group("key"), (match.group("value"), index))
    _apply(found, _GPU_FIELDS, gpu, ref, overwrite=True)
    _apply(found, _OLD_FIELDS, gpu, ref, overwrite=False)
    if gpu.bus_id is None:
        gpu.bus_id = gpu.block_bus_id


def _flat_push(stack: list[tuple[int, str]], name: str) -> list[tuple[int, str]]:
    # Without indentation, "PCIe Generation" and "Link Width" are siblings under "GPU Link Info".
    nesting = {
        "GPU Link Info": ["PCI"],
        "PCIe Generation": ["PCI", "GPU Link Info"],
        "Link Width": ["PCI", "GPU Link Info"],
    }
    parents = nesting.get(name, [])
    return [(0, parent) for parent in parents] + [(0, name)]


def _apply(found: dict[str, tuple[str, int]], fields, gpu: QueryGpu, ref, overwrite: bool) -> None:
    for path, attribute, convert in fields:
        if path not in found:
            continue
        if not overwrite and getattr(gpu, attribute) is not None:
            continue
        value, index = found[path]
        converted = convert(value)
        if converted is None and getattr(gpu, attribute) is not None:
            continue
        setattr(gpu, attribute, converted)
        gpu.sources[attribute] = ref(index)


def _assign_indices(section: Section, lines: list[str], result: NvidiaQueryResult) -> None:
    command = section.command or bare_command(lines)
    selected = None
    if command:
        # `-i 0,1` (several GPUs) does not match: the digits must end at a space.
        match = _INDEX_ARG_RE.search(command)
        if match:
            selected = int(match.group(1))
    if selected is not None and len(result.gpus) == 1:
        result.gpus[0].index, result.gpus[0].index_from = selected, "command"
        return
    shown, attached = len(result.gpus), result.attached_gpus
    partial = attached is not None and 0 < shown < attached
    for position, gpu in enumerate(result.gpus):
        if partial and gpu.minor_number is not None:
            # /dev/nvidiaN usually follows the index; a better guess than the position in a partial output.
            gpu.index, gpu.index_from = gpu.minor_number, "minor"
        else:
            gpu.index, gpu.index_from = position, "order"
    if partial:
        result.warnings.append(
            f"the output shows {shown} of {attached} attached GPUs and no `-i N` says which; their indices are "
            "guessed (minor number, else order shown) and are matched by bus id first when another input knows the GPU"
        )
