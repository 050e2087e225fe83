"""`nvidia-smi --query-gpu=... --format=csv` parsing: units, elided rows, noheader."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.parse.detect import detect, split_sections
from k3diag.parse import nvidia_query_csv as csv
from k3diag.parse.text import Section, normalize

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def parse_file(name: str) -> csv.QueryCsvResult:
    text = normalize((NVIDIA / name).read_text())
    [section] = [s for s in split_sections(text) if (spec := detect(s.text, s.command)) and spec.name == "nvidia-smi-query-gpu-csv"]
    return csv.parse(section, name)


def test_width_x8_of_x16() -> None:
    result = parse_file("csv-5060ti-width-x8-of-x16.txt")
    assert result.header_from == "header"
    assert [(g.index, g.gen_current, g.gen_max, g.width_current, g.width_max) for g in result.gpus] == [
        (0, 3, 3, 8, 8),
        (1, 3, 3, 8, 16),
    ]
    assert result.gpus[1].name == "NVIDIA GeForce RTX 5060 Ti"
    assert result.gpus[1].source.line == 4


def test_idle_l40s_at_gen1() -> None:
    result = parse_file("csv-l40s-8x-idle-gen1.txt")
    assert len(result.gpus) == 8
    assert {(g.gen_current, g.gen_max, g.width_current, g.width_max) for g in result.gpus} == {(1, 4, 16, 16)}
    assert [g.index for g in result.gpus] == list(range(8))


def test_elided_rows_do_not_invent_indices() -> None:
    result = parse_file("csv-h100-name-busid-vbios-elided.txt")
    assert result.fields == ["name", "pci.bus_id", "vbios_version"]
    assert [(g.index, g.bus_id) for g in result.gpus] == [(0, "00000000:04:00.0"), (None, "00000000:8B:00.0")]
    assert any("[...]" in w for w in result.warnings)


def test_units_in_header_and_values() -> None:
    text = (
        "index, name, pci.bus_id, pstate, memory.total [MiB], pcie.link.gen.current, pcie.link.width.max\n"
        "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, P0, 81559 MiB, 5, 16\n"
        "1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, P8, [N/A], [Not Supported], 16\n"
    )
    result = csv.parse(Section(text, 1), "units")
    assert result.units == {"memory.total": "MiB"}
    assert result.gpus[0].memory_total_mib == 81559 and result.gpus[0].performance_state == "P0"
    assert result.gpus[1].memory_total_mib is None and result.gpus[1].gen_current is None
    assert result.gpus[1].performance_state == "P8"


def test_noheader_needs_the_command() -> None:
    rows = "0, NVIDIA GeForce RTX 5060 Ti, 3, 3, 8, 8\n1, NVIDIA GeForce RTX 5060 Ti, 3, 3, 8, 16\n"
    command = (
        "nvidia-smi --query-gpu=index,name,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
        "pcie.link.width.max --format=csv,noheader"
    )
    with_command = csv.parse(Section(rows, 1, command), "x")
    assert with_command.header_from == "command"
    assert [(g.index, g.width_current, g.width_max) for g in with_command.gpus] == [(0, 8, 8), (1, 8, 16)]
    without = csv.parse(Section(rows, 1, None), "x")
    assert without.gpus == [] and "cannot be read" in without.warnings[0]


def test_sniff() -> None:
    assert csv.sniff((NVIDIA / "csv-l40s-8x-idle-gen1.txt").read_text()) >= 0.5
    assert csv.sniff((NVIDIA / "topo-m-a100-nv12-narrow.txt").read_text()) == 0.0
    assert csv.sniff("0, NVIDIA A100, 00000000:18:00.0\n1, NVIDIA A100, 00000000:2A:00.0\n") < 0.5


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["index", "name", ", ", ",", "\n", "[MiB]", "0", "P0", "[N/A]", "pcie.link.width.max", "x"]), max_size=40),
       st.sampled_from([None, "nvidia-smi --query-gpu=index,name --format=csv,noheader"]))
def test_random_input_never_raises(tokens: list[str], command: str | None) -> None:
    text = "".join(tokens)
    csv.sniff(text)
    csv.parse(Section(text, 1, command), "fuzz")
