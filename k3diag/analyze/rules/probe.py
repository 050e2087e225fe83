"""Findings from `k3diag probe`: host<->GPU copies far below the GPU's PCIe link class, and copies
whose bytes did not arrive intact.

Peer copies no faster than host-staged ones, and refused peer access, are judged by the same
rules as p2pBandwidthLatencyTest's matrices (`rules/benchmarks.py`): a probe record answers the
same questions.

The bandwidth threshold plays the role of DCGM's `pcie` plugin parameter
`h2d_d2h_single_pinned.min_bandwidth`, but derived from the link the GPU can train to instead of a
per-SKU constant: pinned copies reach about 80% of a link's raw rate (a Gen5 x16 link: ~63 GB/s
raw, ~50 GB/s measured), so under 60% of the raw rate is a link or platform problem, not noise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.analyze.rules.benchmarks import PCIE_LANE_GBPS
from k3diag.model.machine import Machine
from k3diag.model.topology import Gpu

if TYPE_CHECKING:  # imported where there are benchmarks (start-up counts)
    from k3diag.model.probe_records import ProbeBenchmark, ProbeGpu

LOW_FRACTION_OF_RAW = 0.6
PINNED_EFFICIENCY = 0.8  # what pinned copies reach of a PCIe link's raw rate


def _probes(machine: Machine) -> list[ProbeBenchmark]:
    if not machine.benchmarks:
        return []
    from k3diag.model.probe_records import ProbeBenchmark

    return [b for b in machine.benchmarks if isinstance(b, ProbeBenchmark)]


def raw_link_gbps(gen: int | None, width: int | None) -> float | None:
    """One direction of a PCIe link, before protocol overhead (GB/s)."""
    if gen is None or width is None or gen not in PCIE_LANE_GBPS or width <= 0:
        return None
    return round(PCIE_LANE_GBPS[gen] * width, 1)


def _model_gpu(machine: Machine, probed: ProbeGpu) -> Gpu | None:
    if probed.bus_id:
        found = machine.gpu_by_bus_id(probed.bus_id)
        if found is not None:
            return found
    return None


def check_host_bandwidth_low(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _probes(machine):
        for probed in bench.gpus:
            gpu = _model_gpu(machine, probed)
            if gpu is None:
                continue
            link = gpu.pcie
            capable = raw_link_gbps(link.gen_max, link.width_max)
            trained = raw_link_gbps(link.gen_current, link.width_current)
            if capable is None:
                continue
            measured = {"host->device": probed.host_to_device_gbps, "device->host": probed.device_to_host_gbps}
            low = {direction: value for direction, value in measured.items()
                   if value is not None and value < LOW_FRACTION_OF_RAW * capable}
            if not low:
                continue
            worst_direction, worst = min(low.items(), key=lambda item: item[1])
            causes = []
            trained_text = ""
            if trained is not None and trained < capable:
                trained_text = (f" The link trained at Gen{link.gen_current} x{link.width_current} "
                                f"({trained:.1f} GB/s raw), below its Gen{link.gen_max} x{link.width_max}: that alone "
                                "explains the shortfall.")
                causes = [f"pcie-width-below-max@{gpu.label}", f"pcie-gen-below-max@{gpu.label}",
                          f"pcie-link-width-limited-by-hop@{gpu.label}", f"pcie-link-speed-below-capability@{gpu.label}"]
            evidence = [s for s in (probed.source, link.source) if s is not None]
            yield Finding(
                id="probe-host-bandwidth-low",
                severity="warn",
                subjects=[gpu.label],
                title=(f"{gpu.label} moves {worst:.1f} GB/s {worst_direction} over a Gen{link.gen_max} x{link.width_max} "
                       f"link that gives ~{capable * PINNED_EFFICIENCY:.0f} GB/s"),
                explanation=(
                    f"k3diag probe copied {(bench.size_bytes or 0) // (1024 * 1024)} MiB of pinned host memory to and from "
                    f"{gpu.label}: " + ", ".join(f"{d} {v:.1f} GB/s" for d, v in measured.items() if v is not None)
                    + f". A Gen{link.gen_max} x{link.width_max} link carries {capable:.1f} GB/s raw per direction and "
                    f"pinned copies reach ~{PINNED_EFFICIENCY:.0%} of that; under {LOW_FRACTION_OF_RAW:.0%} means the link, a switch above "
                    "it or the host side (IOMMU translation, a CPU socket far from the GPU, memory bandwidth) is "
                    "limiting. Loading weights, KV-cache offload and host-staged NCCL traffic all go this way."
                    + trained_text
                ),
                evidence=evidence,
                remedy=("Reseat or move the card if the link trained narrow or slow; check `sudo lspci -vv -s BUS` LnkSta "
                        "against LnkCap on the GPU and every bridge above it; run the probe pinned to the GPU's NUMA node "
                        "(`numactl --cpunodebind=N --membind=N k3diag probe`) to rule out cross-socket host memory; "
                        "use iommu=pt if the IOMMU translates."),
                causes=causes,
                confirm_with="k3diag probe --gpu N; nvidia-smi -q -d PCIE; dcgmi diag -r pcie",
                data={"measured_gbps": measured, "raw_link_gbps": capable, "trained_raw_gbps": trained},
            )


def check_data_mismatch(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for bench in _probes(machine):
        bad_gpus = [g for g in bench.gpus if g.data_ok is False]
        bad_pairs = [p for p in bench.pairs if p.data_ok_peer_enabled is False or p.data_ok_peer_disabled is False]
        for gpu in bad_gpus:
            yield Finding(
                id="probe-data-mismatch",
                severity="fail",
                subjects=[f"GPU{gpu.index}"],
                title=f"Bytes copied to GPU{gpu.index} and back came back different",
                explanation=("k3diag probe wrote a pattern to pinned host memory, copied it to the GPU and back, and the "
                             "windows it checked differ. Host<->GPU copies are corrupting data: every weight load and "
                             "offload on this GPU is suspect."),
                evidence=[gpu.source] if gpu.source else [],
                remedy="Take the GPU out of service; check `dmesg` for Xid and AER errors and run `dcgmi diag -r 3`.",
                confirm_with="dcgmi diag -r pcie; dmesg | grep -iE 'xid|aer'",
                data={"gpu": gpu.index},
            )
        for pair in bad_pairs:
            modes = [name for name, ok in (("with peer access enabled", pair.data_ok_peer_enabled),
                                           ("staged through the host", pair.data_ok_peer_disabled)) if ok is False]
            yield Finding(
                id="probe-data-mismatch",
                severity="fail",
                subjects=[f"GPU{pair.src}", f"GPU{pair.dst}"],
                title=f"Peer copies GPU{pair.src}->GPU{pair.dst} {' and '.join(modes)} did not deliver the bytes sent",
                explanation=(
                    "k3diag probe copied a pattern from one GPU to the other and read the destination back: it differs. "
                    + ("The driver reports that these GPUs can access each other, but the platform does not deliver "
                       "direct peer writes (a known failure of PCIe switches and root complexes without P2P support, "
                       "and of some VMs): NCCL and custom all-reduce kernels will produce wrong results or hang. "
                       if pair.data_ok_peer_enabled is False else "")
                    + "This is a correctness failure, not a speed problem."),
                evidence=[pair.source] if pair.source else [],
                remedy=("Disable P2P for these GPUs until fixed (`NCCL_P2P_DISABLE=1`, or NCCL_P2P_LEVEL=LOC); check ACS "
                        "and IOMMU settings and the platform's P2P support with the vendor."),
                confirm_with="p2pBandwidthLatencyTest; nvbandwidth -t device_to_device_memcpy_write_ce",
                data={"src": pair.src, "dst": pair.dst, "modes": modes},
            )


RULES = (
    Rule("probe-host-bandwidth-low", "warn", "Host<->GPU copies far below the PCIe link class", check_host_bandwidth_low,
         kind="fault"),
    Rule("probe-data-mismatch", "fail", "Copied bytes did not arrive intact", check_data_mismatch, kind="fault"),
)
