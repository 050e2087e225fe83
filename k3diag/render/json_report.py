"""The JSON report (schema `k3diag.report/1`): the contract users script against.

Field names in `docs/report-contract.md` are fixed; everything else is additive.
"""

from __future__ import annotations

import datetime as _dt
import json
from functools import cache
from typing import Any, Callable, Iterable, Iterator, TextIO

from k3diag import __version__
from k3diag.analyze.finding import Finding
from k3diag.model import json_text
from k3diag.model.machine import Machine

SCHEMA_ID = "k3diag.report/1"


def build_report(
    machine: Machine,
    findings: list[Finding],
    recommendation: Any | None = None,
    verdict: dict | None = None,
    exit_code: int | None = None,
) -> dict:
    runs = sorted(machine.nccl, key=lambda run: -(run.nranks or 0))
    recommendations: dict[str, Any] = {"tp_groups": {}, "rationale": None}
    if recommendation is not None:
        recommendations.update(recommendation.to_json())
    gdr = _gdr(machine)  # every GPU x NIC pair: computed once for the NICs and the fabric sections
    report = {
        "schema": SCHEMA_ID,
        "tool": {"name": "k3diag", "version": __version__},
        "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "live": machine.live,
        "verdict": verdict,
        "exit_code": exit_code,
        "host": machine.host.to_json(),
        "inputs": [record.to_json() for record in machine.inputs],
        "notes": [note.to_json() for note in machine.notes],
        "topology": {
            "gpus": [gpu.to_json() for gpu in machine.sorted_gpus()],
            "nics": _nics(machine, gdr),
            "links": [link.to_json() for link in machine.links],
            "p2p": [status.to_json() for status in machine.p2p],
            "gpu_inventory": _gpu_inventory(machine),
        },
        "fabric": _fabric(machine, gdr),
        "pci": [device.to_json() for device in machine.pci],
        "pcie_paths": _pcie_paths(machine),
        "platform": _platform(machine),
        "nccl": runs[0].to_json() if runs else None,
        "nccl_runs": [run.to_json() for run in runs],
        "nccl_summary": _nccl_summary(machine),
        "benchmarks": [bench.to_json() for bench in machine.benchmarks],
        "findings": [finding.to_json() for finding in findings],
        "recommendations": recommendations,
    }
    serving = _serving(machine)
    if serving is not None:
        report["serving"] = serving
    return report


def _gpu_inventory(machine: Machine) -> dict:
    """Whether the GPUs in `gpus` are all the machine has: `complete` true when an input gives the machine's
    count and every GPU is shown, false when some are not (a filtered `nvidia-smi -q -i 0`, a GPU list cut
    with `...`), null when no input says how many there are."""
    shown, attached = len(machine.gpus), machine.attached_gpu_count()
    complete: bool | None = None
    if machine.unseen_attached_gpus() or machine.gpu_count_is_a_floor():
        complete = False
    elif attached and attached == shown:
        complete = True
    source = machine.attached_count_source()
    return {"shown": shown, "attached": attached or None, "complete": complete,
            "attached_source": source.to_json() if source is not None else None,
            "cut_lists": [source.to_json() for source in machine.gpu_list_cuts]}


def _nccl_summary(machine: Machine) -> dict | None:
    """Communicators beyond those reported in full (`nccl_runs`), counted exactly: a gigabyte log's
    JSON stays bounded by the distinct pairs of the runs kept and by their number."""
    summaries = machine.extras.get("nccl_summaries") or []
    if not summaries:
        return None
    total = {"runs_total": 0, "runs_detailed": 0, "runs_summarized": 0, "detail_limit": 0,
             "summarized_transport_counts": {"P2P": 0, "SHM": 0, "NET": 0}, "summarized_late_connection_lines": 0,
             "summarized": [], "not_kept": {}, "not_kept_lower_bounds": []}
    for name, summary in summaries:
        data = summary.to_json()
        for key in ("runs_total", "runs_detailed", "runs_summarized", "summarized_late_connection_lines"):
            total[key] += data[key]
        total["detail_limit"] = max(total["detail_limit"], data["detail_limit"])
        for family, number in data["summarized_transport_counts"].items():
            total["summarized_transport_counts"][family] = total["summarized_transport_counts"].get(family, 0) + number
        total["summarized"].extend({"input": name, **group} for group in data["summarized"])
        for kind, number in data["not_kept"].items():
            total["not_kept"][kind] = total["not_kept"].get(kind, 0) + number
        total["not_kept_lower_bounds"] = sorted(set(total["not_kept_lower_bounds"]) | set(data["not_kept_lower_bounds"]))
    total["not_kept"] = dict(sorted(total["not_kept"].items()))
    return total


