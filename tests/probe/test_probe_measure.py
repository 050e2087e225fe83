"""The prober and the real ctypes bindings driven by a fake driver library (tests/probe/fake_gpu.py):
the timing arithmetic, the data check, the busy-GPU guard, the deadline and the clean-up."""

from __future__ import annotations

import pytest

from k3diag.collect.probe.api import GpuUnavailable
from k3diag.collect.probe.child import open_api
from k3diag.collect.probe.cuda import CudaDriverApi
from k3diag.collect.probe.hip import HipRuntimeApi
from k3diag.collect.probe.measure import MIB, ProbeOptions, run_probe
from tests.probe.fake_gpu import FakeCudaLibrary, FakeHipLibrary, h200_pair


class FakeClock:
    """Time that moves only when the prober sleeps: deadline tests take no wall time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _probe(api, **options) -> dict:
    clock = FakeClock()
    return run_probe(api, ProbeOptions(size_bytes=1 * MIB, **options), clock=clock, sleep=clock.sleep)


def test_bandwidths_follow_from_bytes_and_event_times() -> None:
    machine = h200_pair()
    doc = _probe(CudaDriverApi(FakeCudaLibrary(machine)), repeats=4)
    gpu0 = doc["gpus"][0]
    assert (gpu0["name"], gpu0["bus_id"]) == ("NVIDIA H200", "00000000:18:00.0")
    # 1 MiB at 53 GB/s = 0.019785 ms per copy; four timed copies after one warm-up
    assert gpu0["host_to_device"]["best_gbps"] == 53.0
    assert gpu0["device_to_host"]["best_gbps"] == 54.5
    assert len(gpu0["host_to_device"]["samples_ms"]) == 4
    assert gpu0["host_to_device"]["samples_ms"][0] == pytest.approx(MIB / 53e9 * 1e3, abs=1e-4)
    assert gpu0["data_ok"] is True
    pair = next(p for p in doc["pairs"] if (p["src"], p["dst"]) == (0, 1))
    assert pair["can_access_peer"] is True
    assert pair["peer_enabled"]["best_gbps"] == 370.0
    assert pair["peer_disabled"]["best_gbps"] == 21.0
    assert (pair["data_ok_peer_enabled"], pair["data_ok_peer_disabled"]) == (True, True)
    assert doc["driver_version"] == "12.4"
    assert doc["deadline_reached"] is False and doc["skipped"] == [] and doc["errors"] == []


def test_polling_waits_for_pending_events() -> None:
    machine = h200_pair()
    machine.pending_queries = 5
    doc = _probe(CudaDriverApi(FakeCudaLibrary(machine)))
    assert doc["gpus"][1]["host_to_device"]["best_gbps"] == 53.0
    # every wait polled the event until the driver said it was done
    # each wait polls the end event until the driver says done: 5 NOT_READY answers, then success
    waits = machine.calls.count("cuEventQuery") / 6
    assert waits == int(waits) and waits >= machine.calls.count("cuEventElapsedTime")


def test_a_peer_capability_that_lies_is_caught_by_the_data_check() -> None:
    machine = h200_pair()
    machine.lying_pairs = {(0, 1)}
    doc = _probe(CudaDriverApi(FakeCudaLibrary(machine)))
    by_pair = {(p["src"], p["dst"]): p for p in doc["pairs"]}
    assert by_pair[(0, 1)]["data_ok_peer_enabled"] is False
    assert by_pair[(0, 1)]["data_ok_peer_disabled"] is True  # staged copies still deliver
    assert by_pair[(1, 0)]["data_ok_peer_enabled"] is True


def test_refused_peer_access_is_measured_staged_only() -> None:
    machine = h200_pair()
    machine.can_access = set()
    doc = _probe(CudaDriverApi(FakeCudaLibrary(machine)))
    pair = doc["pairs"][0]
    assert pair["can_access_peer"] is False
    assert pair["peer_enabled"] is None
    assert pair["peer_disabled"]["best_gbps"] == 21.0
    assert "cuCtxEnablePeerAccess" not in machine.calls


def test_a_busy_gpu_is_refused_unless_forced() -> None:
    machine = h200_pair()
    machine.devices[1].used_bytes = int(machine.devices[1].total_bytes * 0.9)
    doc = _probe(CudaDriverApi(FakeCudaLibrary(machine)))
    assert [g["index"] for g in doc["gpus"] if g["host_to_device"]] == [0]
    assert doc["pairs"] == []
    assert doc["skipped"][0]["what"] == "GPU1"
    assert "90% of its memory is in use" in doc["skipped"][0]["reason"]
    assert "--force" in doc["skipped"][0]["reason"]
    forced = _probe(CudaDriverApi(FakeCudaLibrary(machine)), force=True)
    assert forced["gpus"][1]["host_to_device"]["best_gbps"] == 53.0


def test_deadline_stops_a_probe_whose_copies_never_finish() -> None:
    machine = h200_pair()
    machine.events_never_finish = True
    clock = FakeClock()
    doc = run_probe(CudaDriverApi(FakeCudaLibrary(machine)), ProbeOptions(size_bytes=MIB, deadline_s=2.0),
                    clock=clock, sleep=clock.sleep)
    assert doc["deadline_reached"] is True
    assert 2.0 < clock.now < 2.1
    left = doc["skipped"][-1]
    assert left["what"] == "GPU0, GPU1, GPU0->GPU1, GPU1->GPU0"
    assert "deadline of 2 s was reached" in left["reason"]


def test_every_buffer_stream_event_and_peer_mapping_is_released() -> None:
    machine = h200_pair()
    _probe(CudaDriverApi(FakeCudaLibrary(machine)))
    assert machine.buffers == {}
    assert machine.enabled == set()
    assert machine.stream_device == {}
    assert machine.event_time == {}
    assert machine.devices[0].used_bytes == 1024**3


def test_hip_bindings_measure_the_same() -> None:
    machine = h200_pair()
    doc = _probe(HipRuntimeApi(FakeHipLibrary(machine)))
    assert doc["vendor"] == "amd"
    assert doc["gpus"][0]["host_to_device"]["best_gbps"] == 53.0
    assert doc["pairs"][0]["peer_enabled"]["best_gbps"] == 370.0
    assert machine.buffers == {}


def test_selected_gpus_out_of_range_are_named() -> None:
    doc = _probe(CudaDriverApi(FakeCudaLibrary(h200_pair())), devices=[1, 5])
    assert [g["index"] for g in doc["gpus"]] == [1]
    assert doc["skipped"][0] == {"what": "GPU5", "reason": "the driver lists only 2 GPUs"}


def test_no_driver_library_on_this_host_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("K3DIAG_PROBE_LIBRARY", raising=False)
    import ctypes.util

    if ctypes.util.find_library("cuda") or ctypes.util.find_library("amdhip64"):
        pytest.skip("this host has a GPU driver library")
    with pytest.raises(GpuUnavailable) as raised:
        open_api("auto")
    message = str(raised.value)
    assert "libcuda.so.1 (the NVIDIA driver's CUDA library) could not be loaded" in message
    assert "libamdhip64.so (the ROCm HIP runtime) could not be loaded" in message


def test_gpus_are_numbered_in_pci_bus_order_like_nvidia_smi() -> None:
    machine = h200_pair()
    machine.devices.reverse()  # CUDA's default order lists the higher bus first here
    machine.devices[0].h2d_gbps = 40.0  # ordinal 0 = bus 2a
    doc = _probe(CudaDriverApi(FakeCudaLibrary(machine)))
    assert [(g["index"], g["ordinal"], g["bus_id"]) for g in doc["gpus"]] == [
        (0, 1, "00000000:18:00.0"), (1, 0, "00000000:2A:00.0")]
    assert doc["gpus"][1]["host_to_device"]["best_gbps"] == 40.0
