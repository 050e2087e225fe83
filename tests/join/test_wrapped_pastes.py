"""An output pasted through a medium that wrapped it (quoted in an e-mail reply, indented as a whole by a
forum or a ticket) is read as the output it is, whatever its format, and the input says what was taken off.
The formats that read their own quoting (topo -m, topo -p2p, lspci, dmesg) keep their lines as pasted."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = [
    "amd/rocm-smi-showtoponuma-mi210-8gpu-nps4.txt",
    "amd/rocm-smi-showtopo-mi300a-4apu-tabs.txt",
    "amd/amd-smi-topology-json-legacy-2gpu-pcie-changelog.txt",
    "fabric/ibstat-roce-mt4129-200g-mt4125-down-mooncake.txt",
    "nvidia/smi-q-d-4x-rtx-pro-6000-580-cuda-not-found-vgpu-excerpt.txt",
    "serving/vllm-bench-serve-text-two-blocks-qps-labels-ascend1605.txt",
]


def _quoted(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.split("\n"))


def _indented(text: str) -> str:
    return "\n".join("    " + line if line.strip() else line for line in text.split("\n"))


def _facts(machine) -> tuple:
    gpus = sorted(machine.gpus.values() if isinstance(machine.gpus, dict) else machine.gpus, key=lambda g: g.index)
    return ([i.format for i in machine.inputs], [(g.index, g.name, g.memory_total_mib) for g in gpus], len(machine.links), len(machine.fabric.ib_ports)
            if hasattr(machine.fabric, "ib_ports") else None, len(machine.extras.get("serving_runs", []) or [])
            if hasattr(machine, "extras") else None)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("wrap, said", [(_quoted, "the `> ` marks of an e-mail reply"),
                                        (_indented, "the indentation every line shared")])
def test_a_wrapped_paste_reads_as_the_output_it_is(name: str, wrap, said: str) -> None:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"{name} is not in this checkout")
    text = path.read_text()
    plain = build_machine([Evidence(name="paste.txt", data=text.encode())])
    wrapped = build_machine([Evidence(name="paste.txt", data=wrap(text).encode())])
    assert _facts(wrapped) == _facts(plain)
    assert plain.inputs[0].format != "unknown"
    warnings = [w for i in wrapped.inputs for w in i.warnings]
    if wrap is _quoted:  # an indented paste some parsers read as it is (the vLLM block): no word needed then
        assert any(f"read without {said}; the evidence quotes them so" in w for w in warnings), warnings


def test_a_topo_matrix_quoted_in_a_reply_keeps_its_lines_as_pasted() -> None:
    text = (FIXTURES / "nvidia" / "topo-m-2gpu-nv2-numa-na.txt").read_text()
    machine = build_machine([Evidence(name="reply.txt", data=_quoted(text).encode())])
    assert machine.inputs[0].format == "nvidia-smi-topo-matrix" and len(machine.gpus) == 2
    assert all(link.source.text.startswith(">") for link in machine.links if link.source is not None)


def _stamped(text: str) -> str:  # `kubectl logs --timestamps`
    return "\n".join(f"2026-12-03T14:0{i % 10}:00.123456789Z {line}" for i, line in enumerate(text.split("\n")))


def _labelled(host: str):
    def wrap(text: str) -> str:  # `pdsh -w gpu042 nvidia-smi topo -m`
        return "\n".join(f"{host}: {line}" for line in text.split("\n"))
    return wrap


def _tagged(text: str) -> str:  # `mpirun --tag-output`, one rank
    return "\n".join(f"[1,0]<stdout>: {line}" for line in text.split("\n"))


@pytest.mark.parametrize("name", ["nvidia/topo-m-2gpu-nv2-numa-na.txt", "amd/rocm-smi-showtoponuma-mi210-8gpu-nps4.txt",
                                  "nvidia/smi-q-d-4x-rtx-pro-6000-580-cuda-not-found-vgpu-excerpt.txt",
                                  # nested fields: the stamp's one separator goes, the indentation stays
                                  "nvidia/smi-q-2x3090-560.txt"])
@pytest.mark.parametrize("wrap, said", [(_stamped, "the time stamp before each line"),
                                        (_labelled("gpu042"), "the `gpu042:` label before each line"),
                                        (_tagged, "the `[1,0]<stdout>:` label before each line")])
def test_a_log_collectors_prefix_is_taken_off(name: str, wrap, said: str) -> None:
    text = (FIXTURES / name).read_text()
    plain = build_machine([Evidence(name="paste.txt", data=text.encode())])
    wrapped = build_machine([Evidence(name="paste.txt", data=wrap(text).encode())])
    assert _facts(wrapped) == _facts(plain) and plain.inputs[0].format != "unknown"
    assert any(f"read without {said}; the evidence quotes them so" in w for i in wrapped.inputs for w in i.warnings)


def test_two_hosts_interleaved_are_not_read_as_one_output() -> None:
    # pdsh over two nodes: half the lines are gpu042's, half gpu043's; unwrapped they would be one machine
    text = (FIXTURES / "nvidia" / "topo-m-2gpu-nv2-numa-na.txt").read_text()
    mixed = "\n".join(f"{'gpu042' if i % 2 else 'gpu043'}: {line}" for i, line in enumerate(text.split("\n")))
    machine = build_machine([Evidence(name="pdsh.txt", data=mixed.encode())])
    assert not machine.gpus and machine.inputs[0].format == "unknown"


def test_a_pdsh_label_names_the_machine_so_two_nodes_stay_apart() -> None:
    from k3diag.join.machines import build_machines

    text = (FIXTURES / "nvidia" / "topo-m-2gpu-nv2-numa-na.txt").read_text()
    machines = build_machines([Evidence(name="a.txt", data=_labelled("gpu042")(text).encode()),
                               Evidence(name="b.txt", data=_labelled("gpu043")(text).encode())])
    assert len(machines.machines) == 2, [m.inputs for m in machines.machines]


@pytest.mark.parametrize("name", ["bench/nccl-tests-8xa100-no-group-all-bus-0x00-nccl583.txt",
                                  "fabric/query-fabric-in-progress-b200-gpu-operator2511.txt",
                                  "pcie/lspci-tv-amd-mi100-rccl-547.txt"])
def test_an_output_its_tool_prints_indented_is_read_as_pasted(name: str) -> None:
    machine = build_machine([Evidence(name="out.txt", data=(FIXTURES / name).read_bytes())])
    assert not any("read without" in w for i in machine.inputs for w in i.warnings)


@pytest.mark.parametrize("name", ["nccl/nccl-2.28.9-dgx-spark-2nodes-initrankconfig-roce.log",
                                  "nccl/nccl-2.29.2-efa-rank-prefix-init-start-cuda-failure.log",
                                  "bench/nccl-tests-rows-under-nccl-info-no-header-na-wrong-aks30.txt",
                                  "bench/nccl-tests-2nodes-a100-header-nccl-info.txt"])
@pytest.mark.parametrize("wrap", [_quoted, _labelled("gpu042"), _stamped])
def test_an_nccl_tests_run_with_nccl_info_lines_keeps_its_table_when_wrapped(name: str, wrap) -> None:
    # NCCL_DEBUG=INFO under nccl-tests: the file looks like an NCCL log, and an NCCL log reads through a
    # reply's `> ` or a pdsh label, so the wrapped file was read as a log alone and its results table lost
    # (0 benchmarks, where the file as printed gives 1)
    text = (FIXTURES / name).read_text()
    plain = build_machine([Evidence(name="run.log", data=text.encode())])
    wrapped = build_machine([Evidence(name="run.log", data=wrap(text).encode())])
    assert plain.benchmarks, name
    assert [i.format for i in wrapped.inputs] == [i.format for i in plain.inputs]
    assert [(b.tool, b.op, b.nranks, len(b.rows), b.avg_busbw) for b in wrapped.benchmarks] == \
        [(b.tool, b.op, b.nranks, len(b.rows), b.avg_busbw) for b in plain.benchmarks]
