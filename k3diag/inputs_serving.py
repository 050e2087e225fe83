"""Serving results from the paths the user gave, with each run's layout resolved.

Files, folders and bundles are read like every other input (`k3diag.inputs`), formats detected from
content. A run whose result file does not say its layout gets it, in this order, from the engine log
beside it (vLLM prints tensor_parallel_size and, in its P2P cache path, CUDA_VISIBLE_DEVICES), from
a `k3diag-run.toml` sidecar in the same folder, or from the file name (`tp4`, `2xtp2`, `gpus0,1`);
the report says which (`source`). See docs/serving.md for the sidecar.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k3diag.model.serving import EngineLog, RunLayout, ServingRun

SIDECAR = "k3diag-run.toml"
MAX_SIDECAR_BYTES = 64 * 1024


@dataclass
class ServingInputs:
    runs: list[ServingRun] = field(default_factory=list)
    machine: Any = None  # the Machine the results were read into (engine logs, P2P caches, NCCL runs)
    inputs: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def load_serving(paths: list[Path]) -> ServingInputs:
    from k3diag.inputs import load_machine
    from k3diag.join.merge_serving import ENGINES, RUNS

    machine, errors = load_machine(paths)
    # The sidecar is read here, not detected as a tool output: keep it out of the unknown inputs.
    machine.inputs = [r for r in machine.inputs if not (r.format == "unknown" and Path(r.path).name == SIDECAR)]
    out = ServingInputs(machine=machine)
    out.inputs = [record.to_json() for record in machine.inputs]
    out.warnings.extend(e for e in errors if SIDECAR not in e)
    # An input that is no result k3diag reads must not vanish from the text report (it was only in --json).
    # Nor what reading a result said of it (a number read as null, a cut file, a reply's marks taken off).
    for record in machine.inputs:
        if record.format == "unknown":
            why = record.warnings[0] if record.warnings else "no format k3diag reads was found in it"
            out.warnings.append(why if why.startswith(record.path) else f"{record.path}: {why}")
        else:
            out.warnings.extend(why if why.startswith(record.path) else f"{record.path}: {why}"
                                for why in record.warnings)
    out.runs = list(machine.extras.get(RUNS, []))
    engines: list[EngineLog] = list(machine.extras.get(ENGINES, []))
    sidecars: dict[Path, dict | None] = {}
    for run in out.runs:
        if run.layout.source != "unknown" and run.layout.tp is not None and run.layout.gpus:
            continue
        folder = _folder_of(run.input)
        sidecar = None
        if folder is not None:
            if folder not in sidecars:
                sidecars[folder] = _read_sidecar(folder / SIDECAR, out.warnings)
            sidecar = sidecars[folder]
        _resolve(run, engines, sidecar, folder)
    return out


def _folder_of(name: str) -> Path | None:
    if ":" in name and not Path(name).exists():  # a bundle member, "bundle.tar.gz:member"
        return None
    path = Path(name)
    return path.parent if path.exists() else None


def _resolve(run: ServingRun, engines: list[EngineLog], sidecar: dict | None, folder: Path | None) -> None:
    from k3diag.parse.serving.common import check_layout, layout_from_mapping, layout_from_name

    layout = run.layout
    file_name = Path(run.input).name
    if sidecar is not None:
        table = dict(sidecar.get("run") or {}) if isinstance(sidecar.get("run"), dict) else {}
        table.update({k: v for k, v in sidecar.items() if not isinstance(v, dict)})
        files = sidecar.get("files") if isinstance(sidecar.get("files"), dict) else {}
        specific = files.get(file_name)
        if isinstance(specific, dict):
            table.update(specific)
        found = layout_from_mapping(table, "sidecar", f"{SIDECAR}:", run.warnings)
        if found is not None:
            layout = _merge(layout, found)
        if run.model is None and isinstance(table.get("model"), str):
            run.model = table["model"]
        if run.concurrency is None and table.get("concurrency") is not None:
            try:
                run.concurrency = float(table["concurrency"])
            except (TypeError, ValueError):
                run.warnings.append(f"{SIDECAR}: concurrency {table['concurrency']!r} is not a number")
    engine = _engine_for(run, engines, folder, layout)
    if engine is not None:
        found = RunLayout(tp=engine.tp, pp=engine.pp, dp=engine.dp, gpus=engine.cuda_visible_devices,
                          source="engine-log", detail=f"vLLM log {Path(engine.input).name}")
        layout = _merge(layout, found)
        if run.model is None:
            run.model = engine.model
    if layout.tp is None:
        found = layout_from_name(run.input)
        if found is not None:
            layout = _merge(layout, found)
    run.layout = layout
    if not any(w.startswith(run.input) and "GPUs but lists" in w for w in run.warnings):
        check_layout(run)


def _merge(current: RunLayout, found: RunLayout) -> RunLayout:
    """Fill what `current` lacks from `found`; the first source that said the TP size names the layout."""
    if current.tp is None and current.gpus is None:
        return found
    merged = RunLayout(tp=current.tp if current.tp is not None else found.tp,
                       pp=current.pp if current.pp is not None else found.pp,
                       dp=current.dp if current.dp is not None else found.dp,
                       ep=current.ep if current.ep is not None else found.ep,
                       gpus=current.gpus if current.gpus is not None else found.gpus,
                       source=current.source, detail=current.detail)
    if current.tp is None and found.tp is not None:
        merged.source, merged.detail = found.source, found.detail
    if merged.detail and found.detail and found.detail not in merged.detail and (
            (current.gpus is None and found.gpus is not None) or (current.tp is None and found.tp is not None)):
        merged.detail = f"{merged.detail}; {found.detail}"
    return merged


def _engine_for(run: ServingRun, engines: list[EngineLog], folder: Path | None, layout: RunLayout) -> EngineLog | None:
    """The engine log that served this run: the only one beside it, or the one whose TP matches."""
    if not engines:
        return None
    near = [e for e in engines if folder is not None and _folder_of(e.input) == folder and e.tp is not None]
    if layout.tp is not None:
        near = [e for e in near if e.tp == layout.tp]
        if layout.gpus:
            exact = [e for e in near if e.cuda_visible_devices and sorted(e.cuda_visible_devices) == sorted(layout.gpus)]
            near = exact or [e for e in near if not e.cuda_visible_devices]
    stem = Path(run.input).stem.lower()
    named = [e for e in near if Path(e.input).stem.lower() in stem or stem in Path(e.input).stem.lower()]
    if len(named) == 1:
        return named[0]
    return near[0] if len(near) == 1 else None


def _read_sidecar(path: Path, warnings: list[str]) -> dict | None:
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > MAX_SIDECAR_BYTES:
            warnings.append(f"{path} is larger than {MAX_SIDECAR_BYTES // 1024} KiB and was not read")
            return None
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        warnings.append(f"{path} could not be read ({exc})")
        return None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - 3.10 has tomli from the dependencies
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        warnings.append(f"{path} is not valid TOML ({exc}); see docs/serving.md for its keys")
        return None
    return data
