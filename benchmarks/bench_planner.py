"""How long the TP grouping planner takes on synthetic topologies of 8, 16, 32 and 72 GPUs.

Run: python benchmarks/bench_planner.py
Prints one line per (topology, GPU count): the whole `recommend_tp_groups` call over every default TP
size, the part of it spent rating GPU pairs, and per size the partition's time, method and whether
the answer is proven optimal. No timing assertions: the figures are for reading (issue 5 asks for
72 GPUs under a second).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

from k3diag.analyze.partition import solve_partition
from k3diag.analyze.planner import default_sizes, known_gpus, machine_quality, recommend_tp_groups
from k3diag.model.machine import Machine
from k3diag.model.topology import Link


@dataclass
class MatrixBench:
    """Stands in for a bandwidth benchmark record: the planner reads only `tool` and `to_json()`."""

    tool: str
    matrices: dict

    def to_json(self) -> dict:
        return {"tool": self.tool, "matrices": self.matrices}


def dual_socket_pcie(n: int) -> Machine:
    """Two sockets; pairs under one PCIe switch (PIX), switch pairs under one upper switch (PXB),
    the rest of the socket through the host bridges (NODE), the other socket across UPI (SYS).
    One NIC per four GPUs on their upper switch."""
    machine = Machine()
    half = n // 2
    for i in range(n):
        gpu = machine.gpu(i)
        gpu.vendor, gpu.name, gpu.numa_node = "NVIDIA", "NVIDIA L40S", i // half if half else 0
    for i in range(n):
        for j in range(i + 1, n):
            if i // half != j // half:
                path = "SYS"
            elif i // 2 == j // 2:
                path = "PIX"
            elif i // 4 == j // 4:
                path = "PXB"
            else:
                path = "NODE"
            machine.add_link(Link(f"GPU{i}", f"GPU{j}", path))
    for k in range((n + 3) // 4):
        nic = machine.nic(f"NIC{k}")
        nic.device = f"mlx5_{k}"
        for i in range(n):
            path = "PXB" if i // 4 == k else ("NODE" if i // half == (4 * k) // half else "SYS")
            machine.add_link(Link(f"GPU{i}", f"NIC{k}", path))
    return machine


def nvswitch(n: int, per_socket: int | None = None) -> Machine:
    """Every pair NV18 through NVSwitch (HGX H100/H200); NUMA by halves."""
    machine = Machine()
    per_socket = per_socket or max(1, n // 2)
    for i in range(n):
        gpu = machine.gpu(i)
        gpu.vendor, gpu.name, gpu.numa_node = "NVIDIA", "NVIDIA H100 80GB HBM3", i // per_socket
    for i in range(n):
        for j in range(i + 1, n):
            machine.add_link(Link(f"GPU{i}", f"GPU{j}", "NV18"))
    return machine


def nvl72_like(n: int) -> Machine:
    """An NVL72-like rack: one NVLink domain (NV18 everywhere), trays of 4 GPUs, 2 GPUs per Grace NUMA node."""
    machine = nvswitch(n, per_socket=2)
    for gpu in machine.gpus.values():
        gpu.name = "NVIDIA GB200"
    return machine


def measured_noisy(n: int) -> Machine:
    """NVSwitch box with a measured matrix whose pair figures vary by a few percent (no tree structure)."""
    machine = nvswitch(n)
    rng = random.Random(n)
    matrix = [[None if i == j else round(rng.uniform(300, 420), 2) for j in range(n)] for i in range(n)]
    name = "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"
    machine.benchmarks.append(MatrixBench("p2pBandwidthLatencyTest", {name: matrix}))  # type: ignore[arg-type]
    return machine


TOPOLOGIES: dict[str, Callable[[int], Machine]] = {
    "dual-socket PCIe": dual_socket_pcie,
    "NVSwitch all-NV18": nvswitch,
    "NVL72-like rack": nvl72_like,
    "measured, noisy": measured_noisy,
}


def nvl72_one_link_down(n: int) -> Machine:
    """NVL72-like rack where one GPU pair reads NV17: no longer a tree, so local search decides."""
    machine = nvl72_like(n)
    machine.links = [
        Link(link.a, link.b, "NV17") if (link.a, link.b) == ("GPU0", "GPU1") else link for link in machine.links
    ]
    return machine


TOPOLOGIES["NVL72, one pair NV17"] = nvl72_one_link_down


def random_qualities(n: int) -> list[list[float]]:
    rng = random.Random(n)
    q = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            q[i][j] = q[j][i] = rng.random()
    return q


def main() -> None:
    print("recommend_tp_groups: pair qualities, then the partition at every default TP size")
    print(f"  {'topology':<22} {'GPUs':>4} {'total':>7} {'pairs':>7}   partition per size (* = proven optimal)")
    for label, build in TOPOLOGIES.items():
        for n in (8, 16, 32, 72):
            machine = build(n)
            assert len(known_gpus(machine)) == n
            started = time.perf_counter()
            rec = recommend_tp_groups(machine)
            total = time.perf_counter() - started
            assert rec is not None
            started = time.perf_counter()
            _, _, q = machine_quality(machine)
            pairs = time.perf_counter() - started
            cells = []
            for size in default_sizes(n):
                started = time.perf_counter()
                result = solve_partition(q, size)
                cells.append(f"TP{size} {time.perf_counter() - started:.3f}s {result.method}{'*' if result.exact else ''}")
            print(f"  {label:<22} {n:>4} {total:>6.3f}s {pairs:>6.3f}s   " + "; ".join(cells))
    print("best_partition on random pair qualities (no structure; exhaustive up to 16 GPUs):")
    for n in (8, 16, 32, 72):
        q = random_qualities(n)
        cells = []
        for size in (2, 4, 8):
            started = time.perf_counter()
            result = solve_partition(q, size)
            cells.append(f"TP{size} {time.perf_counter() - started:.3f}s {result.method}{'*' if result.exact else ''}")
        print(f"  {'random':<22} {n:>4}            " + "; ".join(cells))


if __name__ == "__main__":
    main()
