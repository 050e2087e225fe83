"""Several NVIDIA outputs in one file: cut apart and each detected, with or without prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.parse.detect import detect, split_sections
from k3diag.parse.text import normalize

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def formats(text: str) -> list[tuple[str | None, str | None]]:
    out = []
    for section in split_sections(normalize(text)):
        spec = detect(section.text, section.command)
        if spec is not None:
            out.append((spec.name, section.command))
    return out


def read(name: str) -> str:
    return (NVIDIA / name).read_bytes().decode()


@pytest.mark.parametrize("with_prompts", [True, False])
@pytest.mark.parametrize(
    ("matrix", "p2p"),
    [
        ("topo-m-8x4090-dual-socket-sys-tabs.txt", "topo-p2p-2x5090-gns-tabs.txt"),
        ("topo-m-a100-nv12-narrow.txt", "topo-p2p-r-h100-8x-ok.txt"),
        ("topo-m-k80-soc-legend-mlx4.txt", "topo-p2p-2x5090-gns-spaces.txt"),
    ],
)
def test_topo_m_then_topo_p2p_in_one_file(matrix: str, p2p: str, with_prompts: bool) -> None:
    def body(name: str) -> str:
        # Drop a fixture's own prompt line so each case controls its prompts.
        lines = read(name).split("\n")
        return "\n".join(line for line in lines if not line.startswith("$ "))

    if with_prompts:
        text = f"user@gpu01:~$ nvidia-smi topo -m\n{body(matrix)}\nuser@gpu01:~$ nvidia-smi topo -p2p r\n{body(p2p)}"
    else:
        text = f"{body(matrix)}\n{body(p2p)}"
    found = formats(text)
    assert [name for name, _ in found] == ["nvidia-smi-topo-matrix", "nvidia-smi-topo-p2p"]
    if with_prompts:
        assert found[1][1] == "nvidia-smi topo -p2p r"


def test_real_paste_with_prompts_and_an_error_line() -> None:
    found = formats(read("topo-m-and-p2p-5x5090-prompts.txt"))
    assert found == [
        ("nvidia-smi-topo-matrix", "nvidia-smi topo -m"),
        ("nvidia-smi-topo-p2p", "nvidia-smi topo -p2p p"),
    ]


def test_real_paste_without_prompts() -> None:
    assert [name for name, _ in formats(read("topo-m-and-p2p-indented-wrapped-legend.txt"))] == [
        "nvidia-smi-topo-matrix",
        "nvidia-smi-topo-p2p",
    ]


def test_all_four_nvidia_formats_pasted_together_build_one_machine() -> None:
    text = "\n".join(
        [
            "$ nvidia-smi topo -m",
            read("topo-m-5gpu-sys-node-phb.txt"),
            "$ nvidia-smi topo -p2p w",
            " \tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\t",
            " GPU0\tX\tCNS\tCNS\tCNS\tCNS\t",
            " GPU1\tCNS\tX\tOK\tOK\tOK\t",
            " GPU2\tCNS\tOK\tX\tOK\tOK\t",
            " GPU3\tCNS\tOK\tOK\tX\tOK\t",
            " GPU4\tCNS\tOK\tOK\tOK\tX\t",
            "",
            read("csv-5060ti-width-x8-of-x16.txt"),
            read("smi-q-v100-410-old-layout.txt"),
        ]
    )
    machine = build_machine([Evidence(name="paste.txt", data=text.encode())])
    assert [record.format for record in machine.inputs] == [
        "nvidia-smi-topo-matrix",
        "nvidia-smi-topo-p2p",
        "nvidia-smi-query-gpu-csv",
        "nvidia-smi-query",
    ]
    assert machine.p2p_status("GPU0", "GPU1", "write")[0].status == "CNS"
    assert machine.link("GPU0", "GPU3").path == "SYS"
    assert machine.gpus[1].pcie.width_current == 8
