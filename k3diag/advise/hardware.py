"""The hardware a plan is for: a catalog GPU and a count, from flags or from a machine k3diag read.

From a machine, the GPU model is matched to the catalog by its device name, the memory per GPU is the
smallest the inputs report, and the count is the GPUs the inputs show (a filtered `nvidia-smi -q -i 0`
shows fewer than the machine has: `attached_count` says how many it has).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3diag.advise.catalog import GpuSpec, find_gpu, gpu_from_device_name
from k3diag.model.words import counted


class AdviceError(ValueError):
    """An impossible or malformed request; the message is one sentence for the user."""


class NoGpuError(AdviceError):
    """The host or inputs hold no GPU to plan for: nothing to judge (exit 3), not a wrong command line."""


@dataclass
class Hardware:
    gpu: GpuSpec
    count: int
    memory_gib: float
    source: str
    machine: Any = None
    gpu_ids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    # What the machine's inputs say of the GPUs they do not show, read from the machine (none from flags). The plan
    # is for the `count` GPUs shown.
    @property
    def attached_count(self) -> int:
        """The machine's GPU count when its inputs show fewer (`Attached GPUs : 8` above the one block of
        `nvidia-smi -q -i 0`); 0 when they show them all or say nothing of a count."""
        machine = self.machine
        return machine.attached_gpu_count() if machine is not None and machine.unseen_attached_gpus() else 0

    @property
    def attached_source(self):
        """The line that gives that count, or None."""
        return self.machine.attached_count_source() if self.attached_count else None

    @property
    def gpu_list_cut(self):
        """The header line of a GPU list cut short in the paste (`GPU0  GPU1  GPU2  ...`) when no input gives the
        machine's count: it has at least `count` GPUs. None otherwise."""
        machine = self.machine
        return machine.gpu_list_cuts[0] if machine is not None and machine.gpu_count_is_a_floor() else None

    def node_of(self) -> dict[int, int]:
        if self.machine is not None:
            return {g: 0 for g in self.gpu_ids}
        per = max(self.gpu.gpus_per_node, 1)
        return {g: i // per for i, g in enumerate(self.gpu_ids)}

    @property
    def nodes(self) -> int:
        return len(set(self.node_of().values()))

    def to_json(self) -> dict:
        return {
            "gpu": self.gpu.id,
            "gpu_name": self.gpu.name,
            "count": self.count,
            "nodes": self.nodes,
            "memory_gib": round(self.memory_gib, 3),
            "bandwidth_gbs": self.gpu.bandwidth_gbs,
            "bf16_tflops": self.gpu.bf16_tflops,
            "fabric": self.gpu.fabric.kind,
            "source": self.source,
            "attached_count": self.attached_count or self.count,
            "count_is_a_floor": self.gpu_list_cut is not None,
            "notes": list(self.notes),
        }


def _check_memory_override(memory_gib: float | None, physical_gib: float, what: str) -> float:
    if memory_gib is None:
        return physical_gib
    if memory_gib <= 0:
        raise AdviceError(f"--memory-gib must be positive, not {memory_gib:g}.")
    if memory_gib > physical_gib + 1e-6:
        raise AdviceError(f"--memory-gib {memory_gib:g} is more than the {physical_gib:.1f} GiB {what} has.")
    return memory_gib


def hardware_from_flags(gpu_name: str, count: int, memory_gib: float | None = None) -> Hardware:
    gpu = find_gpu(gpu_name)
    if count < 1:
        raise AdviceError(f"--count must be at least 1, not {count}.")
    memory = _check_memory_override(memory_gib, gpu.memory_gib, f"an {gpu.name}")
    notes = [gpu.note] if gpu.note else []
    return Hardware(gpu=gpu, count=count, memory_gib=memory, source="flags", gpu_ids=list(range(count)), notes=notes)


def hardware_from_machine(machine: Any, source: str, memory_gib: float | None = None, gpu_name: str | None = None) -> Hardware:
    """GPU model and count from a Machine (bundle, saved outputs or the live host)."""
    gpus = machine.sorted_gpus() if hasattr(machine, "sorted_gpus") else []
    if not gpus:
        raise NoGpuError(f"no GPUs were found in {source}; pass --gpu NAME --count N instead.")
    notes: list[str] = []
    if gpu_name:
        spec = find_gpu(gpu_name)
    else:
        seen: dict[str, GpuSpec] = {}
        unknown: list[str] = []
        for g in gpus:
            match = gpu_from_device_name(g.name, g.memory_total_mib)
            if match is None:
                unknown.append(g.name or f"GPU{g.index} (no name reported)")
            else:
                seen[match.id] = match
        if not seen and not any(g.name for g in gpus):
            # `nvidia-smi topo -m` and lspci name no GPU model: the catalog entry is unknown, not missing
            raise AdviceError(
                f"no input in {source} names the GPUs' model ({counted(len(gpus), 'GPU')} seen, none named), so "
                "their memory and bandwidth are not known; add `nvidia-smi -q` or `nvidia-smi --query-gpu=name,"
                "memory.total --format=csv` to the inputs, or pass --gpu NAME."
            )
        if not seen:
            names = sorted(set(unknown))
            raise AdviceError(
                f"the GPUs in {source} ({', '.join(names)}) are not in the catalog; pass --gpu NAME to say which entry to use."
            )
        if len(seen) > 1:
            notes.append(f"{source} holds several GPU models ({', '.join(sorted(seen))}); planning with the smallest memory.")
        spec = min(seen.values(), key=lambda s: s.memory_mib)
        if unknown:
            notes.append(f"{counted(len(unknown), 'GPU')} not recognized ({', '.join(sorted(set(unknown)))}); "
                         f"counted as {spec.name}.")
    reported = [g.memory_total_mib for g in gpus if g.memory_total_mib and g.memory_total_mib > 0]  # a size, not a sentinel
    physical = min(reported) / 1024 if reported else spec.memory_gib
    if reported:
        notes.append(f"memory per GPU as {source} reports it: {physical:.1f} GiB.")
    memory = _check_memory_override(memory_gib, physical, f"each GPU in {source}")
    if spec.note:
        notes.append(spec.note)
    return Hardware(
        gpu=spec,
        count=len(gpus),
        memory_gib=memory,
        source=source,
        machine=machine,
        gpu_ids=[g.index for g in gpus],
        notes=notes,
    )
