"""The compressors are told by one table (`k3diag.compression`), for inputs and bundles alike; a JSON reading
of `NaN`, `Infinity` or `1e999` (which Python's JSON reader takes) is no reading, not the end of the input."""

from __future__ import annotations

import bz2
import io
import json
import re
import tarfile
from pathlib import Path

from k3diag.bundle import bytes_look_like_bundle
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.render.json_report import build_report, dumps

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _warnings(machine) -> list[str]:
    return [warning for record in machine.inputs for warning in record.warnings]


def test_an_empty_bzip2_file_is_called_compressed_and_bzh_text_is_not() -> None:
    # an empty stream has the end-of-stream magic after `BZh9`, not a block's: it was read as text
    empty = build_machine([Evidence(name="empty.log.bz2", data=bz2.compress(b""))])
    assert any("is bzip2-compressed" in warning for warning in _warnings(empty)), _warnings(empty)
    text = build_machine([Evidence(name="notes.txt", data=b"BZhello\nsecond line\nthird line\n")])
    assert not any("compressed" in warning for warning in _warnings(text)), _warnings(text)


def test_a_bzip2_bundle_through_a_pipe_is_a_bundle() -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:bz2") as archive:
        member = tarfile.TarInfo("node/manifest.json")
        member.size = 2
        archive.addfile(member, io.BytesIO(b"{}"))
    assert bytes_look_like_bundle(data.getvalue())


def test_non_finite_numbers_in_amd_smi_readings_are_no_reading() -> None:
    # `int(float("inf"))` raised OverflowError (NaN: ValueError): "the amdsmi-readings parser failed on this input"
    text = (FIXTURES / "amdsmi" / "mi300x_8gpu_one_link_down.json").read_text()
    plain = build_machine([Evidence(name="readings.json", data=text.encode())])
    found = re.search(r'"bandwidth_max": (\d+)', text)
    for token in ("1e999", "NaN", "-Infinity"):
        damaged = text[:found.start(1)] + token + text[found.end(1):]
        machine = build_machine([Evidence(name="readings.json", data=damaged.encode())])
        assert not any("parser failed" in warning for warning in _warnings(machine)), _warnings(machine)
        assert len(machine.gpus) == len(plain.gpus) == 8


def test_a_damaged_amd_smi_count_is_said_and_its_evidence_never_reads_none() -> None:
    # dropped in silence before, and the citations read `bdf None, NUMA node None` and `hops None`
    document = json.loads((FIXTURES / "amdsmi" / "mi300x_8gpu_one_link_down.json").read_text())
    document["processors"][2]["pcie"]["width_current"] = float("nan")
    document["processors"][3]["pcie"]["gen_current"] = 4.5
    document["processors"][4].update(bus_id=None, numa_node=None)
    document["pairs"][0].update(hops=None, weight=-3)
    machine = build_machine([Evidence(name="readings.json", data=json.dumps(document).encode())])
    warnings = _warnings(machine)
    assert "amdsmi GPU2 pcie.width_current is NaN, not a count; read as not known" in warnings, warnings
    assert "amdsmi GPU3 pcie.gen_current is 4.5, not a count; read as not known" in warnings, warnings
    assert "amdsmi GPU0 -> GPU1 weight is -3, not a count; read as not known" in warnings, warnings
    assert not any("GPU4" in warning for warning in warnings)  # absent is unknown, not damaged
    cited = [source.text for gpu in machine.gpus.values() for source in gpu.sources]
    cited += [link.source.text for link in machine.links if link.source is not None]
    assert not any("None" in text for text in cited), [text for text in cited if "None" in text]
    assert "amdsmi GPU4: AMD Instinct MI300X" in cited
    assert "amdsmi_topo_get_link_type(GPU0 -> GPU1): XGMI" in cited  # no `, hops None`
    assert "None" not in dumps(build_report(machine, [], None, {}, 0))