def _serving(machine: Machine) -> dict | None:
    """Serving results read with the machine's evidence (docs/serving.md), when there were any."""
    extras = machine.extras
    keys = {"runs": "serving_runs", "engines": "serving_engines", "p2p_caches": "vllm_p2p_caches"}
    if not any(extras.get(key) for key in keys.values()):
        return None
    return {name: [item.to_json() for item in extras.get(key, [])] for name, key in keys.items()}


def _gdr(machine: Machine):
    try:
        from k3diag.analyze.gdr import gdr_report

        return gdr_report(machine)
    except Exception:  # the findings say what went wrong; the JSON leaves GDR unknown
        return None


def _nics(machine: Machine, report) -> list[dict]:
    out = []
    by_nic: dict[str, list] = {}
    for pair in report.pairs if report is not None else []:
        by_nic.setdefault(pair.nic, []).append(pair)
    for nic in sorted(machine.nics.values(), key=lambda n: n.name):
        entry = nic.to_json()
        if report is not None and not nic.management_port:
            mine = by_nic.get(nic.name, [])
            entry["gdr"] = {
                "possible": report.possible,
                "level": report.level,
                "eligible_gpus": sorted(pair.gpu for pair in mine if pair.eligible),
                "nearest_gpus": sorted(pair.gpu for pair in mine if pair.best),
            }
        else:
            entry["gdr"] = None
        out.append(entry)
    return out


def _fabric(machine: Machine, report) -> dict | None:
    if machine.fabric.empty and report is None:
        return None
    data = machine.fabric.to_json()
    data["gdr"] = report.to_json() if report is not None else []
    return data


def dumps(report: dict, indent: int | None = 2) -> str:
    """The report as one string (tests, small reports); the CLI streams it with `write`."""
    return json_text.dumps(report, indent=indent, sort_keys=False, default=_default)


# The report is written member by member, and a long list (5,000 PCI devices, thousands of
# NCCL communicators) in slices of this many elements, each slice encoded by the C encoder in one
# call: the text of the whole report never exists at once, and the encoder stays the fast one
# (`json.dump` streams too, but through the pure-Python encoder, several times slower).
_SLICE = 256
# Objects, and short lists of objects that hold a long list, are written member by member down to this
# depth (the report, `nccl_runs[]`, a run, its `connections[]`); below it a value is encoded whole.
_STREAM_DEPTH = 4


