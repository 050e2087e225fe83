"""The measurement: pinned host<->GPU bandwidth per GPU, peer copies per GPU pair with peer access
disabled and enabled, and a check that the bytes arrived.

Timing follows the CUDA samples and nvbandwidth: events recorded on the copy's stream around each
copy, one untimed warm-up copy first, the best and the median of `repeats` copies reported in
GB/s (10^9 bytes per second, as those tools print). Waiting polls the end event instead of
blocking in the driver, so the deadline is checked while copies run; the caller also runs this in
a child process it can kill, for a driver call that never returns.

A peer capability can lie (a platform that routes P2P where it silently drops writes), so every
measured path is checked: a pattern is written at the start, middle and end of the source
buffer, the destination is poisoned first, and after the copies the windows are read back.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from k3diag.collect.probe.api import GpuApi, GpuApiError, GpuUnavailable
from k3diag.model.words import counted

SCHEMA = "k3diag.probe-readings/1"
FORMAT = "probe-readings"
READINGS_NAME = "probe-readings.json"
MIB = 1024 * 1024
DEFAULT_SIZE_BYTES = 256 * MIB
DEFAULT_REPEATS = 3
DEFAULT_DEADLINE_S = 60.0
# More than this share of a GPU's memory in use means someone's job is on it: probing would
# disturb that job and measure contention rather than the link.
DEFAULT_MAX_USED_FRACTION = 0.5
# Room left on the GPU beyond the probe's own buffer (allocator granularity, the context itself).
HEADROOM_BYTES = 256 * MIB
CHECK_WINDOW = 4096


class DeadlineReached(Exception):
    """The probe's total deadline passed while waiting for copies."""


@dataclass
class ProbeOptions:
    size_bytes: int = DEFAULT_SIZE_BYTES
    repeats: int = DEFAULT_REPEATS
    deadline_s: float = DEFAULT_DEADLINE_S
    force: bool = False
    devices: list[int] | None = None  # GPU indices as nvidia-smi/rocm-smi number them; None: all
    pairs: bool = True
    max_used_fraction: float = DEFAULT_MAX_USED_FRACTION


@dataclass
class Timing:
    """Copies of one kind: elapsed times as measured, and what they mean in GB/s."""

    nbytes: int
    samples_ms: list[float] = field(default_factory=list)

    @property
    def best_gbps(self) -> float | None:
        positive = [ms for ms in self.samples_ms if ms > 0]
        return round(self.nbytes / (min(positive) / 1e3) / 1e9, 2) if positive else None

    @property
    def median_gbps(self) -> float | None:
        positive = [ms for ms in self.samples_ms if ms > 0]
        return round(self.nbytes / (statistics.median(positive) / 1e3) / 1e9, 2) if positive else None

    def to_json(self) -> dict:
        return {"bytes": self.nbytes, "samples_ms": [round(ms, 4) for ms in self.samples_ms],
                "best_gbps": self.best_gbps, "median_gbps": self.median_gbps}


def pattern(seed: int, length: int = CHECK_WINDOW) -> bytes:
    """Bytes no stale buffer holds by accident: they depend on the seed and on the offset."""
    return bytes((offset * 131 + seed * 29 + 17) & 0xFF for offset in range(length))


