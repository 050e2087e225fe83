"""Pastes that lost their shape: a `topo -m` header without its tabs, a `topo -p2p` quoted in an e-mail reply."""

from __future__ import annotations

from k3diag.analyze.gdr import gdr_report
from k3diag.parse.nvidia_topo_matrix import unquote_reply
from tests.fabric.conftest import machine_from


def test_glued_header_is_read_from_the_intact_rows() -> None:
    machine = machine_from("fabric/topo-m-dgx1-header-glued-soc-sheffield.txt")
    [record] = machine.inputs
    assert record.format == "nvidia-smi-topo-matrix"
    assert any("separators were lost" in w and "mlx5_0 mlx5_2 mlx5_1 mlx5_3" in w for w in record.warnings)
    assert machine.link("GPU0", "GPU1").path == "NV1"
    assert machine.link("GPU0", "GPU5").path == "SOC"
    assert machine.link("GPU2", "mlx5_1").path == "PIX"
    assert machine.gpus[7].cpu_affinity == "1-1"
    # The NICs come out named, and each GPU gets its PIX NIC.
    report = gdr_report(machine)
    assert {p.gpu: p.nic for p in report.pairs if p.best} == {
        0: "mlx5_0", 1: "mlx5_0", 2: "mlx5_1", 3: "mlx5_1", 4: "mlx5_2", 5: "mlx5_2", 6: "mlx5_3", 7: "mlx5_3"}


def test_p2p_quoted_in_an_email_reply() -> None:
    machine = machine_from("fabric/topo-p2p-8gpu-ok-email-reply-quoted-distserve35.txt")
    [record] = machine.inputs
    assert record.format == "nvidia-smi-topo-p2p"
    assert any("quoted in a reply" in w for w in record.warnings)
    assert len(machine.p2p) == 56 and {p.status for p in machine.p2p} == {"OK"}
    first = next(p for p in machine.p2p if (p.src, p.dst) == ("GPU0", "GPU1"))
    assert first.source.text == "> GPU0 X OK OK OK OK OK OK OK" and first.source.line == 10


def test_a_lone_quote_prompt_is_not_a_reply() -> None:
    lines = ["> nvidia-smi topo --matrix", "\tGPU0\tGPU1", "GPU0\t X \tNV8", "GPU1\tNV8\t X "]
    assert unquote_reply(lines) == (lines, False)


def test_a_quote_mark_glued_to_a_tab_keeps_the_tab() -> None:
    # Some mailers quote with a bare `>`: the header line of `topo -m` starts with a tab, which is a
    # column separator of the output, not part of the mark.
    lines = ["someone wrote:", ">\tGPU0\tGPU1\tCPU Affinity", ">GPU0\t X \tNV8\t0-63", ">GPU1\tNV8\t X \t0-63",
             "> > \tGPU0\tGPU1"]
    unquoted, quoted = unquote_reply(lines)
    assert quoted
    assert unquoted == ["someone wrote:", "\tGPU0\tGPU1\tCPU Affinity", "GPU0\t X \tNV8\t0-63", "GPU1\tNV8\t X \t0-63",
                        "\tGPU0\tGPU1"]