class StreamedList:
    """A list of the report whose elements are made as they are written, and let go after (`machines[]`: a
    full report per machine, ~40 KB each as Python objects, so 5,000 machines held ~200 MiB at once). Read
    more than once, it makes them again; `dumps` writes it as the list it stands for."""

    def __init__(self, make: Callable[[], Iterable[Any]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[Any]:
        return iter(self._make())


def write(report: dict, out: TextIO, indent: int | None = None) -> None:
    """Write the report to `out` as it is encoded, then a newline.

    Compact by default (no spaces, one line: what scripts read, and the smallest); `indent`
    indents it for people (`--json-indent 2`), byte for byte as `json.dumps(indent=N)` would. Both are
    streamed alike (`_write_compact`). Either way the same document: `json.loads` of both gives equal
    values; and a JSON one (a non-finite number is `null`: `model.json_text`)."""
    if indent is not None:
        _write_indented(report, out, indent)
    else:
        _write_compact(report, out, depth=0)
    out.write("\n")


def _write_indented(report: dict, out: TextIO, indent: int) -> None:
    _write_indented_value(report, out, " " * indent, 0, 0)


def _write_indented_value(value: Any, out: TextIO, pad: str, level: int, depth: int) -> None:
    """`value` as `json.dumps(value, indent=len(pad))` writes it `level` levels deep, byte for byte, streamed as
    `_write_compact` streams: JSON text holds no raw newline but those the encoder puts between items, so an
    encoded value is moved one level deeper by indenting each of them."""
    here = pad * level
    if isinstance(value, dict) and value and depth < _STREAM_DEPTH and all(isinstance(key, str) for key in value):
        inner = here + pad
        for index, (key, item) in enumerate(value.items()):
            out.write(("," if index else "{") + "\n" + inner + json.dumps(key) + ": ")
            _write_indented_value(item, out, pad, level + 1, depth + 1)
        out.write("\n" + here + "}")
    elif isinstance(value, StreamedList) or (isinstance(value, list) and depth < _STREAM_DEPTH
                                             and any(map(_holds_long_list, value))):
        inner = here + pad
        count = 0
        for count, item in enumerate(value, 1):
            out.write(("," if count > 1 else "[") + "\n" + inner)
            # a `machines[]` entry is a whole report: streamed as the top one is
            _write_indented_value(item, out, pad, level + 1, 0 if isinstance(value, StreamedList) else depth + 1)
        out.write("\n" + here + "]" if count else "[]")
    elif isinstance(value, list) and len(value) > _SLICE:
        for start in range(0, len(value), _SLICE):
            text = json_text.dumps(value[start:start + _SLICE], indent=len(pad), sort_keys=False, default=_default)
            # the slice's elements without `[\n` and `\n]`, each line already one level in
            out.write(("," if start else "[") + "\n" + here + text[2:-2].replace("\n", "\n" + here))
        out.write("\n" + here + "]")
    else:
        text = json_text.dumps(value, indent=len(pad), sort_keys=False, default=_default)
        out.write(text.replace("\n", "\n" + here) if level else text)


def _write_compact(value: Any, out: TextIO, depth: int) -> None:
    encode = _compact_encoder()
    if isinstance(value, dict) and depth < _STREAM_DEPTH and all(isinstance(key, str) for key in value):
        out.write("{")
        for index, (key, item) in enumerate(value.items()):
            out.write(("," if index else "") + encode(key) + ":")
            _write_compact(item, out, depth + 1)
        out.write("}")
    elif isinstance(value, StreamedList):
        out.write("[")
        for index, item in enumerate(value):
            if index:
                out.write(",")
            _write_compact(item, out, 0)  # a `machines[]` entry is a whole report: streamed as the top one is
        out.write("]")
    elif isinstance(value, list) and len(value) > _SLICE:
        out.write("[")
        for start in range(0, len(value), _SLICE):
            # `[a,b,c]` without its brackets: the elements of this slice, comma-separated
            out.write(("," if start else "") + encode(value[start:start + _SLICE])[1:-1])
        out.write("]")
    elif isinstance(value, list) and depth < _STREAM_DEPTH and any(map(_holds_long_list, value)):
        # a short list of objects one of which holds a long list (`nccl_runs[]`: 16 communicators, each with
        # thousands of connections) is written element by element, so that list is sliced too; any other
        # short list is encoded whole (element by element, a fleet's `machines[]` took 25% longer)
        out.write("[")
        for index, item in enumerate(value):
            if index:
                out.write(",")
            _write_compact(item, out, depth + 1)
        out.write("]")
    else:
        out.write(encode(value))


def _holds_long_list(value: Any) -> bool:
    return isinstance(value, dict) and any(isinstance(item, list) and len(item) > _SLICE for item in value.values())


@cache
def _compact_encoder() -> Callable[[Any], str]:
    # No circular-reference check: the report is a tree of fresh dicts and lists (`to_json`), and the check
    # keeps a dict of every container's id while encoding (25,000 of them for 5,000 PCI devices: ~4% of
    # the encoding). A cycle would still stop the encoder, with a RecursionError instead of a ValueError.
    return json_text.finite_encoder(separators=(",", ":"), default=_default, check_circular=False)


def _default(value: Any) -> Any:
    if isinstance(value, StreamedList):
        return list(value)
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _pcie_paths(machine: Machine) -> list[dict]:
    if not machine.pci:
        return []
    try:
        from k3diag.model.pcie_tree import describe_gpu_paths

        return describe_gpu_paths(machine)
    except Exception:  # the terminal report says why; JSON just leaves it empty
        return []


def _platform(machine: Machine) -> dict | None:
    platform = machine.extras.get("platform")
    return platform.to_json() if hasattr(platform, "to_json") else None
