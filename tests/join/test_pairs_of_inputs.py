"""Several files on one command line, as users give them (`k3diag analyze topo.txt lspci.txt nccl.log`, or files of
two hosts by mistake): what the report says about which machine each belongs to.

Found by running analyze on pairs of the real fixtures (fixtures/*/SOURCES.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from k3diag.cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "k3diag" / "data" / "schema" / "report.schema.json").read_text())
BUNDLE = FIXTURES / "bundles" / "good-8x-h100-nvlink"
AMD_TOPO = FIXTURES / "amd" / "rocm-smi-showtopo-mi308x-8gpu-lowpower-warning.txt"
NVIDIA_TOPO = FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"
runner = CliRunner()


def _analyze(*paths: Path, as_json: bool = False):
    result = runner.invoke(app, ["analyze", *map(str, paths)] + (["--json"] if as_json else []))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_an_nvidia_topo_matrix_and_an_amd_one_are_two_machines() -> None:
    # Both list 8 GPUs and neither names a model: the vendor alone tells them apart. They were one
    # machine of 16 GPUs, 'GPU pairs by path: XGMI x28, SYS x28', with AMD GPUs numbered GPU8-15.
    result = _analyze(NVIDIA_TOPO, AMD_TOPO)
    assert "The inputs describe 2 different machines" in result.output
    assert "16 GPUs" not in result.output
    assert "GPUs of different vendors (NVIDIA (" in result.output and " vs AMD (" in result.output
    assert "Machine 1 (8 GPUs, NVIDIA)" in result.output and "Machine 2 (8 GPUs, AMD)" in result.output


def test_an_nvidia_bundle_with_an_amd_topology_is_two_machines_in_json() -> None:
    result = _analyze(BUNDLE, AMD_TOPO, as_json=True)
    report = json.loads(result.output)
    jsonschema.validate(report, SCHEMA)
    counts = [len(machine["topology"]["gpus"]) for machine in report["machines"]]
    assert counts == [8, 8]
    vendors = [{gpu["vendor"] for gpu in machine["topology"]["gpus"]} for machine in report["machines"]]
    assert vendors == [{"NVIDIA"}, {"AMD"}]


def test_a_bundle_s_files_that_name_no_gpu_stay_with_the_bundle() -> None:
    # A bundle is one host's collection: given with another machine's matrix, its ACSCtl grep, its
    # /proc/cmdline and its p2pBandwidthLatencyTest were three more 'machines' ('describe 5 different
    # machines'), each with its own verdict [UNKNOWN].
    result = _analyze(BUNDLE, FIXTURES / "nvidia" / "topo-m-3x-a6000-nv4-pair-node-prompt.txt")
    assert "The inputs describe 2 different machines" in result.output
    assert "no machine keys" not in result.output
    assert ("good-8x-h100-nvlink:evidence/lspci-acsctl.txt: it names no host or GPU; the rest of "
            "good-8x-h100-nvlink went to this machine") in result.output
    report = json.loads(_analyze(BUNDLE, FIXTURES / "nvidia" / "topo-m-3x-a6000-nv4-pair-node-prompt.txt",
                                 as_json=True).output)
    first = {Path(record["path"].split(":", 1)[-1]).name for record in report["machines"][0]["inputs"]}
    assert {"lspci-acsctl.txt", "proc-cmdline.txt", "p2pBandwidthLatencyTest.txt", "nvml-readings.json"} <= first
    assert [record["format"] for record in report["machines"][1]["inputs"]] == ["nvidia-smi-topo-matrix"]


def test_each_machine_s_inputs_validate_with_every_format() -> None:
    # machines[].inputs[].format listed fewer formats than inputs[].format: a report of two machines with an
    # `nvidia-smi nvlink -s` among them failed the schema users validate against.
    result = _analyze(FIXTURES / "fabric" / "nvlink-s-v100-two-inactive-excerpt.txt", BUNDLE, as_json=True)
    report = json.loads(result.output)
    assert len(report["machines"]) == 2
    assert "nvidia-smi-nvlink-status" in {r["format"] for m in report["machines"] for r in m["inputs"]}
    jsonschema.validate(report, SCHEMA)
    top = SCHEMA["properties"]["inputs"]["items"]["properties"]["format"]["enum"]
    per_machine = SCHEMA["properties"]["machines"]["items"]["properties"]["inputs"]["items"]["properties"]["format"]["enum"]
    assert per_machine == top


def test_a_bundle_stays_one_machine_when_another_machine_s_file_comes_first() -> None:
    # An `nvidia-smi nvlink -s` of a V100 given before an H100 bundle took the bundle's topo -m, topo -p2p,
    # p2pBandwidthLatencyTest and NCCL log onto 'Machine 1 (... Tesla V100-SXM2-32GB)', judged them there, and
    # left the bundle's NVML reading as a machine of its own: one host's collection cut in two.
    report = json.loads(_analyze(FIXTURES / "fabric" / "nvlink-s-v100-two-inactive-excerpt.txt", BUNDLE,
                                 as_json=True).output)
    jsonschema.validate(report, SCHEMA)
    assert [len(machine["inputs"]) for machine in report["machines"]] == [1, 7]
    assert report["machines"][0]["inputs"][0]["format"] == "nvidia-smi-nvlink-status"
    assert {gpu["name"] for gpu in report["machines"][1]["topology"]["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    reasons = [record["machine_reason"] for record in report["machines"][1]["inputs"]]
    assert reasons[0].startswith("not with ") and "nvlink-s-v100-two-inactive-excerpt.txt:" in reasons[0]
    assert "different GPU models (Tesla V100-SXM2-32GB" in reasons[0]
    assert all(reason.startswith("from the bundle good-8x-h100-nvlink, one host's collection")
               or reason.startswith("it names no host or GPU; the rest of good-8x-h100-nvlink") for reason in reasons[1:])


def test_an_rccl_log_and_an_nvidia_topo_matrix_are_two_machines() -> None:
    # RCCL runs on AMD GPUs only: its log's ranks were numbered into the 4090s of the matrix.
    result = _analyze(FIXTURES / "nccl" / "rccl-2.20.5-pytorch-glog-interleaved.log", NVIDIA_TOPO)
    assert "The inputs describe 2 different machines" in result.output
    assert "GPUs of different vendors (AMD (" in result.output and "rccl-2.20.5-pytorch-glog-interleaved.log:5) vs NVIDIA (" in result.output
