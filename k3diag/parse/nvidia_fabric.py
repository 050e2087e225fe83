"""`nvidia-smi -q -d FABRIC` and the Fabric block of `nvidia-smi -q`: each GPU's NVLink fabric registration.

    GPU 00000000:18:00.0
        Fabric
            State                             : Completed        (In Progress, Not Started, Not Supported, N/A)
            Status                            : Success          (Insufficient Resources, N/A...)
            CliqueId                          : 2
            ClusterUUID                       : dc6e40c4-d722-4357-9ba6-5291dd461278
            Health
                Summary                       : Unhealthy
                Bandwidth                     : Full
                Route Recovery in progress    : N/A ...

Pastes seen: a whole `-q` (the generic -q parser hands its Fabric block here), a bare Fabric block from a PR
(no GPU line, no indentation of the title), a `grep -C3` excerpt with `--` separators. A block under a
`GPU <bus id>` line belongs to that GPU; bare blocks are numbered in order (nvidia-smi's own order), or take
the index of `-i N` when the command says it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.fabric import GpuFabricState
from k3diag.model.source import SourceRef
from k3diag.parse.lazy_re import lazy
from k3diag.parse.text import Section, normalize

# The `==== NVSMI LOG ====` banner anywhere in a text (`nvidia_query` sniffs with it too), searched only from
# where a run of `=` starts: from inside a 20,000-long run `=+` ran to its end from every position.
NVSMI_LOG_RE = lazy(r"(?<!=)=+\s*NVSMI LOG\s*=+")

FORMAT = "nvidia-smi-query-fabric"

_KEY_VALUE_RE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z](?:[^:]*[^:\s])?)\s*:\s*(?P<value>(?:.*\S)?)\s*$")
_GPU_BLOCK_RE = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_INDEX_ARG_RE = re.compile(r"(?:^|\s)(?:-i\s*|--id=)(\d+)(?:\s|$)")
# Keys of the Fabric block (and its Health sub-block) -> GpuFabricState field; the rest go to `health`.
_TOP_KEYS = {"state": "state", "status": "status", "cliqueid": "clique_id", "clique id": "clique_id",
             "clusteruuid": "cluster_uuid", "cluster uuid": "cluster_uuid"}
_HEALTH_KEYS = ("summary", "bandwidth", "route recovery in progress", "route unhealthy", "access timeout recovery",
                "incorrect configuration", "partition assigned")
_NA = {"", "n/a", "[n/a]", "not supported", "[not supported]"}


@dataclass
class FabricBlock:
    state: GpuFabricState
    bus_id: str | None = None  # from the `GPU <bus id>` line above, as printed
    index: int | None = None  # position or `-i N`


@dataclass
class FabricQueryResult:
    driver_version: str | None = None
    blocks: list[FabricBlock] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _value(text: str) -> str | None:
    return None if text.strip().lower() in _NA else text.strip()


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    # A whole `nvidia-smi -q` (product name, PCI...) belongs to the generic -q parser, which reads this block too.
    # Looked for first: one search, where the line scans below took ~3 ms of every 8-GPU `-q` a file holds.
    if re.search(r"(?m)^[^\S\n]+(Product Name|Bus Id|GPU Link Info|FB Memory Usage)\s*:?", head):
        return 0.0
    lines = head.split("\n")[:3000]
    titles = sum(1 for line in lines if line.strip() == "Fabric")
    keys = sum(1 for line in lines if (m := _KEY_VALUE_RE.match(line)) and m.group("key").strip().lower()
               in ("cliqueid", "clusteruuid", "clique id", "cluster uuid"))
    states = sum(1 for line in lines if (m := _KEY_VALUE_RE.match(line)) and m.group("key").strip() == "State")
    # Older drivers print only `State : N/A` / `Status : N/A` under Fabric (no clique fields).
    if not titles or not (keys or (states and NVSMI_LOG_RE.search(head))):
        return 0.0
    return 1.0


def parse(section: Section, input_name: str) -> FabricQueryResult:
    result = FabricQueryResult()
    lines = normalize(section.text).split("\n")
    command = section.command or next((line.strip() for line in lines if line.strip()), "")
    selected = _INDEX_ARG_RE.search(command) if "nvidia-smi" in command else None
    bus: str | None = None
    position = 0
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        stripped = line.strip()
        gpu = _GPU_BLOCK_RE.match(stripped)
        if gpu:
            bus = gpu.group("bus")
        match = _KEY_VALUE_RE.match(line)
        if match and match.group("key").strip() == "Driver Version" and not match.group("indent"):
            result.driver_version = _value(match.group("value"))
        if stripped == "Fabric":
            state, index = read_block(lines, index, section.first_line, input_name)
            block = FabricBlock(state=state, bus_id=bus, index=position)
            if selected and len([b for b in lines if b.strip() == "Fabric"]) == 1:
                block.index = int(selected.group(1))
            result.blocks.append(block)
            position += 1
            bus = None
            continue
        index += 1
    if not result.blocks:
        result.warnings.append(f"{input_name}: no `Fabric` block in this nvidia-smi -q output")
    return result


def read_block(lines: list[str], start: int, first_line: int, input_name: str) -> tuple[GpuFabricState, int]:
    """Read the Fabric block whose title is at `start`; returns the state and the index after the block."""
    state = GpuFabricState(gpu=-1, origin=FORMAT)
    title_indent = len(lines[start]) - len(lines[start].lstrip())
    index = start + 1
    in_health = False
    while index < len(lines):
        raw = lines[index].rstrip()
        stripped = raw.strip()
        if not stripped:
            index += 1
            continue
        indent = len(raw) - len(raw.lstrip())
        if stripped == "Health":
            in_health = True
            index += 1
            continue
        match = _KEY_VALUE_RE.match(raw)
        if match is None:
            break  # the next section title, `--` of a grep, or something else
        key = match.group("key").strip()
        lowered = key.lower()
        known = lowered in _TOP_KEYS or lowered in _HEALTH_KEYS
        # Indented pastes end the block at the first line back at the title's level; flat pastes at the
        # first key that is not one of the block's.
        if (indent <= title_indent and title_indent > 0) or not known:
            break
        ref = SourceRef(input_name, first_line + index, raw)
        value = _value(match.group("value"))
        if lowered in _TOP_KEYS and not (in_health and lowered == "status"):
            attribute = _TOP_KEYS[lowered]
            if attribute == "clique_id":
                setattr(state, attribute, int(value) if value is not None and value.isdigit() else None)
            else:
                setattr(state, attribute, value)
            state.sources[attribute] = ref
        elif lowered == "summary":
            state.health_summary = value
            state.sources["health_summary"] = ref
        elif value is not None:
            state.health[key] = value
            state.sources[f"health:{key}"] = ref
        index += 1
    state.sources.setdefault("block", SourceRef(input_name, first_line + start, lines[start].rstrip()))
    return state, index
