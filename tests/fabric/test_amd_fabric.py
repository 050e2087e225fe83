"""AMD: WEIGHT tables become xGMI links with their hop count, so neighbours group first; `amd-smi static --bus`."""

from __future__ import annotations

from k3diag.analyze.planner import pair_quality, recommend_tp_groups
from k3diag.model.amd_records import link_type_from_weight, xgmi_hops_from_weight
from tests.fabric.conftest import machine_from

MI250X = "amd/rocm-smi-showtopo-mi250x-8gcd-weight-row-cut-openmm3940.txt"


def test_weights_alone_say_xgmi_and_hops() -> None:
    assert [link_type_from_weight(w) for w in (15, 30, 45, 20, 40, 52, 60, 0)] == [
        "XGMI", "XGMI", "XGMI", "PCIE", "PCIE", None, None, None]
    assert [xgmi_hops_from_weight(w) for w in (15, 30, 20)] == [1, 2, None]


def test_mi250x_weight_row_gives_xgmi_links_and_tp_groups() -> None:
    machine = machine_from(MI250X)
    links = {(l.a, l.b): l for l in machine.links}
    assert {pair: (l.path, l.weight) for pair, l in links.items()} == {
        ("GPU0", "GPU1"): ("XGMI", 15), ("GPU0", "GPU2"): ("XGMI", 15), ("GPU0", "GPU3"): ("XGMI", 30),
        ("GPU0", "GPU4"): ("XGMI", 30), ("GPU0", "GPU5"): ("XGMI", 30), ("GPU0", "GPU6"): ("XGMI", 15),
        ("GPU0", "GPU7"): ("XGMI", 30)}
    near, far = pair_quality(machine, 0, 1), pair_quality(machine, 0, 3)
    assert near.bandwidth_gbs == 2 * far.bandwidth_gbs
    assert "over 2 hops (weight)" in far.basis
    rec = recommend_tp_groups(machine, [4])
    # GPU0 groups with its three one-hop xGMI neighbours (weight 15), never with a two-hop one.
    group = next(g for g in rec.groups[4] if 0 in g)
    assert sorted(group) == [0, 1, 2, 6]


def test_amd_smi_static_bus_indented_and_flat() -> None:
    machine = machine_from("fabric/amd-smi-static-mi300a-4apu-readme.txt")
    assert [r.format for r in machine.inputs] == ["amd-smi-static-bus"]
    assert [(g.index, g.name, g.bus_id, g.numa_node) for g in machine.sorted_gpus()][:2] == [
        (0, "MI300A", "0000:01:00.0", 0), (1, "MI300A", "0001:01:00.0", 1)]
    assert (machine.gpus[3].pcie.gen_max, machine.gpus[3].pcie.width_max) == (5, 16)
    flat = machine_from("fabric/amd-smi-static-navi21-flat-lanes-readme-2023.txt")
    gpu = flat.gpus[0]
    # 2023 layout: MAX_PCIE_LANES, sections not indented, MARKET_NAME a device id (not a name).
    assert (gpu.bus_id, gpu.pcie.gen_max, gpu.pcie.width_max, gpu.name) == ("0000:23:00.0", 4, 16, None)


def test_amd_smi_static_json() -> None:
    # `root@pve028:~# amd-smi static --json` on an RX 6600 (a public troubleshooting note), trimmed to the parts read.
    text = ('[\n    {\n        "gpu": 0,\n        "asic": {\n            "market_name": "Navi 23 [Radeon RX 6600/6600 XT",\n'
            '            "oam_id": "N/A"\n        },\n        "bus": {\n            "bdf": "0000:0b:00.0",\n'
            '            "max_pcie_width": 16,\n            "max_pcie_speed": {\n                "value": 16,\n'
            '                "unit": "GT/s"\n            },\n            "pcie_interface_version": "Gen 4",\n'
            '            "slot_type": "CEM"\n        },\n        "numa": {\n            "node": 0,\n'
            '            "affinity": -1\n        }\n    }\n]\n')
    gpu = machine_from(texts={"static.json": text}).gpus[0]
    assert (gpu.bus_id, gpu.pcie.gen_max, gpu.pcie.width_max, gpu.numa_node) == ("0000:0b:00.0", 4, 16, 0)
