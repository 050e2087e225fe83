"""Every parser and rule here takes random and mutated real input without raising."""

from __future__ import annotations

from nccl_fixtures import FIXTURES

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3diag.analyze.rules import benchmarks as bench_rules
from k3diag.analyze.rules import nccl as nccl_rules
from k3diag.model.machine import Machine
from k3diag.join.merge_bench import merge_benchmark
from k3diag.join.merge_nccl import merge_nccl_log, merge_topo_xml
from k3diag.parse import nccl_log, nccl_tests, nccl_topo_xml, nvbandwidth, p2p_bandwidth
from k3diag.parse.text import Section

SAMPLES = {
    name: (FIXTURES / domain / name).read_text(encoding="utf-8")
    for domain, name in (
        ("nccl", "nccl-2.7-busid-direct-shared-memory.log"),
        ("nccl", "nccl-2.2x-h20-2nodes-cumem-ib-gdrdma.log"),
        ("nccl", "rccl-mi250x-socket-comm-suffix.log"),
        ("nccl", "nccl-2.1x-socket-proxy-warn-redacted.log"),
        ("nccl", "nccl-2.8-graph-paths-pattern-socket-4nic.log"),
        ("nccl", "nccl-topo-azure-ncv4-4xa100-nvlink-pairs.xml"),
        ("bench", "nccl-tests-2.6-allgather-error-col-then-broadcast.txt"),
        ("bench", "nccl-tests-2.20-gb10-2nodes-version-header.txt"),
        ("bench", "p2pbw-2x4090-patched-driver.txt"),
        ("bench", "p2pbw-4gpu-latency-vim-line-numbers.txt"),
        ("bench", "nvbandwidth-v0.2-4090-host-device.txt"),
        ("bench", "nvbandwidth-v0.5-json-with-warning-lines.txt"),
    )
}
PARSERS = (nccl_log, nccl_tests, p2p_bandwidth, nvbandwidth, nccl_topo_xml)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw) -> str:
    text = SAMPLES[draw(st.sampled_from(sorted(SAMPLES)))]
    lines = text.split("\n")
    for _ in range(draw(st.integers(0, 8))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["cut", "dup", "drop", "junk", "swap", "digits"]))
        if action == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "drop":
            del lines[i]
        elif action == "junk":
            lines.insert(i, draw(st.text(max_size=60)))
        elif action == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = "".join(c if not c.isdigit() else str(draw(st.integers(0, 9))) for c in lines[i])
    return "\n".join(lines)


def _run_all(text: str) -> None:
    section = Section(text, 1)
    machine = Machine()
    for module in PARSERS:
        module.sniff(text)
        result = module.parse(section, "fuzz.txt")
        assert isinstance(result.warnings, list)
        if module is nccl_log:
            merge_nccl_log(result, machine)
        elif module is nccl_topo_xml:
            merge_topo_xml(result, machine)
        else:
            merge_benchmark(result, machine)
    for rule in nccl_rules.RULES + bench_rules.RULES:
        list(rule.check(machine, []))


@SETTINGS
@given(mutated())
def test_mutated_real_outputs(text: str) -> None:
    _run_all(text)


@SETTINGS
@given(st.text(max_size=400))
def test_random_text(text: str) -> None:
    _run_all(text)


@SETTINGS
@given(st.lists(st.sampled_from([
    "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
    "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9 - Init COMPLETE",
    "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
    "h:1:2 [0] NCCL INFO Channel 00/02 :    0   1",
    "h:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1",
    "h:1:2 [0] misc/socket.cc:49 NCCL WARN boom",
    "h:1:2 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
    "NCCL version 2.21.5+cuda12.4", "", "junk \x00", "g:3:4 [1] NCCL INFO Channel 01 : 1[1] -> 0[0] via SHM/direct/direct",
]), max_size=40))
def test_random_mixes_of_record_kinds(lines: list[str]) -> None:
    result = nccl_log.parse_stream(lines, "mix.log")
    for run in result.runs:
        run.to_json()
