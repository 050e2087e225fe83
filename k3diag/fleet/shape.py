"""A node's shape: the few facts that nodes of one kind should share, each with the line that shows it.

`k3diag fleet` compares shapes, not whole reports: a shape is small (a few hundred bytes for an 8-GPU
node) so that ten thousand of them fit in memory, and its values are short strings that repeat from node
to node (the parent process interns them, so a fleet of identical nodes costs little more than one).

The shape is computed from the JSON report (`k3diag.report/1`), which every path has: `check --format json`
output, `analyze --json` output, or a bundle analyzed on the spot. Where the model itself is at hand (a
bundle, or `check` on the node), `evidence_from_machine` adds the input line behind each value; reports
read back later keep that evidence in their `shape` block.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

from k3diag.model.ids import fold_ranges
from k3diag.model.identity import is_hostname

SHAPE_SCHEMA = "k3diag.shape/1"
# What `state_of` says of a node, worst first (the order the totals and groups count them in).
STATES = ("fail", "warn", "unknown", "ok")
# Findings kept per node (fail and warn only): enough to name every kind of problem, bounded for fleets.
MAX_FINDINGS_PER_NODE = 64
MAX_EVIDENCE_CHARS = 240
MAX_VALUE_CHARS = 160
NOT_IN_EVIDENCE = "not in the evidence"

_PATH_ORDER = ("PIX", "PSB", "PXB", "PHB", "NODE", "SYS", "SOC")


def _path_rank(path: str | None) -> int:
    # Same order as k3diag.model.topology.path_rank, kept here so reading a report needs no model import.
    if not path:
        return 100
    match = re.match(r"^NV(\d+)$", path)
    if match:
        return -int(match.group(1))
    if path == "XGMI":
        return -1
    if path in _PATH_ORDER:
        return _PATH_ORDER.index(path)
    if path == "PCIE":
        return _PATH_ORDER.index("PHB")
    return 50


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _gpu_label(index: Any) -> str:
    return f"GPU{index}"


def _is_gpu(name: str) -> bool:
    return bool(re.match(r"^GPU\d+$", name or ""))


def _gpu_num(name: str) -> int:
    return int(name[3:]) if _is_gpu(name) else 10**6


def node_name(report: dict, fallback: str) -> str:
    """The machine's name: its identity's host name (reports of several machines carry one per entry),
    else the report's host name, else the name of the file it came from."""
    # a name no host name has (a newline, a control character: `is_hostname`) would put a line of the report's
    # choosing into the drain list: such a report is named after its file, as one that names no host
    identity = report.get("identity")
    if isinstance(identity, dict) and isinstance(identity.get("hostname"), str) and is_hostname(identity["hostname"]):
        return identity["hostname"].strip()
    host = report.get("host") or {}
    if isinstance(host, dict) and isinstance(host.get("hostname"), str) and is_hostname(host["hostname"]):
        return host["hostname"].strip()
    # The identity step's `label` describes a machine ("8 GPUs, NVIDIA L40S, driver ...") rather than naming
    # it, and would not fold into a host list: a machine without a host name is named after its input.
    return fallback


