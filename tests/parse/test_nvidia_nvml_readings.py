"""The recorded NVML readings document, read back into records."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.parse import nvml_readings
from k3diag.parse.text import Section

NVML = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"


def test_nvswitch_readings() -> None:
    text = (NVML / "h100-sxm-8x-nvswitch-gpu3-link-down.json").read_text()
    assert nvml_readings.sniff(text) == 1.0
    result = nvml_readings.parse(Section(text, 1), "r.json")
    assert result.driver_version == "535.129.03" and result.cuda_version == "12.2"
    assert len(result.devices) == 8 and len(result.pairs) == 28 and len(result.p2p) == 8 * 7 * 5
    gpu3 = result.devices[3]
    assert (gpu3.nvlinks_active, gpu3.nvlinks_total) == (17, 18)
    pair = next(p for p in result.pairs if (p.a, p.b) == (3, 6))
    assert (pair.path, pair.pcie_path, pair.nvlinks) == ("NV17", "SYS", 17)
    assert pair.source.line is None and "nvmlDeviceGetTopologyCommonAncestor(GPU3, GPU6)=50" in pair.source.text
    assert result.warnings == []


def test_text_is_not_readings() -> None:
    assert nvml_readings.sniff("\tGPU0\tGPU1\n") == 0.0
    assert nvml_readings.sniff('{"devices": []}') == 0.0


def test_bad_json_is_a_warning() -> None:
    result = nvml_readings.parse(Section("{not json", 1), "r.json")
    assert result.devices == [] and "not valid JSON" in result.warnings[0]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 60) | st.sampled_from(["OK", "NS", "read", "P0", "0-3", ""]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["index", "a", "b", "src", "dst", "capability", "status", "pcie", "nvlinks", "active", "name", "x"]),
        children,
        max_size=5,
    ),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.sampled_from(["schema", "error", "devices", "links", "p2p", "driver_version", "cuda_driver_version"]), _JSON, max_size=7))
def test_random_documents_never_raise(document: dict) -> None:
    nvml_readings.parse(Section(json.dumps(document), 1), "fuzz.json")


def test_a_negative_or_non_numeric_reading_is_said_and_not_used() -> None:
    # a damaged or hand-edited file: GPU0 of -5 MiB made advise plan for "-0.0 GiB per GPU"
    document = json.loads((NVML / "h100-sxm-8x-nvswitch-gpu3-link-down.json").read_text())
    document["devices"][0]["memory_total_mib"] = -5
    document["devices"][1]["memory_total_mib"] = "eighty"
    document["devices"][2]["pcie"]["width_current"] = -16
    document["devices"][3]["pcie"]["width_current"] = 0  # NVML's reading of a link that is down: kept
    result = nvml_readings.parse(Section(json.dumps(document), 1), "r.json")
    assert result.devices[0].memory_total_mib is None and result.devices[1].memory_total_mib is None
    assert result.devices[2].width_current is None and result.devices[3].width_current == 0
    assert result.devices[4].memory_total_mib == document["devices"][4]["memory_total_mib"]
    assert result.warnings == [
        "GPU0: memory_total_mib is -5, not a size in MiB; ignored",
        "GPU1: memory_total_mib is 'eighty', not a size in MiB; ignored",
        "GPU2: pcie.width_current is -16, not a count; ignored",
    ]


def test_a_link_or_p2p_reading_the_file_lacks_is_left_out_of_its_citation() -> None:
    # `...=None (None), NVLinks joining them: None` before
    document = json.loads((NVML / "h100-sxm-8x-nvswitch-gpu3-link-down.json").read_text())
    document["links"][0] = {"a": document["links"][0]["a"], "b": document["links"][0]["b"], "path": "NV18"}
    document["links"][1].pop("nvlinks")
    document["p2p"][0].pop("raw")
    result = nvml_readings.parse(Section(json.dumps(document), 1), "r.json")
    cited = [pair.source.text for pair in result.pairs] + [p2p.source.text for p2p in result.p2p]
    assert not any("None" in text for text in cited), [text for text in cited if "None" in text]
    assert result.pairs[0].source.text.endswith(")=not read") and result.pairs[0].path == "NV18"
    assert "NVLinks joining them" not in result.pairs[1].source.text
    assert result.p2p[0].source.text.endswith(f")=({result.p2p[0].status})")


def test_a_p2p_capability_that_is_a_list_or_object_skips_that_reading_only() -> None:
    # `capability not in _CAPABILITIES` with a list or an object raised TypeError (unhashable) and the whole
    # readings file (its GPUs, links and every other P2P reading) was lost for one damaged value
    document = json.loads((NVML / "h100-sxm-8x-nvswitch-gpu3-link-down.json").read_text())
    document["p2p"][1]["capability"] = []
    document["p2p"][2]["capability"] = {"read": True}
    result = nvml_readings.parse(Section(json.dumps(document), 1), "r.json")
    assert len(result.devices) == 8 and len(result.p2p) == 8 * 7 * 5 - 2
    assert result.warnings == ["r.json: a P2P reading without GPUs or a known capability was skipped"] * 2
