"""Machines built directly in the model (no parsers), so each question's logic is tested on its own.

Lines quoted as evidence are taken from real outputs in fixtures/ where the shape matters."""

from __future__ import annotations

from dataclasses import dataclass, field

import types

import pytest

from k3diag.model.host import CpuPackage, NumaNode
from k3diag.model.machine import InputRecord, Machine
from k3diag.model.nccl import NcclConnection, NcclRun
from k3diag.model.pci import Acs, PciDevice, PciLink
from k3diag.model.source import SourceRef
from k3diag.model.topology import Link, P2PStatus, PcieLinkState


@dataclass
class FakeBenchmark:
    """A benchmark record as the contract shapes it (the real records live with the NCCL work)."""

    tool: str
    shape: dict
    source: SourceRef | None = None
    sources: list[SourceRef] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.shape, tool=self.tool)


def nccl_tests(nranks: int, busbw: float, wrong: int = 0, name: str = "all_reduce_perf.txt") -> FakeBenchmark:
    rows = [
        {"size_bytes": size, "count": size // 4, "type": "float",
         "out_of_place": {"time_us": 1.0, "algbw": busbw / 2, "busbw": busbw * frac, "wrong": wrong if i == 0 else 0},
         "in_place": {"time_us": 1.0, "algbw": busbw / 2, "busbw": busbw * frac, "wrong": 0}}
        for i, (size, frac) in enumerate(((8388608, 0.5), (1073741824, 0.9), (8589934592, 1.0)))
    ]
    ref = SourceRef(name, 40, f"# Avg bus bandwidth    : {busbw * 0.8:.3f}")
    return FakeBenchmark("nccl-tests", {"op": "all_reduce", "nranks": nranks, "rows": rows, "max_busbw": busbw,
                                        "avg_busbw": busbw * 0.8, "out_of_bounds": 0}, source=ref)


def p2p_test(n: int, enabled: float, disabled: float, cannot: tuple[tuple[int, int], ...] = ()) -> FakeBenchmark:
    access = [[i == j or (i, j) not in cannot for j in range(n)] for i in range(n)]
    on = [[1000.0 if i == j else enabled for j in range(n)] for i in range(n)]
    off = [[1000.0 if i == j else disabled for j in range(n)] for i in range(n)]
    return FakeBenchmark("p2pBandwidthLatencyTest", {
        "gpus": n, "can_access": access,
        "matrices": {"Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)": off,
                     "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)": on}},
        source=SourceRef("p2p.txt", 12, "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"))


def _ref(name: str, line: int, text: str) -> SourceRef:
    return SourceRef(name, line, text)


def build_machine(
    count: int = 8,
    name: str = "NVIDIA H100 80GB HBM3",
    path_of=None,  # (i, j) -> path code
    width: dict[int, int] | None = None,
    gen: int = 5,
    numa_of=lambda i: 0 if i < 4 else 1,
) -> Machine:
    machine = Machine()
    machine.inputs.append(InputRecord(path="topo.txt", format="nvidia-smi-topo-matrix"))
    machine.host.numa_nodes = [NumaNode(id=0, package=0), NumaNode(id=1, package=1)]
    machine.host.packages = [CpuPackage(id=0, numa_nodes=[0]), CpuPackage(id=1, numa_nodes=[1])]
    for i in range(count):
        gpu = machine.gpu(i)
        gpu.name = name
        gpu.bus_id = f"0000:{0x18 + i * 0x10:02x}:00.0"
        gpu.numa_node = numa_of(i)
        gpu.memory_total_mib = 81559
        gpu.performance_state = "P0"
        current = (width or {}).get(i, 16)
        gpu.pcie = PcieLinkState(gen_current=gen, gen_max=gen, width_current=current, width_max=16,
                                 source=_ref("smi-q.txt", 60 + i * 150, f"Current                   : {current}x"))
        gpu.sources.append(_ref("smi-q.txt", 9 + i * 150, f"Product Name : {name}"))
    for i in range(count):
        for j in range(i + 1, count):
            path = path_of(i, j) if path_of else "NV18"
            machine.add_link(Link(f"GPU{i}", f"GPU{j}", path, source=_ref("topo.txt", 2 + i, f"GPU{i}  ... {path}")))
    return machine


def add_p2p(machine: Machine, status_of) -> None:
    count = len(machine.gpus)
    for i in range(count):
        for j in range(count):
            if i != j:
                status = status_of(i, j)
                machine.p2p.append(P2PStatus(f"GPU{i}", f"GPU{j}", "read", status,
                                             source=_ref("p2p-r.txt", 2 + i, f" GPU{i} ... {status}")))


def add_nccl(machine: Machine, via: str, transport: str, pairs: list[tuple[int, int]],
             env: dict[str, str] | None = None) -> NcclRun:
    run = NcclRun(library="NCCL", version="2.21.5", nranks=len(machine.gpus), nodes=1, env=dict(env or {}),
                  input="nccl.log")
    for n, (a, b) in enumerate(pairs):
        run.connections.append(NcclConnection(0, a, b, via, transport, source=_ref(
            "nccl.log", 100 + n, f"host:1:1 [{a}] NCCL INFO Channel 00/0 : {a}[{a}] -> {b}[{b}] via {via}")))
    machine.nccl.append(run)
    return run