def input_label(path: str) -> str:
    """A machine's label when nothing in it names it: its input's name without the folders or a bundle's
    suffix (`/shared/k3diag/gpu007.tar.gz` -> `gpu007`), as `fleet` lists it and an SRE calls it."""
    name = Path(str(path).rstrip("/")).name or str(path)
    for suffix in (".tar.gz", ".tgz", ".tar.xz", ".tar", ".json"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


# How `shape.node` was found (docs/report-schema.md): the --node option, a host name in the evidence,
# or, for saved evidence that names no host, the input's file name.
NODE_FROM_OPTION, NODE_FROM_HOSTNAME, NODE_FROM_INPUT = "node-option", "hostname", "input-name"


def name_saved_node(report: dict, paths: list[str], given: str | None) -> tuple[str, str]:
    """The node name for `check --from PATHS` and how it was found: `--node`, else the host name the
    evidence holds, else the first input's file name (never its folders, which say where the file was
    saved, not which machine it came from)."""
    if given:
        return given, NODE_FROM_OPTION
    named = node_name(report, "")
    if named:
        return named, NODE_FROM_HOSTNAME
    return input_label(paths[0]) if paths else "saved evidence", NODE_FROM_INPUT


def state_of(report: dict) -> str:
    """ok | warn | fail | unknown, from the findings (the exit code depends on --fail-on; this does not)."""
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    if any(f.get("severity") == "fail" for f in findings):
        return "fail"
    if report.get("exit_code") == 3 or not _analyzable(report):
        return "unknown"
    if any(f.get("severity") == "warn" for f in findings):
        return "warn"
    return "ok"


def _analyzable(report: dict) -> bool:
    topology = report.get("topology") or {}
    return bool(topology.get("gpus") or topology.get("links") or report.get("pci") or report.get("nccl_runs")
                or report.get("benchmarks"))


def sku_of(report: dict) -> dict:
    """What makes nodes comparable: GPU model and count, NIC count, and the board (or, where no board name
    is known, the CPU model and socket count standing in for it)."""
    topology = report.get("topology") or {}
    gpus = [g for g in topology.get("gpus") or [] if isinstance(g, dict)]
    names = Counter(str(g.get("name")) for g in gpus if g.get("name"))
    host = report.get("host") or {}
    board = None
    for key in ("board", "product", "product_name", "system"):
        if isinstance(host.get(key), str) and host[key].strip():
            board = host[key].strip()
            break
    if board is None:
        packages = host.get("packages") or []
        cpu = host.get("cpu_model")
        if cpu:
            board = f"{len(packages)}x {cpu}" if packages else str(cpu)
    return {
        "gpu_model": names.most_common(1)[0][0] if names else None,
        "gpu_count": len(gpus),
        "nic_count": len(topology.get("nics") or []),
        "board": board,
    }


def sku_label(sku: dict) -> str:
    gpu_count, nic_count = sku.get("gpu_count", 0), sku.get("nic_count", 0)
    gpus = f"{gpu_count}x {sku['gpu_model']}" if sku.get("gpu_model") else (
        f"{gpu_count} GPU{'' if gpu_count == 1 else 's'} (model not in the evidence)" if gpu_count else "no GPU")
    parts = [gpus, f"{nic_count} NIC{'' if nic_count == 1 else 's'}"]
    if sku.get("board"):
        parts.append(str(sku["board"]))
    return ", ".join(parts)


def _best_pairs(links: list[dict]) -> dict[tuple[str, str], str]:
    """One path per GPU pair (the best any source reported), so two sources never make two values."""
    pairs: dict[tuple[str, str], str] = {}
    for link in links:
        if not isinstance(link, dict):
            continue
        a, b, path = str(link.get("a")), str(link.get("b")), link.get("path")
        if not (_is_gpu(a) and _is_gpu(b)) or not path:
            continue
        key = tuple(sorted((a, b), key=_gpu_num))
        if key not in pairs or _path_rank(path) < _path_rank(pairs[key]):
            pairs[key] = path  # type: ignore[index]
    return pairs


def pairs_text(report: dict) -> str:
    """The GPU pair matrix as one line, `GPU0-GPU1 NV18;GPU0-GPU2 NV18;...` (compared pair by pair)."""
    pairs = _best_pairs((report.get("topology") or {}).get("links") or [])
    return ";".join(f"{a}-{b} {path}" for (a, b), path in sorted(pairs.items(), key=lambda kv: (_gpu_num(kv[0][0]), _gpu_num(kv[0][1]))))


def _topology_value(pairs: str) -> str | None:
    if not pairs:
        return None
    counts = Counter(item.rsplit(" ", 1)[1] for item in pairs.split(";"))
    classes = " ".join(f"{path}x{count}" for path, count in sorted(counts.items(), key=lambda kv: (_path_rank(kv[0]), kv[0])))
    digest = hashlib.sha1(pairs.encode()).hexdigest()[:8]
    return f"{classes} #{digest}"


def _numa_value(gpus: list[dict]) -> str | None:
    by_node: dict[Any, list[int]] = {}
    for gpu in gpus:
        node = gpu.get("numa_node")
        if node is None:
            continue
        by_node.setdefault(node, []).append(int(gpu.get("index", 0)))
    if not by_node:
        return None
    parts = []
    for node in sorted(by_node, key=lambda n: (str(type(n)), n)):
        parts.append(f"node{node}: GPU{fold_ranges(sorted(by_node[node]))}")
    return "; ".join(parts)


def _finding_subject(finding: dict) -> str:
    subjects = [str(s) for s in finding.get("subjects") or []]
    return ",".join(subjects) if subjects else "host"


def _first_evidence(finding: dict) -> str | None:
    for ref in finding.get("evidence") or []:
        if isinstance(ref, dict) and ref.get("text"):
            where = ref.get("input") or "input"
            if ref.get("line") is not None:
                where = f"{where}:{ref['line']}"
            return _clip(f"{where}: {ref['text']}", MAX_EVIDENCE_CHARS)
    return None


def shape_from_report(report: dict, source: str, evidence: dict[str, str] | None = None) -> dict:
    """The shape of the node this report describes; `evidence` maps feature names to input lines."""
    topology = report.get("topology") or {}
    gpus = sorted((g for g in topology.get("gpus") or [] if isinstance(g, dict)), key=lambda g: g.get("index", 0))
    host = report.get("host") or {}
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    pairs = pairs_text(report)
    features: dict[str, str] = {}

    def put(name: str, value: Any) -> None:
        if value is not None and value != "":
            features[name] = _clip(str(value), MAX_VALUE_CHARS)

    put("driver version", host.get("driver_version"))
    put("CUDA version", host.get("cuda_version"))
    put("kernel", host.get("kernel"))
    put("IOMMU mode", host.get("iommu_mode"))
    nccl = report.get("nccl") or {}
    versions = sorted({str(run.get("version")) for run in report.get("nccl_runs") or []
                       if isinstance(run, dict) and run.get("version")})
    put("NCCL version", ", ".join(versions) if versions else (nccl.get("version") if isinstance(nccl, dict) else None))
    put("topology", _topology_value(pairs))
    put("NUMA split", _numa_value(gpus))
    for gpu in gpus:
        pcie = gpu.get("pcie") or {}
        label = _gpu_label(gpu.get("index"))
        width, width_max = pcie.get("width_current"), pcie.get("width_max")
        if width is not None:
            put(f"{label} PCIe width", f"x{width}" + (f" of x{width_max}" if width_max else ""))
        gen_max = pcie.get("gen_max")
        gen_host = pcie.get("gen_host_max")
        if gen_max is not None:
            put(f"{label} PCIe generation", f"Gen{gen_max}" + (f" (slot Gen{gen_host})" if gen_host else ""))
        if gpu.get("bus_id"):
            put(f"{label} bus id", gpu.get("bus_id"))
        if gpu.get("memory_total_mib"):
            put(f"{label} memory", f"{round(int(gpu['memory_total_mib']) / 1024)} GiB")
    kept: list[dict] = []
    by_id: dict[str, list[dict]] = {}
    for finding in sorted(findings, key=lambda f: 0 if f.get("severity") == "fail" else 1):
        if finding.get("severity") not in ("fail", "warn"):
            continue
        by_id.setdefault(str(finding.get("id")), []).append(finding)
        if len(kept) < MAX_FINDINGS_PER_NODE:
            kept.append({
                "id": str(finding.get("id")),
                "severity": finding.get("severity"),
                "subject": _clip(_finding_subject(finding), 120),
                "title": _clip(finding.get("title") or "", 200),
                "evidence": _first_evidence(finding),
            })
    refs = dict(evidence or {})
    for finding_id, group in by_id.items():
        subjects = sorted({_finding_subject(f) for f in group})
        value = subjects[0] if len(subjects) == 1 else f"{len(subjects)} subjects: " + "; ".join(subjects[:3]) + (
            " ..." if len(subjects) > 3 else "")
        put(f"finding {finding_id}", value)
        line = next((_first_evidence(f) for f in group if _first_evidence(f)), None)
        if line:
            refs.setdefault(f"finding {finding_id}", line)
            # A finding about one GPU is the best evidence for that GPU's own features.
            for f in group:
                for subject in f.get("subjects") or []:
                    if _is_gpu(str(subject)):
                        for name in list(features):
                            if name.startswith(f"{subject} PCIe") and finding_id.startswith("pcie-"):
                                refs.setdefault(name, _first_evidence(f) or line)
    order = sorted(("fail", "warn"), key=lambda s: 0 if s == "fail" else 1)
    worst = next(({"id": f["id"], "subject": f["subject"], "title": f["title"]}
                  for severity in order for f in kept if f["severity"] == severity), None)
    verdict = report.get("verdict")
    return {
        "schema": SHAPE_SCHEMA,
        "node": node_name(report, source),
        "source": source,
        "state": state_of(report),
        "exit_code": report.get("exit_code"),
        "verdict": verdict.get("text") if isinstance(verdict, dict) else None,
        "sku": sku_of(report),
        "features": features,
        "evidence": {name: _clip(line, MAX_EVIDENCE_CHARS) for name, line in refs.items() if name in features and line},
        "pairs": pairs,
        "findings": kept,
        "worst": worst,
        "counts": {severity: sum(1 for f in findings if f.get("severity") == severity) for severity in ("fail", "warn", "info")},
    }


def evidence_from_machine(machine: Any) -> dict[str, str]:
    """Feature name -> `input:line: text` for the facts the model holds with their sources."""
    refs: dict[str, str] = {}

    def cite(ref: Any) -> str | None:
        try:
            return _clip(ref.cite(), MAX_EVIDENCE_CHARS) if ref is not None else None
        except Exception:
            return None

    host = getattr(machine, "host", None)
    host_sources = list(getattr(host, "sources", []) or [])
    for name, attr_name in (("driver version", "driver_version"), ("CUDA version", "cuda_version"),
                            ("kernel", "kernel"), ("IOMMU mode", "iommu_mode")):
        value = getattr(host, attr_name, None)
        if not value:
            continue
        ref = next((r for r in host_sources if str(value) in (r.text or "")), None)
        line = cite(ref)
        if line is None and name in ("driver version", "CUDA version"):
            # NVML readings hold the versions without a line of their own: name the input that said so.
            reading = next((r for gpu in machine.sorted_gpus() for r in gpu.sources if r.line is None), None)
            if reading is not None:
                line = _clip(f"{reading.input}: the NVML reading reports {name} {value}", MAX_EVIDENCE_CHARS)
        if line:
            refs[name] = line
    for gpu in machine.sorted_gpus():
        label = gpu.label
        pcie_ref = getattr(gpu.pcie, "source", None) or next(iter(gpu.sources), None)
        line = cite(pcie_ref)
        if line:
            refs[f"{label} PCIe width"] = line
            refs[f"{label} PCIe generation"] = line
        line = cite(next(iter(gpu.sources), None))
        if line:
            refs.setdefault(f"{label} bus id", line)
            refs.setdefault(f"{label} memory", line)
            refs.setdefault("NUMA split", line)
    worst = None
    for link in machine.links:
        if link.source is None or not (_is_gpu(link.a) and _is_gpu(link.b)):
            continue
        if worst is None or _path_rank(link.path) > _path_rank(worst.path):
            worst = link
    if worst is not None:
        line = cite(worst.source)
        if line:
            refs["topology"] = line
    for run in getattr(machine, "nccl", []) or []:
        line = cite(getattr(run, "version_source", None))
        if line:
            refs["NCCL version"] = line
            break
    return refs
