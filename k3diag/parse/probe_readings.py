"""The readings document `k3diag probe` writes (`k3diag.probe-readings/1`), live or from a bundle.

Every fact cites the measurement it came from; a reading has no line number, so the evidence
text says what was measured, the way the probe printed it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from k3diag.model.probe_records import ProbeBenchmark, ProbeGpu, ProbePair
from k3diag.model.source import SourceRef
from k3diag.parse.ids import normalize_bdf
from k3diag.parse.text import Section

SCHEMA_PREFIX = "k3diag.probe-readings/"
_SCHEMA_RE = re.compile(r'"schema"\s*:\s*"k3diag\.probe-readings/')


@dataclass
class ProbeReadingsResult:
    benchmarks: list[ProbeBenchmark] = field(default_factory=list)
    unavailable: str | None = None
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    if not text.lstrip()[:1] == "{":
        return 0.0
    return 1.0 if _SCHEMA_RE.search(text[:200_000]) else 0.0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _best(timing: Any) -> tuple[float | None, float | None]:
    if not isinstance(timing, dict):
        return None, None
    return _number(timing.get("best_gbps")), _number(timing.get("median_gbps"))


def _gbps(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.1f} GB/s"


def parse(section: Section, input_name: str) -> ProbeReadingsResult:
    result = ProbeReadingsResult()
    try:
        doc = json.loads(section.text)
    except ValueError as exc:
        result.warnings.append(f"the probe readings are not valid JSON ({exc}); nothing was read from them")
        return result
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(SCHEMA_PREFIX):
        result.warnings.append("not a k3diag probe readings document (no k3diag.probe-readings schema)")
        return result
    if doc.get("unavailable"):
        result.unavailable = str(doc["unavailable"])
        result.warnings.append(f"the probe could not run: {result.unavailable}")
        return result
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    bench = ProbeBenchmark(
        vendor=doc.get("vendor") if isinstance(doc.get("vendor"), str) else None,
        library=doc.get("library") if isinstance(doc.get("library"), str) else None,
        driver_version=doc.get("driver_version") if isinstance(doc.get("driver_version"), str) else None,
        size_bytes=options.get("size_bytes") if isinstance(options.get("size_bytes"), int) else None,
        repeats=options.get("repeats") if isinstance(options.get("repeats"), int) else None,
        deadline_reached=bool(doc.get("deadline_reached")),
        elapsed_s=_number(doc.get("elapsed_s")),
        input=input_name,
    )
    for gpu in doc.get("gpus") or []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            result.warnings.append("a GPU entry without an index was skipped")
            continue
        h2d, h2d_median = _best(gpu.get("host_to_device"))
        d2h, d2h_median = _best(gpu.get("device_to_host"))
        bus = gpu.get("bus_id")
        record = ProbeGpu(
            index=gpu["index"], name=gpu.get("name") if isinstance(gpu.get("name"), str) else None,
            bus_id=normalize_bdf(bus) if isinstance(bus, str) else None,
            host_to_device_gbps=h2d, device_to_host_gbps=d2h,
            host_to_device_median_gbps=h2d_median, device_to_host_median_gbps=d2h_median,
            data_ok=_flag(gpu.get("data_ok")),
            memory_total_bytes=gpu.get("memory_total_bytes") if isinstance(gpu.get("memory_total_bytes"), int) else None,
            memory_free_bytes=gpu.get("memory_free_bytes") if isinstance(gpu.get("memory_free_bytes"), int) else None,
        )
        if h2d is not None or d2h is not None:
            record.source = SourceRef(input_name, None, (
                f"probe GPU{record.index} pinned host->device {_gbps(h2d)}, device->host {_gbps(d2h)}"
                + ("" if record.data_ok is None else f", data {'intact' if record.data_ok else 'CORRUPTED'}")))
        bench.gpus.append(record)
    for pair in doc.get("pairs") or []:
        if not isinstance(pair, dict) or not isinstance(pair.get("src"), int) or not isinstance(pair.get("dst"), int):
            result.warnings.append("a GPU pair entry without src/dst was skipped")
            continue
        enabled, _ = _best(pair.get("peer_enabled"))
        disabled, _ = _best(pair.get("peer_disabled"))
        can = _flag(pair.get("can_access_peer"))
        record_pair = ProbePair(
            src=pair["src"], dst=pair["dst"], can_access_peer=can,
            peer_disabled_gbps=disabled, peer_enabled_gbps=enabled,
            data_ok_peer_disabled=_flag(pair.get("data_ok_peer_disabled")),
            data_ok_peer_enabled=_flag(pair.get("data_ok_peer_enabled")),
            errors=[str(e) for e in pair.get("errors") or []],
        )
        access = {True: "can access peer", False: "CANNOT access peer", None: "peer access unknown"}[can]
        record_pair.source = SourceRef(input_name, None, (
            f"probe GPU{record_pair.src}->GPU{record_pair.dst}: {access}; peer copy {_gbps(enabled)} "
            f"with peer access, {_gbps(disabled)} staged through the host"))
        bench.pairs.append(record_pair)
    for skipped in doc.get("skipped") or []:
        if isinstance(skipped, dict):
            bench.skipped.append(f"{skipped.get('what')}: {skipped.get('reason')}")
    bench.errors = [str(e) for e in doc.get("errors") or []]
    result.warnings.extend(f"probe skipped {s}" for s in bench.skipped)
    result.warnings.extend(f"probe error: {e}" for e in bench.errors)
    result.benchmarks.append(bench)
    return result
