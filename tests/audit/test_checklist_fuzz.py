"""Random, half-filled machines: no question may crash (a crash shows up as 'k3diag failed'), every
renderer copes, and the spec parser only ever raises SpecError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3diag.audit.checklist import audit_machine
from k3diag.audit.html import render_html
from k3diag.audit.markdown import render_markdown
from k3diag.audit.spec import SpecError, check_spec, parse_spec
from k3diag.audit.terminal import render_plain
from k3diag.model.machine import Machine
from k3diag.model.nccl import NcclConnection, NcclRun
from k3diag.model.pci import Acs, PciDevice, PciLink
from k3diag.model.source import SourceRef
from k3diag.model.topology import Link, P2PStatus, PcieLinkState

PATHS = st.sampled_from([None, "NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS", "PSB", "XGMI", "PCIE", "weird"])
MAYBE_INT = st.one_of(st.none(), st.integers(min_value=0, max_value=32))
JUNK = st.one_of(st.none(), st.integers(-5, 500), st.floats(allow_nan=True), st.text(max_size=5), st.booleans())


class JunkBenchmark:
    def __init__(self, tool: str, shape: dict) -> None:
        self.tool = tool
        self.shape = shape

    def to_json(self) -> dict:
        return self.shape


@st.composite
def machines(draw) -> Machine:
    machine = Machine()
    count = draw(st.integers(0, 6))
    for i in range(count):
        gpu = machine.gpu(i)
        gpu.name = draw(st.one_of(st.none(), st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA L40S", "<b>x</b>"])))
        gpu.numa_node = draw(st.one_of(st.none(), st.integers(0, 3)))
        gpu.bus_id = draw(st.one_of(st.none(), st.just(f"0000:{i + 16:02x}:00.0")))
        gpu.performance_state = draw(st.sampled_from([None, "P0", "P8"]))
        gpu.pcie = PcieLinkState(gen_current=draw(MAYBE_INT), gen_max=draw(MAYBE_INT), width_current=draw(MAYBE_INT),
                                 width_max=draw(MAYBE_INT), gen_host_max=draw(MAYBE_INT),
                                 gen_device_max=draw(MAYBE_INT))
    names = [f"GPU{i}" for i in range(count)] + ["NIC0", "mlx5_1"]
    for _ in range(draw(st.integers(0, 12))):
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        machine.add_link(Link(a, b, draw(PATHS), source=SourceRef("t", 1, "x")))
    for _ in range(draw(st.integers(0, 8))):
        machine.p2p.append(P2PStatus(draw(st.sampled_from(names)), draw(st.sampled_from(names)),
                                     draw(st.sampled_from(["read", "write", "nvlink", "atomics", "pcie", "unknown"])),
                                     draw(st.sampled_from([None, "OK", "X", "CNS", "GNS", "TNS", "NS", "U", "??"]))))
    if draw(st.booleans()):
        machine.nic("NIC0").device = draw(st.sampled_from([None, "mlx5_0", "eno1"]))
    for k in range(draw(st.integers(0, 3))):
        ctl = {"ReqRedir": draw(st.booleans()), "CmpltRedir": draw(st.booleans())} if draw(st.booleans()) else {}
        parent = draw(st.one_of(st.none(), st.just("0000:00:01.0"), st.just(f"0000:{k:02x}:00.0")))
        machine.pci.append(PciDevice(bdf=draw(st.sampled_from([None, "0000:00:01.0", "0000:10:00.0", f"0000:{k:02x}:00.0"])),
                                     description=draw(st.sampled_from([None, "PLX Technology PEX 8747", "Mellanox ConnectX-7"])),
                                     parent=parent, is_bridge=draw(st.booleans()), acs=Acs(ctl=ctl),
                                     link=PciLink(cap_width=draw(MAYBE_INT), sta_width=draw(MAYBE_INT))))
    machine.host.iommu_mode = draw(st.sampled_from([None, "translated", "passthrough", "off"]))
    for _ in range(draw(st.integers(0, 2))):
        run = NcclRun(nodes=draw(st.one_of(st.none(), st.integers(1, 3))),
                      env=draw(st.dictionaries(st.sampled_from(["NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"]),
                                               st.sampled_from(["1", "LOC", "SYS", ""]))))
        for _ in range(draw(st.integers(0, 4))):
            run.connections.append(NcclConnection(draw(MAYBE_INT), draw(st.integers(0, 9)), draw(st.integers(0, 9)),
                                                  draw(st.sampled_from(["P2P/IPC", "SHM/direct/direct",
                                                                        "NET/IB/0/GDRDMA", "NET/Socket/0"])),
                                                  draw(st.sampled_from(["P2P", "SHM", "NET", "?"]))))
        machine.nccl.append(run)
    for _ in range(draw(st.integers(0, 3))):
        tool = draw(st.sampled_from(["nccl-tests", "p2pBandwidthLatencyTest", "other"]))
        shape = draw(st.dictionaries(st.sampled_from(["op", "nranks", "max_busbw", "avg_busbw", "rows", "matrices",
                                                      "can_access", "command", "out_of_bounds"]), JUNK, max_size=6))
        shape["tool"] = tool
        if draw(st.booleans()):
            shape["rows"] = [{"out_of_place": {"busbw": draw(JUNK), "wrong": draw(JUNK)}}, "junk"]
        if draw(st.booleans()):
            shape["matrices"] = {"Unidirectional P2P=Enabled Bandwidth": [[draw(JUNK), 1.0], "x"],
                                 "Unidirectional P2P=Disabled Bandwidth": [[2.0, draw(JUNK)]]}
            shape["can_access"] = [[True, draw(JUNK)], [False, True]]
        machine.benchmarks.append(JunkBenchmark(tool, shape))
    return machine


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines())
def test_no_question_crashes_on_partial_facts(machine: Machine) -> None:
    report = audit_machine(machine, [], [], "fuzz.tar.gz")
    for answer in report.answers:
        assert "k3diag failed" not in answer.summary, (answer.id, answer.summary)
        assert answer.verdict in ("PASS", "WARN", "FAIL", "UNKNOWN")
        assert answer.verdict != "UNKNOWN" or answer.request or answer.id in ("parallelism",) or answer.summary
    check_spec(parse_spec('[gpu]\ncount = 2\nmodel = "H100"\npcie_gen = 4\npcie_width = 16\nnvlinks = 4\n'
                          'memory_gib = 40\n[nic]\ncount = 1\ngpu_nic_path = "PXB"'), machine)
    assert "<b>x</b>" not in render_html(report)
    render_markdown(report)
    render_plain(report)


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=300))
def test_spec_parser_only_raises_spec_error(text: str) -> None:
    try:
        parse_spec(text)
    except SpecError:
        pass