def check_offsets(nbytes: int, window: int) -> list[int]:
    return sorted({0, max(0, nbytes // 2 - window // 2), max(0, nbytes - window)})


class _Prober:
    def __init__(self, api: GpuApi, options: ProbeOptions, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.api = api
        self.options = options
        self.clock = clock
        self.sleep = sleep
        self.deadline = clock() + options.deadline_s
        self.window = min(CHECK_WINDOW, options.size_bytes)
        self.buffers: dict[int, int] = {}
        self.streams: dict[int, int] = {}
        self.events: dict[int, tuple[int, int]] = {}
        self.host_src = 0
        self.host_dst = 0
        self.peer_enabled: set[tuple[int, int]] = set()

    # -- waiting and timing -----------------------------------------------------------------

    def _wait(self, event: int) -> None:
        delay = 50e-6
        while not self.api.event_done(event):
            if self.clock() > self.deadline:
                raise DeadlineReached()
            self.sleep(delay)
            delay = min(delay * 2, 5e-3)

    def _timed(self, device: int, issue: Callable[[], None]) -> Timing:
        start, end = self.events[device]
        stream = self.streams[device]
        timing = Timing(self.options.size_bytes)
        issue()  # warm-up: first touch of the pages, clocks up
        self.api.event_record(device, end, stream)
        self._wait(end)
        for _ in range(self.options.repeats):
            self.api.event_record(device, start, stream)
            issue()
            self.api.event_record(device, end, stream)
            self._wait(end)
            timing.samples_ms.append(self.api.event_elapsed_ms(start, end))
        return timing

    def _sync(self, device: int) -> None:
        _, end = self.events[device]
        self.api.event_record(device, end, self.streams[device])
        self._wait(end)

    # -- host buffers and the data check ----------------------------------------------------

    def _write_pattern(self, seed: int) -> bytes:
        data = pattern(seed, self.window)
        for offset in check_offsets(self.options.size_bytes, self.window):
            ctypes.memmove(self.host_src + offset, data, self.window)
        return data

    def _poison_host_dst(self) -> None:
        for offset in check_offsets(self.options.size_bytes, self.window):
            ctypes.memset(self.host_dst + offset, 0xA5, self.window)

    def _host_dst_matches(self, expected: bytes) -> bool:
        return all(ctypes.string_at(self.host_dst + offset, self.window) == expected
                   for offset in check_offsets(self.options.size_bytes, self.window))

    def time_left(self) -> bool:
        return self.clock() < self.deadline

    # -- one GPU ----------------------------------------------------------------------------

    def probe_gpu(self, device: int) -> dict:
        n = self.options.size_bytes
        expected = self._write_pattern(seed=device)
        h2d = self._timed(device, lambda: self.api.copy_host_to_device(device, self.buffers[device], self.host_src, n,
                                                                       self.streams[device]))
        self._poison_host_dst()
        d2h = self._timed(device, lambda: self.api.copy_device_to_host(device, self.host_dst, self.buffers[device], n,
                                                                       self.streams[device]))
        return {"host_to_device": h2d.to_json(), "device_to_host": d2h.to_json(),
                "data_ok": self._host_dst_matches(expected)}

    # -- one ordered pair -------------------------------------------------------------------

    def _peer_copy(self, src: int, dst: int, seed: int) -> tuple[Timing, bool]:
        n = self.options.size_bytes
        expected = self._write_pattern(seed)
        self.api.copy_host_to_device(src, self.buffers[src], self.host_src, n, self.streams[src])
        self._sync(src)
        self._poison_host_dst()
        self.api.copy_host_to_device(dst, self.buffers[dst], self.host_dst, n, self.streams[dst])
        self._sync(dst)
        timing = self._timed(src, lambda: self.api.copy_peer(dst, self.buffers[dst], src, self.buffers[src], n,
                                                             self.streams[src]))
        self._poison_host_dst()
        self.api.copy_device_to_host(dst, self.host_dst, self.buffers[dst], n, self.streams[dst])
        self._sync(dst)
        return timing, self._host_dst_matches(expected)

    def probe_pair(self, src: int, dst: int) -> dict:
        record: dict = {"src": src, "dst": dst, "can_access_peer": None, "peer_disabled": None, "peer_enabled": None,
                        "data_ok_peer_disabled": None, "data_ok_peer_enabled": None, "errors": []}
        record["can_access_peer"] = self.api.can_access_peer(src, dst)
        seed = 1000 + src * 64 + dst
        try:
            timing, ok = self._peer_copy(src, dst, seed)
            record["peer_disabled"], record["data_ok_peer_disabled"] = timing.to_json(), ok
        except GpuApiError as exc:
            record["errors"].append(f"peer copy with peer access disabled: {exc}")
        if record["can_access_peer"] and self.time_left():
            try:
                for a, b in ((src, dst), (dst, src)):
                    self.api.enable_peer_access(a, b)
                    self.peer_enabled.add((a, b))
                timing, ok = self._peer_copy(src, dst, seed + 1)
                record["peer_enabled"], record["data_ok_peer_enabled"] = timing.to_json(), ok
            except GpuApiError as exc:
                record["errors"].append(f"peer copy with peer access enabled: {exc}")
            finally:
                self._disable_peers()
        return record

    def _disable_peers(self) -> None:
        for a, b in sorted(self.peer_enabled):
            try:
                self.api.disable_peer_access(a, b)
            except GpuApiError:
                pass
        self.peer_enabled.clear()

    # -- resources --------------------------------------------------------------------------

    def setup(self, devices: list[int]) -> None:
        n = self.options.size_bytes
        self.host_src = self.api.host_alloc(n)
        self.host_dst = self.api.host_alloc(n)
        for device in devices:
            self.buffers[device] = self.api.device_alloc(device, n)
            self.streams[device] = self.api.stream_create(device)
            self.events[device] = (self.api.event_create(device), self.api.event_create(device))

    def teardown(self) -> None:
        self._disable_peers()
        for device, (start, end) in self.events.items():
            for event in (start, end):
                _quietly(lambda: self.api.event_destroy(device, event))
        for device, stream in self.streams.items():
            _quietly(lambda: self.api.stream_destroy(device, stream))
        for device, pointer in self.buffers.items():
            _quietly(lambda: self.api.device_free(device, pointer))
        for pointer in (self.host_src, self.host_dst):
            if pointer:
                _quietly(lambda: self.api.host_free(pointer))
        _quietly(self.api.close)


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except (GpuApiError, GpuUnavailable):
        pass


def empty_document(api_vendor: str | None, library: str | None, options: ProbeOptions) -> dict:
    settings = asdict(options)
    return {"schema": SCHEMA, "vendor": api_vendor, "library": library, "driver_version": None,
            "options": settings, "unavailable": None, "gpus": [], "pairs": [], "skipped": [], "errors": [],
            "deadline_reached": False, "elapsed_s": None}


def run_probe(api: GpuApi, options: ProbeOptions, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> dict:
    """Measure what `options` asks within its deadline; always returns a readings document."""
    started = clock()
    doc = empty_document(api.vendor, api.library, options)
    try:
        api.init()
    except GpuUnavailable as exc:
        doc["unavailable"] = str(exc)
        return doc
    doc["driver_version"] = api.driver_version()
    count = api.device_count()
    if count == 0:
        doc["unavailable"] = f"{api.library} is loaded but lists no GPU"
        return doc
    # Driver ordinals follow CUDA_DEVICE_ORDER (fastest first by default); nvidia-smi, NVML and
    # rocm-smi number GPUs in PCI bus order. Report in that order so GPU3 here is GPU3 there.
    bus_ids = {ordinal: _or_none(lambda: api.pci_bus_id(ordinal)) for ordinal in range(count)}
    ordinals = sorted(range(count), key=lambda o: (bus_ids[o] is None, (bus_ids[o] or "").lower()[-12:], o))
    index_of = {ordinal: index for index, ordinal in enumerate(ordinals)}
    wanted = list(options.devices) if options.devices is not None else list(range(count))
    for index in wanted:
        if not 0 <= index < count:
            doc["skipped"].append({"what": f"GPU{index}", "reason": f"the driver lists only {counted(count, 'GPU')}"})
    prober = _Prober(api, options, clock, sleep)
    usable: list[int] = []  # driver ordinals
    pending_gpus: list[int] = []
    pending_pairs: list[tuple[int, int]] = []
    records: dict[int, dict] = {}
    for index in (i for i in wanted if 0 <= i < count):
        ordinal = ordinals[index]
        gpu = {"index": index, "ordinal": ordinal, "name": _or_none(lambda: api.device_name(ordinal)),
               "bus_id": bus_ids[ordinal], "memory_free_bytes": None, "memory_total_bytes": None,
               "host_to_device": None, "device_to_host": None, "data_ok": None}
        doc["gpus"].append(gpu)
        records[ordinal] = gpu
        try:
            free, total = api.memory_info(ordinal)
        except GpuApiError as exc:
            doc["errors"].append(f"GPU{index}: memory information unavailable: {exc}")
            continue
        gpu["memory_free_bytes"], gpu["memory_total_bytes"] = free, total
        used_fraction = (total - free) / total if total else 1.0
        if used_fraction > options.max_used_fraction and not options.force:
            doc["skipped"].append({"what": f"GPU{index}", "reason": (
                f"{used_fraction:.0%} of its memory is in use (another job is on it); probing would disturb that job "
                "and measure contention, not the link: rerun with --force to probe it anyway")})
            continue
        if free < options.size_bytes + HEADROOM_BYTES:
            doc["skipped"].append({"what": f"GPU{index}", "reason": (
                f"only {free // MIB} MiB free, less than the {options.size_bytes // MIB} MiB buffer plus headroom; "
                "rerun with a smaller --size-mib")})
            continue
        usable.append(ordinal)
    if not usable:
        doc["elapsed_s"] = round(clock() - started, 3)
        return doc
    label = {ordinal: f"GPU{index_of[ordinal]}" for ordinal in usable}
    try:
        prober.setup(usable)
        pending_gpus = list(usable)
        pending_pairs = [(a, b) for a in usable for b in usable if a != b] if options.pairs else []
        # An item leaves its pending list only once measured, so a deadline names what is left.
        while pending_gpus:
            ordinal = pending_gpus[0]
            try:
                records[ordinal].update(prober.probe_gpu(ordinal))
            except GpuApiError as exc:
                doc["errors"].append(f"{label[ordinal]}: host copies failed: {exc}")
            pending_gpus.pop(0)
        while pending_pairs:
            src, dst = pending_pairs[0]
            if not prober.time_left():
                raise DeadlineReached()
            try:
                pair = prober.probe_pair(src, dst)
                pair["src"], pair["dst"] = index_of[src], index_of[dst]
                doc["pairs"].append(pair)
            except GpuApiError as exc:
                doc["errors"].append(f"{label[src]}->{label[dst]}: {exc}")
            pending_pairs.pop(0)
    except DeadlineReached:
        doc["deadline_reached"] = True
        left = [label[o] for o in pending_gpus] + [f"{label[a]}->{label[b]}" for a, b in pending_pairs]
        if left:
            doc["skipped"].append({"what": ", ".join(left), "reason": (
                f"the probe's deadline of {options.deadline_s:g} s was reached; rerun with a larger --deadline or "
                "fewer --gpu")})
    except GpuApiError as exc:
        doc["errors"].append(f"setup failed: {exc}")
    finally:
        prober.teardown()
    doc["elapsed_s"] = round(clock() - started, 3)
    return doc


def _or_none(call: Callable[[], str | None]) -> str | None:
    try:
        return call()
    except (GpuApiError, GpuUnavailable):
        return None
