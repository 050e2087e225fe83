"""Fabric Manager's log (`/var/log/fabricmanager.log`), `systemctl status nvidia-fabricmanager` /
`journalctl -u nvidia-fabricmanager`, and the application lines that say the NVLink fabric was not ready.

The lines that matter (gpud's `fabric-manager/log_matcher.go` catalogue plus the issue threads in SOURCES):

    fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with driver version 530.41.03
    detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33
    detected NVSwitch non-fatal error 12028 ...
    failed to find the GPU handle 5410063385821516767 in the multicast team request setup ...
    detected number of NVSwitches don't match with any supported system topology, aborting fabric manager
    ... [NV_WARN_NOTHING_TO_DO]                   (no NVSwitch to manage; on B200: NVLSM missing)
    Active: active (running) | failed (Result: exit-code) | inactive (dead)        (systemctl)
    Error 802: system not yet initialized | cudaErrorSystemNotReady | CUDA_ERROR_SYSTEM_NOT_READY
    [CUDA_ERROR_NOT_PERMITTED] ... cuMemCreate   (no IMEX channel for fabric memory)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.fabric import FabricManagerEvent
from k3diag.model.source import SourceRef
from k3diag.parse.text import Section, normalize

FORMAT = "nvidia-fabricmanager-log"

VERSION_MISMATCH = "version-mismatch"
NVSWITCH_FATAL = "nvswitch-fatal"
NVSWITCH_NON_FATAL = "nvswitch-non-fatal"
NVSWITCH_ERROR = "nvswitch-error"  # an SXid in the kernel log without its severity line (k3diag.parse.dmesg)
MULTICAST_GPU_MISSING = "multicast-gpu-missing"
TOPOLOGY_MISMATCH = "topology-mismatch"
NOTHING_TO_DO = "nothing-to-do"
SERVICE_FAILED = "service-failed"
SYSTEM_NOT_READY = "system-not-ready"
IMEX_NOT_PERMITTED = "imex-not-permitted"
EVENT_KINDS = (VERSION_MISMATCH, NVSWITCH_FATAL, NVSWITCH_NON_FATAL, NVSWITCH_ERROR, MULTICAST_GPU_MISSING,
               TOPOLOGY_MISMATCH, NOTHING_TO_DO, SERVICE_FAILED, SYSTEM_NOT_READY, IMEX_NOT_PERMITTED)

_MISMATCH_RE = re.compile(
    r"fabric manager NVIDIA GPU driver interface version\s+(?P<fm>[\d.]+)\s+(?:don'?t|doesn'?t|don’t|doesn’t)\s+"
    r"match with driver version\s+(?P<driver>[\d.]+?)\.?(?:\s|$)", re.I)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (NVSWITCH_FATAL, re.compile(r"detected NVSwitch fatal error (?P<detail>\d+)", re.I)),
    (NVSWITCH_NON_FATAL, re.compile(r"detected NVSwitch non-fatal error (?P<detail>\d+)", re.I)),
    (MULTICAST_GPU_MISSING, re.compile(r"failed to find the GPU handle (?P<detail>\d+) in the multicast team", re.I)),
    (TOPOLOGY_MISMATCH, re.compile(r"detected number of NVSwitches don'?t match with any supported system topology",
                                   re.I)),
    (NOTHING_TO_DO, re.compile(r"NV_WARN_NOTHING_TO_DO", re.I)),
    (SYSTEM_NOT_READY, re.compile(r"(?:Error 802\b[^\n]*system not yet initialized|cudaErrorSystemNotReady|"
                                  r"CUDA_ERROR_SYSTEM_NOT_READY|system not yet initialized)", re.I)),
    (IMEX_NOT_PERMITTED, re.compile(r"CUDA_ERROR_NOT_PERMITTED[^\n]*cuMemCreate|cuMemCreate[^\n]*(?:not permitted|"
                                    r"CUDA_ERROR_NOT_PERMITTED)", re.I)),
)
_ACTIVE_RE = re.compile(r"^\s*Active:\s*(?P<state>active|failed|inactive|activating|deactivating)\b(?P<rest>.*)$")
_SERVICE_FAIL_RE = re.compile(r"nvidia-fabricmanager\.service:\s*(?:Control process exited|Main process exited|"
                              r"Failed with result)", re.I)
_FM_VERSION_RE = re.compile(r"Fabric Manager version(?: is)?\s*:?\s*(?P<version>\d+\.\d+(?:\.\d+)?)", re.I)
_FM_CONTEXT_RE = re.compile(r"fabric ?manager|nv-fabricmanager|NVSwitch|Error 802|system not yet initialized|"
                            r"cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY|cuMemCreate", re.I)


@dataclass
class FabricManagerResult:
    running: bool | None = None
    version: str | None = None
    driver_interface_version: str | None = None
    driver_version_seen: str | None = None
    events: list[FabricManagerEvent] = field(default_factory=list)
    sources: list[SourceRef] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    head = normalize(text[:200_000])
    if _MISMATCH_RE.search(head):
        return 0.95
    if "nvidia-fabricmanager" in head and _ACTIVE_RE.search(head) is not None:
        return 0.95
    hits = sum(1 for _, pattern in _PATTERNS[:5] if pattern.search(head))
    if hits:
        return 0.9
    if re.search(r"\[(?:INFO|ERROR|WARNING)\]\s*\[tid \d+\]", head) and re.search(r"multicast|NVSwitch|fabric", head,
                                                                                  re.I):
        return 0.8
    # Application logs that only say the fabric was not ready: weaker, so a real tool output that quotes
    # such a line (nvbandwidth, a NCCL log) keeps its own parser.
    if _PATTERNS[5][1].search(head) or _PATTERNS[6][1].search(head):
        return 0.55
    return 0.0


def parse(section: Section, input_name: str) -> FabricManagerResult:
    result = FabricManagerResult()
    lines = normalize(section.text).split("\n")
    for offset, raw in enumerate(lines):
        line = raw.rstrip()
        if not line.strip():
            continue
        ref = SourceRef(input_name, section.first_line + offset, line.strip()[:400])
        active = _ACTIVE_RE.match(line)
        if active:
            result.running = active.group("state") == "active" and "running" in active.group("rest")
            result.sources.append(ref)
            if active.group("state") == "failed":
                result.events.append(FabricManagerEvent(SERVICE_FAILED, active.group("rest").strip() or None, ref))
            continue
        mismatch = _MISMATCH_RE.search(line)
        if mismatch:
            result.driver_interface_version = mismatch.group("fm")
            result.driver_version_seen = mismatch.group("driver").rstrip(".")
            result.events.append(FabricManagerEvent(
                VERSION_MISMATCH, f"{result.driver_interface_version} vs driver {result.driver_version_seen}", ref))
            continue
        if _SERVICE_FAIL_RE.search(line):
            result.events.append(FabricManagerEvent(SERVICE_FAILED, None, ref))
            if result.running is None:
                result.running = False
            continue
        version = _FM_VERSION_RE.search(line)
        if version:
            result.version = version.group("version")
            result.sources.append(ref)
        for kind, pattern in _PATTERNS:
            match = pattern.search(line)
            if match:
                detail = match.groupdict().get("detail")
                result.events.append(FabricManagerEvent(kind, detail, ref))
                break
    if not result.events and result.running is None and result.version is None and not any(
            _FM_CONTEXT_RE.search(line) for line in lines):
        result.warnings.append(f"{input_name}: no Fabric Manager status or error line was found")
    return result
