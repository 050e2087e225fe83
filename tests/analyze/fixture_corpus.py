"""Every real fixture the repository holds, as a machine: the sweep tests judge what k3diag says on each."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from k3diag.model.machine import Machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# Folders of single saved outputs; advise/ holds model configs, not machine evidence.
FILE_FOLDERS = ("nvidia", "amd", "bench", "nccl", "pcie", "scenarios")


def _from_paths(*paths: Path) -> Callable[[], Machine]:
    def build() -> Machine:
        from k3diag.inputs import load_machine

        machine, _ = load_machine(list(paths))
        return machine

    return build


def _from_nvml(path: Path) -> Callable[[], Machine]:
    def build() -> Machine:
        from k3diag.collect.nvml import collect_nvml
        from k3diag.collect.nvml_fake import FakeNvmlBackend
        from k3diag.join.build import build_machine

        return build_machine([collect_nvml(FakeNvmlBackend.from_file(path))])

    return build


def _from_sysfs(root: Path) -> Callable[[], Machine]:
    def build() -> Machine:
        from k3diag.collect.sysfs import collect_platform
        from k3diag.join.build import build_machine

        return build_machine(collect_platform(root, run_dmesg=False))

    return build


def corpus() -> Iterator[tuple[str, Callable[[], Machine]]]:
    """(name relative to fixtures/, a function that builds its machine), in a stable order."""
    for folder in FILE_FOLDERS:
        for path in sorted((FIXTURES / folder).iterdir()):
            if path.name == "SOURCES.md":
                continue
            yield f"{folder}/{path.name}", _from_paths(path)
    for path in sorted((FIXTURES / "bundles").iterdir()):
        if path.is_dir() and (path / "manifest.json").is_file():
            yield f"bundles/{path.name}", _from_paths(path)
    for path in sorted((FIXTURES / "nvml").glob("*.json")):
        yield f"nvml/{path.name}", _from_nvml(path)
    for path in sorted((FIXTURES / "sysfs").iterdir()):
        if path.is_dir():
            yield f"sysfs/{path.name}", _from_sysfs(path)
