"""What AMD tools say about GPUs and GPU pairs, before it is merged into the `Machine`.

`rocm-smi --showtopo` names GPUs by index, `amd-smi topology` by PCI bus id (its `--json`
adds amd-smi's own index), amdsmi readings by both. The parsers keep whatever identity the
tool printed; `k3diag.join.merge_amd` decides which `Machine` GPU each one is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef

# Link types as the AMD tools spell them. amd-smi 6.0 printed "XMGI" (sic) for XGMI.
LINK_TYPE_ALIASES: dict[str, str] = {
    "XGMI": "XGMI",
    "XMGI": "XGMI",
    "PCIE": "PCIE",
    "PCIEXPRESS": "PCIE",
}


# amd-smi/rocm-smi link weights (rocm-systems#7372): 15 per xGMI hop, 20 per PCIe segment. HOPS prints 1 for
# every pair inside one xGMI fabric, even pairs two xGMI links apart (MI250X GCDs), so the weight is the signal.
XGMI_HOP_WEIGHT = 15
PCIE_SEGMENT_WEIGHT = 20


def link_type_from_weight(weight: int | None) -> str | None:
    """XGMI or PCIE as the weight alone says it; None when it cannot tell (0, 60, or anything else)."""
    if not weight or weight <= 0:
        return None
    xgmi = weight % XGMI_HOP_WEIGHT == 0
    pcie = weight % PCIE_SEGMENT_WEIGHT == 0
    if xgmi and not pcie:
        return "XGMI"
    if pcie and not xgmi:
        return "PCIE"
    return None


def xgmi_hops_from_weight(weight: int | None) -> int | None:
    """How many xGMI links a pair's traffic crosses (weight 15 -> 1, 30 -> 2); None when the weight is not xGMI's."""
    if not weight or weight % XGMI_HOP_WEIGHT != 0:
        return None
    return weight // XGMI_HOP_WEIGHT


def normalize_link_type(text: str | None) -> str | None:
    """XGMI or PCIE, or None for SELF, N/A, UNKNOWN and anything else."""
    if text is None:
        return None
    return LINK_TYPE_ALIASES.get(text.strip().upper())


@dataclass
class AmdGpuFact:
    """One GPU as one AMD source names it: by the tool's index, its bus id, or both."""

    index: int | None = None
    bus_id: str | None = None  # normalized with normalize_bdf
    name: str | None = None
    numa_node: int | None = None
    numa_affinity: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    source: SourceRef | None = None

    def label(self) -> str:
        if self.index is not None:
            return f"GPU{self.index}"
        return self.bus_id or "GPU?"


@dataclass
class AmdPairFact:
    """What a source said about one ordered GPU pair (src -> dst).

    Endpoints are identified the way the source did: `*_index` (the tool's numbering),
    `*_bus_id`, or both. Every field is None when the source did not say.
    """

    src_index: int | None = None
    dst_index: int | None = None
    src_bus_id: str | None = None
    dst_bus_id: str | None = None
    link_type: str | None = None  # "XGMI" | "PCIE" | None
    link_type_raw: str | None = None  # as printed, e.g. "XMGI", "N/A"
    hops: int | None = None
    weight: int | None = None
    accessible: bool | None = None  # P2P accessibility (amd-smi ACCESS, amdsmi_is_P2P_accessible)
    bandwidth_min: int | None = None  # as amd-smi's NUMA BW table prints it (MB/s)
    bandwidth_max: int | None = None
    coherent: str | None = None  # amd-smi CACHE COHERENCY cell: C / NC
    atomics: str | None = None  # "64,32", "32", "64"
    dma: str | None = None  # T / F
    bi_directional: str | None = None  # T / F
    # Which line said what: keys are the field names above.
    sources: dict[str, SourceRef] = field(default_factory=dict)

    def source(self, *fields: str) -> SourceRef | None:
        for name in fields:
            if name in self.sources:
                return self.sources[name]
        return next(iter(self.sources.values()), None)


@dataclass
class AmdTopology:
    """The parse result of every AMD topology format (text, JSON, library readings)."""

    tool: str  # format name from the report contract, or "amdsmi"
    gpus: list[AmdGpuFact] = field(default_factory=list)
    pairs: list[AmdPairFact] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # sections/tables seen, in order
    tool_messages: list[SourceRef] = field(default_factory=list)  # WARNING lines the tool printed
    warnings: list[str] = field(default_factory=list)

    def gpu_by_index(self, index: int) -> AmdGpuFact:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        gpu = AmdGpuFact(index=index)
        self.gpus.append(gpu)
        return gpu

    def gpu_by_bus(self, bus_id: str) -> AmdGpuFact:
        for gpu in self.gpus:
            if gpu.bus_id == bus_id:
                return gpu
        gpu = AmdGpuFact(bus_id=bus_id)
        self.gpus.append(gpu)
        return gpu

    def pair(
        self,
        src_index: int | None = None,
        dst_index: int | None = None,
        src_bus_id: str | None = None,
        dst_bus_id: str | None = None,
    ) -> AmdPairFact:
        """The record for this ordered pair, created on first mention."""
        for item in self.pairs:
            if (
                item.src_index == src_index
                and item.dst_index == dst_index
                and item.src_bus_id == src_bus_id
                and item.dst_bus_id == dst_bus_id
            ):
                return item
        item = AmdPairFact(src_index=src_index, dst_index=dst_index, src_bus_id=src_bus_id, dst_bus_id=dst_bus_id)
        self.pairs.append(item)
        return item


def drop_placeholder_values(topology: AmdTopology) -> None:
    """Some driver builds print 0 for the weight and 0-0 for the bandwidth of every GPU pair
    (amd-smi 26.x on MI355X): 0 is the self value, so between two GPUs it means "not reported"."""
    pairs = [pair for pair in topology.pairs if pair.weight is not None]
    if pairs and all(pair.weight == 0 for pair in pairs):
        for pair in pairs:
            pair.weight = None
        topology.warnings.append(
            "every GPU pair has weight 0, which this tool prints when the driver does not report link "
            "weights; weights are treated as unknown"
        )
    bandwidths = [pair for pair in topology.pairs if pair.bandwidth_max is not None]
    if bandwidths and all(pair.bandwidth_max == 0 for pair in bandwidths):
        for pair in bandwidths:
            pair.bandwidth_min = pair.bandwidth_max = None
        topology.warnings.append(
            "every GPU pair has bandwidth 0-0, which this tool prints when the driver does not report "
            "XGMI bandwidth; bandwidths are treated as unknown"
        )