def add_nics(machine: Machine, path_of) -> None:
    for k in range(2):
        nic = machine.nic(f"NIC{k}")
        nic.device = f"mlx5_{k}"
        nic.numa_node = k
        nic.sources.append(_ref("topo.txt", 20 + k, f"NIC{k}: mlx5_{k}"))
        for i in range(len(machine.gpus)):
            machine.add_link(Link(f"GPU{i}", f"NIC{k}", path_of(i, k),
                                  source=_ref("topo.txt", 2 + i, f"GPU{i} ... {path_of(i, k)}")))


def add_bridge(machine: Machine, bdf: str, redirect: bool, above: list[int], description: str) -> PciDevice:
    ctl = {"SrcValid": True, "TransBlk": False, "ReqRedir": redirect, "CmpltRedir": redirect, "UpstreamFwd": True,
           "EgressCtrl": False, "DirectTrans": False}
    text = "ACSCtl: " + " ".join(f"{k}{'+' if v else '-'}" for k, v in ctl.items())
    bridge = PciDevice(bdf=bdf, description=description, is_bridge=True, acs=Acs(ctl=ctl, source=_ref("lspci.txt", 30, text)),
                       link=PciLink(cap_width=16, sta_width=16, cap_speed_gts=32.0, sta_speed_gts=32.0),
                       source=_ref("lspci.txt", 1, f"{bdf} PCI bridge: {description}"))
    machine.pci.append(bridge)
    for index in above:
        gpu = machine.gpus[index]
        machine.pci.append(PciDevice(bdf=gpu.bus_id, description=gpu.name, parent=bdf,
                                     link=PciLink(cap_width=16, sta_width=gpu.pcie.width_current),
                                     source=_ref("lspci.txt", 40 + index, f"{gpu.bus_id} 3D controller")))
    return bridge


def make_good_machine() -> Machine:
    machine = build_machine()
    add_p2p(machine, lambda i, j: "OK")
    add_nics(machine, lambda i, k: "PIX" if (i < 4) == (k == 0) and i % 4 == 0 else ("NODE" if (i < 4) == (k == 0) else "SYS"))
    for bdf, gpus in (("0000:15:01.0", [0, 1, 2, 3]), ("0000:95:01.0", [4, 5, 6, 7])):
        add_bridge(machine, bdf, False, gpus, "Broadcom / LSI PEX890xx PCIe Gen 5 Switch")
    machine.host.iommu_mode = "passthrough"
    machine.benchmarks.extend([nccl_tests(1, 0.0), nccl_tests(2, 360.0), nccl_tests(4, 355.0), nccl_tests(8, 370.0),
                               p2p_test(8, 380.0, 36.0)])
    add_nccl(machine, "P2P/CUMEM/read", "P2P", [(i, (i + 1) % 8) for i in range(8)])
    run = add_nccl(machine, "NET/IB/0/GDRDMA", "NET", [(0, 8), (8, 0)])
    run.nodes = 2
    return machine


def make_bad_machine() -> Machine:
    def path(i: int, j: int) -> str:
        if (i < 4) != (j < 4):
            return "SYS"
        return "PIX" if i // 2 == j // 2 else "NODE"

    machine = build_machine(name="NVIDIA GeForce RTX 4090", path_of=path, width={2: 8}, gen=4)
    add_p2p(machine, lambda i, j: "CNS" if (i < 4) != (j < 4) else "OK")
    add_bridge(machine, "0000:17:02.0", True, [2, 3], "PLX Technology, Inc. PEX 8747 48-Lane PCI Express Gen 3 Switch")
    machine.host.iommu_mode = "translated"
    machine.benchmarks.extend([nccl_tests(2, 20.0), nccl_tests(4, 9.0), nccl_tests(8, 5.5), p2p_test(8, 9.9, 22.0)])
    add_nccl(machine, "SHM/direct/direct", "SHM", [(3, 7), (0, 4)])
    add_nccl(machine, "NET/Socket/0", "NET", [(0, 8)])
    machine.nic("NIC0").device = "eno1"
    return machine


@pytest.fixture
def good_machine() -> Machine:
    return make_good_machine()


@pytest.fixture
def bad_machine() -> Machine:
    return make_bad_machine()


@pytest.fixture
def kit() -> types.SimpleNamespace:
    """The builders, for tests that assemble their own machine."""
    return types.SimpleNamespace(
        build_machine=build_machine, add_p2p=add_p2p, add_nccl=add_nccl, add_nics=add_nics, add_bridge=add_bridge,
        nccl_tests=nccl_tests, p2p_test=p2p_test, good=make_good_machine, bad=make_bad_machine,
    )
