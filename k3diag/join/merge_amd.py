"""AMD topology facts into the `Machine`: GPUs, GPU-GPU links (XGMI/PCIE), P2P, bandwidth.

Which `Machine` GPU a fact belongs to:
  1. a GPU already known with the same bus id (joins amd-smi, amdsmi, lspci, rocm-smi...);
  2. the tool's own index (rocm-smi, amd-smi JSON, amdsmi) when that slot is free or holds a
     GPU without a bus id;
  3. for amd-smi text tables (bus ids only), the position in bus order, which is the order
     amd-smi numbers GPUs in since ROCm 6.0; the next free index if that slot is taken.
Nothing is overwritten: a value another source already gave wins, and a contradiction
becomes a warning on the input.
"""

from __future__ import annotations

from k3diag.model.amd_records import AmdGpuFact, AmdPairFact, AmdTopology, link_type_from_weight
from k3diag.model.machine import InputRecord, Machine
from k3diag.model.source import keep_source
from k3diag.model.topology import Gpu, Link, P2PStatus

EXTRAS_BANDWIDTH = "amd_link_bandwidth"
EXTRAS_MESSAGES = "amd_tool_messages"


def merge_rocm_smi(result: AmdTopology, machine: Machine, record: InputRecord) -> None:
    _merge(result, machine, record, origin="rocm-smi-showtopo")


def merge_amd_smi(result: AmdTopology, machine: Machine, record: InputRecord) -> None:
    _merge(result, machine, record, origin="amd-smi-topology")


def merge_amd_smi_static(result: AmdTopology, machine: Machine, record: InputRecord) -> None:
    _merge(result, machine, record, origin="amd-smi-static-bus")


def merge_amdsmi(result: AmdTopology, machine: Machine, record: InputRecord) -> None:
    _merge(result, machine, record, origin="amdsmi")


def _merge(result: AmdTopology, machine: Machine, record: InputRecord, origin: str) -> None:
    index_of = _assign_indices(result, machine, record)
    for fact in result.gpus:
        index = index_of.get(id(fact))
        if index is not None:
            _merge_gpu(machine.gpu(index), fact, record)
    for ref in result.tool_messages:
        machine.extras.setdefault(EXTRAS_MESSAGES, []).append(ref.to_json())
    pairs: dict[tuple[int, int], AmdPairFact] = {}
    for pair in result.pairs:
        src = _resolve(result, index_of, pair.src_index, pair.src_bus_id)
        dst = _resolve(result, index_of, pair.dst_index, pair.dst_bus_id)
        if src is None or dst is None or src == dst:
            continue
        pairs[(src, dst)] = pair
        if pair.accessible is not None:
            machine.p2p.append(
                P2PStatus(
                    src=f"GPU{src}",
                    dst=f"GPU{dst}",
                    capability="unknown",
                    status="OK" if pair.accessible else "NS",
                    origin=origin,
                    source=pair.source("accessible"),
                )
            )
    for (src, dst), pair in sorted(pairs.items()):
        if src > dst and (dst, src) in pairs:
            continue  # the pair was written from its lower index
        reverse = pairs.get((dst, src))
        _merge_link(machine, record, origin, min(src, dst), max(src, dst), pair, reverse)


def _assign_indices(result: AmdTopology, machine: Machine, record: InputRecord) -> dict[int, int]:
    """id(fact) -> Machine GPU index, following the rules in the module docstring."""
    index_of: dict[int, int] = {}
    taken: set[int] = set()
    by_bus_order = sorted((fact for fact in result.gpus if fact.bus_id), key=lambda fact: fact.bus_id or "")
    bus_rank = {id(fact): rank for rank, fact in enumerate(by_bus_order)}
    for fact in result.gpus:
        known = machine.gpu_by_bus_id(fact.bus_id) if fact.bus_id else None
        if known is not None:
            index_of[id(fact)] = known.index
            taken.add(known.index)
    for fact in result.gpus:
        if id(fact) in index_of:
            continue
        wanted = fact.index if fact.index is not None else bus_rank.get(id(fact))
        if wanted is None:
            continue
        if wanted in taken or not _slot_free(machine, wanted, fact):
            replacement = _next_free(machine, taken)
            record.warnings.append(
                f"GPU {fact.label()} could not take index {wanted} (another GPU with a different bus id has it); "
                f"it is GPU{replacement} in this report"
            )
            wanted = replacement
        index_of[id(fact)] = wanted
        taken.add(wanted)
    return index_of


