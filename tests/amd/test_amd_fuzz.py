"""Every AMD parser (and merger) takes random and mutated input without raising."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3diag.model.machine import InputRecord, Machine
from k3diag.join.merge_amd import merge_amd_smi, merge_amdsmi, merge_rocm_smi
from k3diag.parse import amd_smi, amdsmi_readings, rocm_bandwidth, rocm_smi
from k3diag.parse.text import Section

ROOT = Path(__file__).resolve().parents[2]
TEXTS = sorted((ROOT / "fixtures" / "amd").glob("*.txt"))
SAMPLES = [path.read_text() for path in TEXTS]
READINGS = (ROOT / "fixtures" / "amdsmi" / "mi300x_8gpu_one_link_down.json").read_text()
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOKENS = st.sampled_from([
    "GPU0", "GPU1", "GPU[0]", "0", "15", "N/A", "XGMI", "PCIE", "XMGI", "SELF", "ENABLED", "DISABLED",
    "0000:0c:00.0", "19:0.0", "D/D", "50000-50000", "0-0", "(Topology) Numa Node:", "ACCESS TABLE:",
    "LINK TYPE TABLE:", "=== Hops between two GPUs ===", "RocmBandwidthTest Version: 2.6.0",
    "Device: 1,  AMD Radeon Graphics,  GPU-1,  19:0.0", "SRC\\DST    CPU 00    GPU 00", "  GPU 00  ->  1.0  2.0",
    '"gpu": 0', '"links": [', '"link_type": "XGMI"', "{", "}", "[", "]", ",", "\t", "  ", "\n",
])


def _mutate(text: str, data) -> str:
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(0, 6))):
        if not lines:
            break
        index = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "dup", "cut", "token", "swap"]))
        if action == "drop":
            del lines[index]
        elif action == "dup":
            lines.insert(index, lines[index])
        elif action == "cut":
            lines[index] = lines[index][: data.draw(st.integers(0, max(len(lines[index]), 0)))]
        elif action == "token":
            lines[index] = lines[index] + " " + data.draw(TOKENS)
        else:
            other = data.draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
    return "\n".join(lines)


def _merge_all(result, merge) -> None:
    machine = Machine()
    merge(result, machine, InputRecord(path="fuzz", format="fuzz"))


@FUZZ
@given(st.data())
def test_text_parsers_survive_mutated_real_outputs(data) -> None:
    text = _mutate(data.draw(st.sampled_from(SAMPLES)), data)
    for module in (rocm_smi, amd_smi, rocm_bandwidth):
        assert 0.0 <= module.sniff(text) <= 1.0
    _merge_all(rocm_smi.parse(Section(text, 1), "x"), merge_rocm_smi)
    _merge_all(amd_smi.parse(Section(text, 3), "x"), merge_amd_smi)
    result = rocm_bandwidth.parse(Section(text, 1), "x")
    for bench in result.benchmarks:
        json.dumps(bench.to_json())


@FUZZ
@given(st.lists(TOKENS, max_size=60), st.text(max_size=200))
def test_text_parsers_survive_token_soup(tokens, noise) -> None:
    text = " ".join(tokens) + noise
    for module in (rocm_smi, amd_smi, rocm_bandwidth, amdsmi_readings):
        module.sniff(text)
        module.parse(Section(text, 1), "soup")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.sampled_from(["XGMI", "PCIE", "N/A", "0000:0c:00.0", "1-2"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["gpu", "bdf", "links", "link_type", "weight", "num_hops", "hops", "link_status",
                         "bandwidth", "gpu_0", "gpu_1", "link_accessibility", "processors", "pairs", "src", "dst",
                         "index", "bus_id", "numa_node", "pcie", "errors", "p2p_accessible", "gpu_data"]),
        children, max_size=6),
    max_leaves=25,
)


@FUZZ
@given(json_values)
def test_json_parsers_survive_arbitrary_json(value) -> None:
    text = json.dumps(value, indent=4)
    _merge_all(amd_smi.parse(Section(text, 1), "x.json"), merge_amd_smi)
    _merge_all(amdsmi_readings.parse(Section(text, 1), "r.json"), merge_amdsmi)


@FUZZ
@given(st.data())
def test_readings_parser_survives_mutated_recording(data) -> None:
    recorded = json.loads(READINGS)
    for _ in range(data.draw(st.integers(1, 5))):
        where = data.draw(st.sampled_from(["processors", "pairs"]))
        if not recorded[where]:
            continue
        item = recorded[where][data.draw(st.integers(0, len(recorded[where]) - 1))]
        key = data.draw(st.sampled_from(sorted(item)))
        item[key] = data.draw(st.none() | st.integers(-3, 99) | st.text(max_size=5) | st.booleans())
    _merge_all(amdsmi_readings.parse(Section(json.dumps(recorded), 1), "r.json"), merge_amdsmi)
    cut = data.draw(st.integers(0, len(READINGS)))
    amdsmi_readings.parse(Section(READINGS[:cut], 1), "cut.json")
