"""The detailed terminal report counts in words: '1 NUMA node', '2 NUMA nodes', never 'node(s)'."""

from __future__ import annotations

import io

from k3diag.analyze.finding import Finding
from k3diag.model.bench_records import NcclTestsBenchmark
from k3diag.model.host import CpuPackage, HostInfo, NumaNode
from k3diag.model.machine import InputRecord, Machine
from k3diag.model.nccl import NcclRun
from k3diag.model.source import SourceRef
from k3diag.render import details
from k3diag.render.plain import Out


def _printed(draw, *args) -> str:
    stream = io.StringIO()
    draw(*args, Out(stream, color=False, width=0))
    return stream.getvalue()


def _machine(count: int) -> Machine:
    machine = Machine(host=HostInfo(packages=[CpuPackage(id=i) for i in range(count)],
                                    numa_nodes=[NumaNode(id=i, cpus=f"{i * 8}-{i * 8 + 7}") for i in range(count)]))
    machine.nccl = [NcclRun(library="NCCL", version="2.21.5", nranks=8 * count, nodes=count)]
    machine.benchmarks = [NcclTestsBenchmark(op="all_reduce", nranks=count)]
    machine.inputs = [InputRecord(path="nccl.log", format="nccl-log", warnings=[f"w{i}" for i in range(5 + count)])]
    return machine


def test_one_of_each_is_singular() -> None:
    machine = _machine(1)
    assert "Host: 1 CPU package; 1 NUMA node (node0: cpus 0-7)" in _printed(details._host, machine)
    assert "NCCL 2.21.5: 8 ranks on 1 node;" in _printed(details.nccl_runs, machine)
    assert "nccl-tests all_reduce on 1 GPU:" in _printed(details.benchmarks, machine)
    assert "! ... 1 more warning in --json" in _printed(details.inputs, machine)


def test_several_are_plural() -> None:
    machine = _machine(2)
    assert "Host: 2 CPU packages; 2 NUMA nodes (node0: cpus 0-7, node1: cpus 8-15)" in _printed(details._host, machine)
    assert "NCCL 2.21.5: 16 ranks on 2 nodes;" in _printed(details.nccl_runs, machine)
    assert "nccl-tests all_reduce on 2 GPUs:" in _printed(details.benchmarks, machine)
    assert "! ... 2 more warnings in --json" in _printed(details.inputs, machine)


def test_evidence_past_the_limit_is_counted_in_words() -> None:
    def finding(lines: int) -> Finding:
        refs = [SourceRef(input="topo.txt", line=i + 1, text=f"GPU{i}") for i in range(lines)]
        return Finding(id="x", severity="warn", subjects=[], title="t", explanation="", evidence=refs)

    one_more = _printed(details.findings_in_full, [finding(details.MAX_EVIDENCE_LINES + 1)])
    assert "> ... 1 more line in --json" in one_more
    two_more = _printed(details.findings_in_full, [finding(details.MAX_EVIDENCE_LINES + 2)])
    assert "> ... 2 more lines in --json" in two_more


def test_communicators_that_look_alike_are_told_apart_by_their_id() -> None:
    # every job's world communicator has the same shape: the id is what tells them apart
    machine = Machine()
    machine.nccl = [NcclRun(library="NCCL", version="2.21.5", nranks=16, nodes=2, comm_id=comm_id)
                    for comm_id in ("0x1a2b", "0x3c4d")]
    printed = _printed(details.nccl_runs, machine)
    assert "NCCL 2.21.5 (commId 0x1a2b): 16 ranks on 2 nodes;" in printed
    assert "NCCL 2.21.5 (commId 0x3c4d): 16 ranks on 2 nodes;" in printed
