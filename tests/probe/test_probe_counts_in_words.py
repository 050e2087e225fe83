"""The probe counts GPUs in words: 'k3diag probe: 1 GPU through ...', 'the driver lists only 1 GPU'."""

from __future__ import annotations

from k3diag.collect.probe.cuda import CudaDriverApi
from k3diag.model.machine import Machine
from k3diag.model.probe_records import ProbeBenchmark, ProbeGpu
from k3diag.render.probe_text import render_probe
from tests.probe.fake_gpu import FakeCudaLibrary, FakeMachine, h200_pair
from tests.probe.test_probe_measure import _probe


def test_the_first_line_counts_one_gpu_and_several() -> None:
    for count, said in ((1, "1 GPU"), (2, "2 GPUs")):
        bench = ProbeBenchmark(library="nvidia-fake", driver_version="12.4", size_bytes=4 << 20, repeats=3,
                               gpus=[ProbeGpu(i, "NVIDIA H200", None, 53.0, 54.5) for i in range(count)])
        first = render_probe(bench, Machine(), [])[0]
        assert first == f"k3diag probe: {said} through nvidia-fake (driver 12.4), 4 MiB buffers, best of 3"


def test_a_gpu_past_the_driver_count_names_it_singular() -> None:
    pair = h200_pair()
    one = FakeMachine(devices=pair.devices[:1], can_access=set(), peer_enabled_gbps={}, peer_disabled_gbps=21.0)
    doc = _probe(CudaDriverApi(FakeCudaLibrary(one)), devices=[0, 3])
    assert doc["skipped"][0] == {"what": "GPU3", "reason": "the driver lists only 1 GPU"}
