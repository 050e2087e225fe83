"""From the paths the operator gave to one shape per node, in parallel and in bounded memory.

Inputs are bundles (`k3diag collect` archives or folders), folders of bundles, and JSON reports
(`k3diag check --format json`, `k3diag analyze --json`). Each is read in a worker of a standard-library
process pool; only its shape (a few hundred bytes) comes back, and at most a fixed number of tasks is in
flight, so memory grows with the number of nodes by their shapes alone, never by their reports.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from k3diag.fleet.shape import SHAPE_SCHEMA, shape_from_report
from k3diag.lifecycle import die_with_parent, sigterm_held, stop_workers

# A node report above this size is not a report k3diag wrote (one with 72 GPUs is a few MiB).
MAX_REPORT_BYTES = 64 * 1024 * 1024
MAX_WALK_DEPTH = 4
# Paths handed to one worker task: big enough that the pool's messaging costs little, small enough that
# a slow bundle does not hold up many reports behind it.
CHUNK = 32


@dataclass(frozen=True)
class FleetInput:
    path: str
    kind: str  # bundle | report


def discover(paths: Iterable[Path]) -> tuple[list[FleetInput], list[str]]:
    """Every bundle and JSON report under these paths, and one sentence for each path that is neither."""
    from k3diag.bundle import looks_like_bundle

    found: list[FleetInput] = []
    problems: list[str] = []

    def visit(path: Path, depth: int, given: bool) -> None:
        try:
            visit_one(path, depth, given)
        except OSError as exc:  # a folder that may be listed but not entered (read without execute)
            problems.append(f"{path} could not be read ({exc.strerror or exc}); check the permissions of its "
                            "folder")

    def visit_one(path: Path, depth: int, given: bool) -> None:
        if path.is_symlink() and not given:
            return
        if not path.exists():
            problems.append(f"{path} does not exist; check the path")
            return
        try:
            if looks_like_bundle(path):
                found.append(FleetInput(str(path), "bundle"))
                return
        except OSError as exc:
            problems.append(f"{path} could not be read ({exc.strerror or exc})")
            return
        if path.is_dir():
            if depth >= MAX_WALK_DEPTH:
                problems.append(f"{path} is nested deeper than {MAX_WALK_DEPTH} folders below what was given; "
                                "not read")
                return
            try:
                children = sorted(path.iterdir())
            except OSError as exc:
                problems.append(f"{path} could not be listed ({exc.strerror or exc})")
                return
            before = len(found)
            for child in children:
                if child.name.startswith("."):
                    continue
                visit(child, depth + 1, False)
            if given and len(found) == before:
                problems.append(f"{path} holds no bundle and no JSON report")
            return
        if path.is_file() and (path.suffix.lower() == ".json" or given):
            found.append(FleetInput(str(path), "report"))
        elif given:
            problems.append(f"{path} is neither a bundle nor a JSON report")

    for path in paths:
        visit(Path(path), 0, True)
    return found, problems


def _fallback_name(path: str) -> str:
    from k3diag.fleet.shape import input_label

    return input_label(path)


def _problem_shape(item: FleetInput, message: str) -> dict:
    return {"schema": SHAPE_SCHEMA, "node": _fallback_name(item.path), "source": item.path, "problem": message}


def shape_of_bundle(path: str) -> dict:
    from k3diag.analyze.machines import set_aside_finding
    from k3diag.analyze.pipeline import analyze_machine
    from k3diag.analyze.verdict import exit_code_for
    from k3diag.bundle import BundleError, read_bundle
    from k3diag.fleet.shape import evidence_from_machine
    from k3diag.join.machines import build_machines, machine_of_bundle
    from k3diag.render.json_report import build_report

    item = FleetInput(path, "bundle")
    try:
        bundle = read_bundle(Path(path))
    except BundleError as exc:
        return _problem_shape(item, str(exc))
    # A bundle is one node: when its files describe several machines (a vendor's mix), the node is the
    # machine the audit and `check --from` answer for, and the others' findings are never counted as its own.
    machines = build_machines(bundle.evidence)
    index, why = machine_of_bundle(machines, bundle.manifest)
    machine = machines.machines[index]
    analysis = analyze_machine(machine)
    findings = list(analysis.findings)
    if machines.several:
        findings.insert(0, set_aside_finding(machines, index, why))
    code = exit_code_for(machine, findings, "warn")
    report = build_report(machine, findings, analysis.recommendation, analysis.verdict.to_json(), code)
    return shape_from_report(report, path, evidence_from_machine(machine)) | {"node": _node(report, path)}


def _node(report: dict, path: str) -> str:
    from k3diag.fleet.shape import node_name

    return node_name(report, _fallback_name(path))


def _what_json(value: object) -> str:
    """What a JSON document that is not a report is, in words (never a Python `None`)."""
    if isinstance(value, dict):
        schema = value.get("schema")
        return "an object without a \"schema\" field" if schema is None else f"schema {json.dumps(schema)}"
    if isinstance(value, list):
        return "a JSON array"
    if value is None:
        return "JSON null"
    return "a JSON " + ("boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float))
                        else "string")


def shape_of_report(path: str) -> dict | list[dict]:
    item = FleetInput(path, "report")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        return _problem_shape(item, f"{path} could not be read ({exc.strerror or exc})")
    if len(data) > MAX_REPORT_BYTES:
        return _problem_shape(item, f"{path} is over {MAX_REPORT_BYTES // (1024 * 1024)} MiB: not a k3diag report")
    if not data.strip():
        return _problem_shape(item, f"{path} is empty; give bundles or `k3diag check --format json` output")
    try:
        report = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return _problem_shape(item, f"{path} is not UTF-8 text, so not JSON; give bundles or `k3diag check --format "
                                    "json` output")
    except json.JSONDecodeError as exc:
        return _problem_shape(item, f"{path} is not JSON ({exc}); give bundles or `k3diag check --format json` output")
    except RecursionError:  # `[[[[...` nested deeper than the decoder goes: no report k3diag writes
        return _problem_shape(item, f"{path} nests its JSON deeper than a k3diag report does; give bundles or "
                                    "`k3diag check --format json` output")
    if not isinstance(report, dict) or report.get("schema") != "k3diag.report/1":
        return _problem_shape(item, f"{path} is not a k3diag report ({_what_json(report)}, expected schema "
                                    "'k3diag.report/1'); give bundles or `k3diag check --format json` output")
    machines = report.get("machines")
    if isinstance(machines, list) and machines:
        # `analyze --json` over inputs from several machines: one full report per machine in machines[].
        return [_shape_of_entry(entry, path, number) for number, entry in enumerate(machines, 1)
                if isinstance(entry, dict)]
    stored = report.get("shape")
    if isinstance(stored, dict) and stored.get("schema") == SHAPE_SCHEMA and isinstance(stored.get("features"), dict):
        # Written by `check` on the node, with the evidence lines the report alone no longer has; taken as
        # far as its fields have the types k3diag writes (a damaged one ended the summary of every node)
        from k3diag.fleet.shape_check import checked_shape

        shape, damaged = checked_shape(stored)
        if damaged:
            shape["damaged"] = damaged
        shape["source"] = path
        shape["node"] = shape.get("node") or _node(report, path)
        return shape
    return shape_from_report(report, path) | {"node": _node(report, path)}


def _shape_of_entry(entry: dict, path: str, number: int) -> dict:
    from k3diag.fleet.shape import node_name

    return shape_from_report(entry, path) | {"node": node_name(entry, f"{_fallback_name(path)}#{number}")}


def shape_of(item: FleetInput) -> list[dict]:
    """One shape per machine the input describes (a report of several machines gives several). Never
    raises: a node that cannot be read is a shape with a `problem` sentence."""
    try:
        shapes = shape_of_bundle(item.path) if item.kind == "bundle" else shape_of_report(item.path)
    except MemoryError:
        shapes = _problem_shape(item, f"{item.path} needed more memory than is available")
    except Exception as exc:  # one odd node must not cost the fleet summary
        reason = f"{type(exc).__name__}: {exc}"
        if item.kind == "report" and isinstance(exc, (TypeError, AttributeError, ValueError, KeyError)):
            # JSON that names k3diag's schema and trips its reader holds a value of a type k3diag does not write
            shapes = _problem_shape(item, f"{item.path} holds a value of a type k3diag does not write ({reason}), "
                                          "so its node was not compared; give its bundle, or the node's `k3diag "
                                          "check --format json` output")
        else:
            shapes = _problem_shape(item, f"{item.path} could not be analyzed ({reason})")
    return shapes if isinstance(shapes, list) else [shapes]


def _shapes_of(items: list[FleetInput]) -> list[dict]:
    return [shape for item in items for shape in shape_of(item)]


def _intern(shape: dict) -> dict:
    """Share the strings that repeat across nodes (feature names and values, SKU fields, pair matrices)."""
    intern = sys.intern
    features = shape.get("features")
    if isinstance(features, dict):
        shape["features"] = {intern(str(k)): intern(str(v)) for k, v in features.items()}
    if isinstance(shape.get("evidence"), dict):
        shape["evidence"] = {intern(str(k)): v for k, v in shape["evidence"].items()}
    if isinstance(shape.get("pairs"), str):
        shape["pairs"] = intern(shape["pairs"])
    sku = shape.get("sku")
    if isinstance(sku, dict):
        shape["sku"] = {intern(k): intern(v) if isinstance(v, str) else v for k, v in sku.items()}
    findings = []
    for finding in shape.get("findings") or []:
        if not isinstance(finding, dict):
            continue
        # The aggregate counts findings by id; their evidence lines are already under the shape's
        # `finding <id>` features, so each node keeps only what names the finding.
        findings.append({key: intern(finding[key]) if isinstance(finding.get(key), str) else finding.get(key)
                         for key in ("id", "severity", "subject", "title")})
    shape["findings"] = findings
    if isinstance(shape.get("state"), str):
        shape["state"] = intern(shape["state"])
    return shape


def iter_shapes(items: list[FleetInput], workers: int | None = None,
                progress: Callable[[int, int], None] | None = None) -> Iterator[dict]:
    """Shapes in input order is not promised; every item yields exactly one shape."""
    workers = workers if workers is not None else (os.cpu_count() or 1)
    total = len(items)
    done = 0
    chunks = [items[i:i + CHUNK] for i in range(0, total, CHUNK)]
    if workers <= 1 or len(chunks) <= 1:
        for chunk in chunks:
            for shape in _shapes_of(chunk):
                done += 1
                yield _intern(shape)
            if progress:
                progress(done, total)
        return
    window = workers * 2
    # a worker ends with this process, however it ends (SIGTERM, SIGKILL), and at once on Ctrl-C
    with ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        try:
            yield from _pooled_shapes(pool, chunks, window, total, progress)
        except BaseException:
            stop_workers(pool)
            raise


def _pooled_shapes(pool: ProcessPoolExecutor, chunks: list[list[FleetInput]], window: int, total: int,
                   progress: Callable[[int, int], None] | None) -> Iterator[dict]:
    done = 0
    pending: dict[Future, list[FleetInput]] = {}
    queue = iter(chunks)
    with sigterm_held():  # the first submit forks the workers
        for chunk in queue:
            pending[pool.submit(_shapes_of, chunk)] = chunk
            if len(pending) >= window:
                break
    while pending:
        finished, _ = wait(set(pending), return_when=FIRST_COMPLETED)
        for future in finished:
            chunk = pending.pop(future)
            try:
                shapes = future.result()
            except Exception:  # a worker killed (out of memory, a signal): name its inputs
                shapes = [_problem_shape(item, f"{item.path} could not be analyzed: the worker process reading it "
                                               "ended before it answered (out of memory, or killed by a signal)")
                          for item in chunk]
            for shape in shapes:
                done += 1
                yield _intern(shape)
            if progress:
                progress(done, total)
            nxt = next(queue, None)
            if nxt is not None:
                pending[pool.submit(_shapes_of, nxt)] = nxt
