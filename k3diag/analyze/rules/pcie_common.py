"""What the PCIe rules share: the GPUs and NICs to judge, the words for port roles, evidence lists."""

from __future__ import annotations

from typing import Iterable

from k3diag.analyze.finding import Finding
from k3diag.model.machine import Machine
from k3diag.model.pci import PORT_DOWNSTREAM, PORT_ROOT, PORT_UPSTREAM, PciDevice
from k3diag.model.pcie_tree import PcieTree, gpu_endpoints, nic_endpoints
from k3diag.model.source import SourceRef
from k3diag.model.topology import nvlink_count

IOMMU_CAUSE = "iommu-translated@iommu"
_ROLE_WORDS = {PORT_ROOT: "root port", PORT_DOWNSTREAM: "switch downstream port", PORT_UPSTREAM: "switch upstream port"}


def judged_endpoints(machine: Machine, tree: PcieTree) -> list[tuple[str, str, str]]:
    """(label, bdf, kind) for GPUs then NICs."""
    return [(label, bdf, "gpu") for label, bdf in gpu_endpoints(machine, tree)] + [
        (label, bdf, "nic") for label, bdf in nic_endpoints(machine, tree)
    ]


def role_words(tree: PcieTree, bdf: str) -> str:
    return _ROLE_WORDS.get(tree.role(bdf) or "", "bridge")


def evidence_refs(*groups: Iterable[SourceRef | None]) -> list[SourceRef]:
    out: list[SourceRef] = []
    for group in groups:
        for ref in group:
            if ref is not None and ref not in out:
                out.append(ref)
    return out


def link_cause(earlier: list[Finding], finding_id: str, subject: str, key: str) -> None:
    """Mark a GPU-level finding (from nvidia-smi) as explained by a finding here."""
    for finding in earlier:
        if finding.id == finding_id and subject in finding.subjects and key not in finding.causes:
            finding.causes.append(key)


def gpu_busy(machine: Machine, label: str) -> bool | None:
    for gpu in machine.gpus.values():
        if gpu.label == label:
            if gpu.performance_state is None:
                return None
            return gpu.performance_state == "P0"
    return None


def nvlinked(machine: Machine, a: str, b: str) -> bool:
    return any((nvlink_count(link.path) or 0) > 0 for link in machine.links_between(a, b))


def covered_bdfs(tree: PcieTree, endpoints: list[tuple[str, str, str]]) -> set[str]:
    covered: set[str] = set()
    for _label, bdf, _kind in endpoints:
        covered.update(tree.path(bdf))
    return covered


def device_name(device: PciDevice) -> str:
    if device.bdf is not None:
        return device.bdf
    # An excerpt (`lspci -vv | grep Lnk`) names no device: say where in the input the link was read.
    line = device.source.line if device.source is not None else None
    what = device.description or "a device whose lspci header line is not in the excerpt"
    return f"{what} (read at line {line})" if line is not None else what


def label_key(label: str) -> tuple[int, int, str]:
    if label.startswith("GPU") and label[3:].isdigit():
        return (0, int(label[3:]), "")
    return (1, 0, label)


def join_words(items: list[str]) -> str:
    if not items:
        return "them"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def endpoint_bdfs(machine: Machine, tree: PcieTree) -> dict[str, str]:
    """label -> bdf of the judged GPUs and NICs (the first, when a label repeats)."""
    bdfs: dict[str, str] = {}
    for label, bdf, _kind in judged_endpoints(machine, tree):
        bdfs.setdefault(label, bdf)
    return bdfs
