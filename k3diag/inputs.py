"""Turning what the user pointed at (files, folders, bundles, or the live host) into evidence and a model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from k3diag.evidence import Evidence
from k3diag.model.machine import InputRecord, Machine

# A folder of saved outputs is walked this deep and this wide at most; a user who points
# k3diag at / by mistake gets a sentence, not a frozen terminal.
MAX_FOLDER_FILES = 5000
MAX_FOLDER_DEPTH = 6


def evidence_from_paths(paths: list[Path]) -> tuple[list[Evidence], list[InputRecord]]:
    """Evidence for every readable input, and an `unknown` input record for every one that is not."""
    evidence: list[Evidence] = []
    problems: list[InputRecord] = []
    for path in paths:
        name = str(path)
        if name == "-":
            problems.append(_problem(name, "reading standard input (-) is not supported; save the output to a file "
                                           "and give its path"))
            continue
        if not path.exists():
            if path.is_symlink():
                problems.append(_problem(name, f"{name} is a symbolic link to {os.readlink(path)}, which does not "
                                               "exist; check the path"))
            else:
                problems.append(_problem(name, f"{name} does not exist; check the path"))
            continue
        if _is_bundle(path):
            from k3diag.bundle import BundleError, read_bundle

            try:
                bundle = read_bundle(path)
            except BundleError as exc:
                problems.append(_problem(name, str(exc)))
                continue
            except OSError as exc:
                problems.append(_problem(name, f"could not read the bundle {name}: {exc.strerror or exc}"))
                continue
            evidence.extend(bundle.evidence)
            if bundle.warnings:
                problems.append(InputRecord(path=name, format="bundle", warnings=list(bundle.warnings)))
            else:
                problems.append(InputRecord(path=name, format="bundle"))
            continue
        if path.is_dir():
            found, folder_problems = _walk_folder(path)
            evidence.extend(found)
            problems.extend(folder_problems)
            continue
        if not path.is_file():
            problems.append(_problem(name, f"{name} is not a regular file (a device, socket or pipe); save the output to a file"))
            continue
        if not os.access(path, os.R_OK):
            problems.append(_problem(name, f"permission denied reading {name}; check its permissions or run as its owner"))
            continue
        evidence.append(Evidence(name=name, path=path))
    return evidence, problems


def _is_bundle(path: Path) -> bool:
    try:
        from k3diag.bundle import looks_like_bundle
    except ModuleNotFoundError:
        return False
    try:
        return looks_like_bundle(path)
    except OSError:
        return False


def _walk_folder(folder: Path) -> tuple[list[Evidence], list[InputRecord]]:
    evidence: list[Evidence] = []
    problems: list[InputRecord] = []
    base_depth = len(folder.parts)
    count = 0
    for current, dirs, files in os.walk(folder, followlinks=False):
        depth = len(Path(current).parts) - base_depth
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < MAX_FOLDER_DEPTH else []
        for file_name in sorted(files):
            if file_name.startswith("."):
                continue
            path = Path(current) / file_name
            if path.is_symlink():
                problems.append(_problem(str(path), f"{path} is a symbolic link and was not followed"))
                continue
            if not path.is_file():
                # Opening a FIFO blocks until someone writes to it: never open what is not a plain file.
                problems.append(_problem(str(path), f"{path} is not a regular file (a device, socket or pipe) "
                                                    "and was skipped"))
                continue
            count += 1
            if count > MAX_FOLDER_FILES:
                problems.append(_problem(str(folder), f"{folder} holds more than {MAX_FOLDER_FILES} files; only the first were read"))
                return evidence, problems
            evidence.append(Evidence(name=str(path), path=path))
    return evidence, problems


def _problem(name: str, message: str) -> InputRecord:
    return InputRecord(path=name, format="unknown", warnings=[message])


def load_machine(paths: list[Path]) -> tuple[Machine, list[str]]:
    """Build the model from saved evidence. Returns the machine and the one-sentence problems met."""
    from k3diag.join.build import build_machine

    evidence, problems = evidence_from_paths(paths)
    machine = Machine()
    machine.inputs.extend(problems)
    build_machine(evidence, machine)
    errors = [warning for record in problems for warning in record.warnings if record.format == "unknown"]
    return machine, errors


def load_live_machine(
    root: Path = Path("/"), timeout_s: float = 20.0, progress: Callable[[str], None] | None = None
) -> tuple[Machine, list[Evidence]]:
    """Collect from this host and build the model; also returns the evidence (for `collect`)."""
    from k3diag.collect.live import collect_live
    from k3diag.join.build import build_machine

    evidence = collect_live(root=root, timeout_s=timeout_s, progress=progress)
    machine = build_machine(evidence, Machine(live=True))
    return machine, evidence