def _slot_free(machine: Machine, index: int, fact: AmdGpuFact) -> bool:
    existing = machine.gpus.get(index)
    if existing is None or existing.bus_id is None or fact.bus_id is None:
        return existing is None or existing.vendor in (None, "AMD")
    return existing.bus_id == fact.bus_id


def _next_free(machine: Machine, taken: set[int]) -> int:
    candidate = 0
    while candidate in taken or candidate in machine.gpus:
        candidate += 1
    return candidate


def _resolve(result: AmdTopology, index_of: dict[int, int], index: int | None, bus: str | None) -> int | None:
    for fact in result.gpus:
        if (bus is not None and fact.bus_id == bus) or (bus is None and index is not None and fact.index == index):
            return index_of.get(id(fact))
    return None


def _merge_gpu(gpu: Gpu, fact: AmdGpuFact, record: InputRecord) -> None:
    if gpu.vendor is None:
        gpu.vendor = "AMD"
    if fact.bus_id and gpu.bus_id is None:
        gpu.bus_id = fact.bus_id
    if fact.name and gpu.name is None:
        gpu.name = fact.name
    numa = fact.numa_node if fact.numa_node is not None else fact.numa_affinity
    if numa is not None:
        if gpu.numa_node is None:
            gpu.numa_node = numa
        elif gpu.numa_node != numa:
            record.warnings.append(
                f"{gpu.label}: this input says NUMA node {numa}, another said {gpu.numa_node}; kept {gpu.numa_node}"
            )
    for attribute, value in (
        ("gen_current", fact.pcie_gen_current),
        ("gen_max", fact.pcie_gen_max),
        ("width_current", fact.pcie_width_current),
        ("width_max", fact.pcie_width_max),
    ):
        if value is not None and getattr(gpu.pcie, attribute) is None:
            setattr(gpu.pcie, attribute, value)
            if gpu.pcie.source is None:
                gpu.pcie.source = fact.source
    keep_source(gpu.sources, fact.source)


def _merge_link(
    machine: Machine,
    record: InputRecord,
    origin: str,
    low: int,
    high: int,
    pair: AmdPairFact,
    reverse: AmdPairFact | None,
) -> None:
    forward = pair
    link_type = forward.link_type or (reverse.link_type if reverse else None)
    hops = forward.hops if forward.hops is not None else (reverse.hops if reverse else None)
    weight = forward.weight if forward.weight is not None else (reverse.weight if reverse else None)
    if link_type is None and weight is not None:
        # No LINK TYPE table (rocm-smi --showtopoweight, a cut paste): the weight says it (15 per xGMI hop).
        link_type = link_type_from_weight(weight)
    if reverse is not None and forward.link_type and reverse.link_type and forward.link_type != reverse.link_type:
        record.warnings.append(
            f"GPU{low}/GPU{high}: the two directions disagree on the link type "
            f"({forward.link_type} vs {reverse.link_type}); the lower index's row is used"
        )
    if link_type is not None or hops is not None or weight is not None:
        machine.add_link(
            Link(
                a=f"GPU{low}",
                b=f"GPU{high}",
                path=link_type,
                hops=hops,
                weight=weight,
                origin=origin,
                source=forward.source("link_type", "hops", "weight") or (reverse.source() if reverse else None),
            )
        )
    measured = forward if forward.bandwidth_max is not None or reverse is None else reverse
    low_bw, high_bw = measured.bandwidth_min, measured.bandwidth_max
    if high_bw is not None:
        source = measured.source("bandwidth")
        machine.extras.setdefault(EXTRAS_BANDWIDTH, []).append(
            {
                "a": f"GPU{low}",
                "b": f"GPU{high}",
                "min_mb_s": low_bw,
                "max_mb_s": high_bw,
                "origin": origin,
                "source": source.to_json() if source else None,
            }
        )
