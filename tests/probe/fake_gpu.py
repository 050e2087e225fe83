"""A fake GPU driver library for hosts without a GPU: the C functions of `libcuda.so.1` and
`libamdhip64.so` by name, with their calling conventions (out-parameters through ctypes.byref,
handles as pointers, CUresult/hipError_t codes), over simulated devices.

Device and pinned memory are real host memory (ctypes buffers), so copies really move bytes
and the prober's data check really compares them. Time is virtual: each copy advances its
stream's clock by bytes / bandwidth, and events read that clock, so the prober's arithmetic is
checked against exact figures. Knobs make it lie (a peer copy that drops its bytes), refuse
peer access, fill memory, or never finish (an event that stays pending).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any


def _value(arg: Any) -> Any:
    """What a ctypes argument holds: c_void_p/c_int -> int, plain ints as they are."""
    return getattr(arg, "value", arg)


def _out(arg: Any) -> Any:
    """The ctypes object behind byref(obj)."""
    return getattr(arg, "_obj", arg)


@dataclass
class FakeDevice:
    name: str
    bus_id: str
    total_bytes: int = 80 * 1024**3
    used_bytes: int = 1 * 1024**3
    h2d_gbps: float = 50.0
    d2h_gbps: float = 52.0


@dataclass
class FakeMachine:
    devices: list[FakeDevice]
    can_access: set[tuple[int, int]] = field(default_factory=set)
    peer_enabled_gbps: dict[tuple[int, int], float] = field(default_factory=dict)
    peer_disabled_gbps: float = 20.0
    default_peer_gbps: float = 40.0
    lying_pairs: set[tuple[int, int]] = field(default_factory=set)  # enabled peer copies drop their bytes
    events_never_finish: bool = False
    pending_queries: int = 2  # cuEventQuery answers NOT_READY this many times before success
    driver_version: int = 12040
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.buffers: dict[int, ctypes.Array] = {}
        self.owner: dict[int, int | None] = {}
        self.stream_device: dict[int, int] = {}
        self.stream_clock: dict[int, float] = {}
        self.event_time: dict[int, float] = {}
        self.event_queries: dict[int, int] = {}
        self.enabled: set[tuple[int, int]] = set()
        self.next_handle = 0x5000

    def handle(self) -> int:
        self.next_handle += 0x10
        return self.next_handle

    def alloc(self, nbytes: int, device: int | None) -> int:
        buffer = (ctypes.c_char * nbytes)()
        address = ctypes.addressof(buffer)
        self.buffers[address] = buffer
        self.owner[address] = device
        if device is not None:
            self.devices[device].used_bytes += nbytes
        return address

    def free(self, address: int) -> None:
        buffer = self.buffers.pop(address)
        device = self.owner.pop(address)
        if device is not None:
            self.devices[device].used_bytes -= len(buffer)

    def advance(self, stream: int, nbytes: int, gbps: float) -> None:
        self.stream_clock[stream] = self.stream_clock.get(stream, 0.0) + nbytes / (gbps * 1e9) * 1e3

    def peer_gbps(self, src: int, dst: int) -> float:
        if (src, dst) in self.enabled and (src, dst) in self.can_access:
            return self.peer_enabled_gbps.get((src, dst), self.default_peer_gbps)
        return self.peer_disabled_gbps

    def query(self, event: int) -> bool:
        if self.events_never_finish:
            return False
        seen = self.event_queries.get(event, 0)
        if seen < self.pending_queries:
            self.event_queries[event] = seen + 1
            return False
        self.event_queries[event] = 0
        return True


class FakeCudaLibrary:
    """The CUDA driver API entry points the prober's bindings call, in C's calling convention."""

    SUCCESS, NOT_READY, INVALID_VALUE, OUT_OF_MEMORY = 0, 600, 1, 2
    PEER_ALREADY, PEER_NOT_ENABLED, PEER_UNSUPPORTED = 704, 705, 217
    NAMES = {0: b"CUDA_SUCCESS", 1: b"CUDA_ERROR_INVALID_VALUE", 2: b"CUDA_ERROR_OUT_OF_MEMORY",
             217: b"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", 600: b"CUDA_ERROR_NOT_READY"}

    def __init__(self, machine: FakeMachine) -> None:
        self.m = machine
        self.current: int | None = None

    def __getattribute__(self, name: str) -> Any:
        attribute = object.__getattribute__(self, name)
        if not (name.startswith("cu") and name[2:3].isupper()):  # cuMemAlloc_v2, not self.current
            return attribute
        calls = object.__getattribute__(self, "m").calls

        def recorded(*args: Any) -> int:  # the bindings keep this function: every call is logged
            calls.append(name)
            return attribute(*args)

        return recorded

    # cuDevicePrimaryCtxRetain hands out 0x1000 + ordinal; CUdevice is the ordinal itself.
    def _ctx_device(self, ctx: Any) -> int:
        return int(_value(ctx)) - 0x1000

    def cuInit(self, flags: int) -> int:
        return self.SUCCESS

    def cuDriverGetVersion(self, out: Any) -> int:
        _out(out).value = self.m.driver_version
        return self.SUCCESS

    def cuDeviceGetCount(self, out: Any) -> int:
        _out(out).value = len(self.m.devices)
        return self.SUCCESS

    def cuDeviceGet(self, out: Any, ordinal: int) -> int:
        _out(out).value = ordinal
        return self.SUCCESS

    def cuDeviceGetName(self, buffer: Any, length: int, device: int) -> int:
        ctypes.memmove(buffer, self.m.devices[device].name.encode() + b"\0", len(self.m.devices[device].name) + 1)
        return self.SUCCESS

    def cuDeviceGetPCIBusId(self, buffer: Any, length: int, device: int) -> int:
        text = self.m.devices[device].bus_id.encode() + b"\0"
        ctypes.memmove(buffer, text, len(text))
        return self.SUCCESS

    def cuDeviceCanAccessPeer(self, out: Any, device: int, peer: int) -> int:
        _out(out).value = int((device, peer) in self.m.can_access)
        return self.SUCCESS

    def cuDevicePrimaryCtxRetain(self, out: Any, device: int) -> int:
        _out(out).value = 0x1000 + device
        return self.SUCCESS

    def cuDevicePrimaryCtxRelease_v2(self, device: int) -> int:
        return self.SUCCESS

    def cuCtxSetCurrent(self, ctx: Any) -> int:
        self.current = self._ctx_device(ctx)
        return self.SUCCESS

    def cuCtxEnablePeerAccess(self, peer_ctx: Any, flags: int) -> int:
        pair = (self.current, self._ctx_device(peer_ctx))
        if pair not in self.m.can_access:
            return self.PEER_UNSUPPORTED
        if pair in self.m.enabled:
            return self.PEER_ALREADY
        self.m.enabled.add(pair)
        return self.SUCCESS

    def cuCtxDisablePeerAccess(self, peer_ctx: Any) -> int:
        pair = (self.current, self._ctx_device(peer_ctx))
        if pair not in self.m.enabled:
            return self.PEER_NOT_ENABLED
        self.m.enabled.discard(pair)
        return self.SUCCESS

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        device = self.m.devices[self.current]
        _out(free).value = device.total_bytes - device.used_bytes
        _out(total).value = device.total_bytes
        return self.SUCCESS

    def cuMemAlloc_v2(self, out: Any, nbytes: int) -> int:
        device = self.m.devices[self.current]
        if device.total_bytes - device.used_bytes < nbytes:
            return self.OUT_OF_MEMORY
        _out(out).value = self.m.alloc(nbytes, self.current)
        return self.SUCCESS

    def cuMemFree_v2(self, pointer: int) -> int:
        self.m.free(int(_value(pointer)))
        return self.SUCCESS

    def cuMemHostAlloc(self, out: Any, nbytes: int, flags: int) -> int:
        _out(out).value = self.m.alloc(nbytes, None)
        return self.SUCCESS

    def cuMemFreeHost(self, pointer: Any) -> int:
        self.m.free(int(_value(pointer)))
        return self.SUCCESS

    def cuStreamCreate(self, out: Any, flags: int) -> int:
        stream = self.m.handle()
        self.m.stream_device[stream] = self.current
        _out(out).value = stream
        return self.SUCCESS

    def cuStreamDestroy_v2(self, stream: Any) -> int:
        self.m.stream_device.pop(int(_value(stream)))
        return self.SUCCESS

    def cuEventCreate(self, out: Any, flags: int) -> int:
        _out(out).value = self.m.handle()
        return self.SUCCESS

    def cuEventDestroy_v2(self, event: Any) -> int:
        self.m.event_time.pop(int(_value(event)), None)
        return self.SUCCESS

    def cuEventRecord(self, event: Any, stream: Any) -> int:
        self.m.event_time[int(_value(event))] = self.m.stream_clock.get(int(_value(stream)), 0.0)
        return self.SUCCESS

    def cuEventQuery(self, event: Any) -> int:
        return self.SUCCESS if self.m.query(int(_value(event))) else self.NOT_READY

    def cuEventElapsedTime(self, out: Any, start: Any, end: Any) -> int:
        _out(out).value = self.m.event_time[int(_value(end))] - self.m.event_time[int(_value(start))]
        return self.SUCCESS

    def cuMemcpyHtoDAsync_v2(self, dst: Any, src: Any, nbytes: int, stream: Any) -> int:
        device = self.m.devices[self.m.stream_device[int(_value(stream))]]
        ctypes.memmove(int(_value(dst)), int(_value(src)), nbytes)
        self.m.advance(int(_value(stream)), nbytes, device.h2d_gbps)
        return self.SUCCESS

    def cuMemcpyDtoHAsync_v2(self, dst: Any, src: Any, nbytes: int, stream: Any) -> int:
        device = self.m.devices[self.m.stream_device[int(_value(stream))]]
        ctypes.memmove(int(_value(dst)), int(_value(src)), nbytes)
        self.m.advance(int(_value(stream)), nbytes, device.d2h_gbps)
        return self.SUCCESS

    def cuMemcpyPeerAsync(self, dst: Any, dst_ctx: Any, src: Any, src_ctx: Any, nbytes: int, stream: Any) -> int:
        pair = (self._ctx_device(src_ctx), self._ctx_device(dst_ctx))
        dropped = pair in self.m.lying_pairs and pair in self.m.enabled
        if not dropped:
            ctypes.memmove(int(_value(dst)), int(_value(src)), nbytes)
        self.m.advance(int(_value(stream)), nbytes, self.m.peer_gbps(*pair))
        return self.SUCCESS

    def cuGetErrorName(self, code: int, out: Any) -> int:
        _out(out).value = self.NAMES.get(int(_value(code)), b"CUDA_ERROR_UNKNOWN")
        return self.SUCCESS


class FakeHipLibrary:
    """The HIP runtime entry points, over the same simulated machine (current device, no contexts)."""

    SUCCESS, NOT_READY, OUT_OF_MEMORY = 0, 600, 2
    PEER_ALREADY, PEER_NOT_ENABLED, PEER_UNSUPPORTED = 704, 705, 217

    def __init__(self, machine: FakeMachine) -> None:
        self.m = machine
        self.current = 0
        self.cuda = FakeCudaLibrary(machine)

    def _cuda_ctx(self) -> None:
        self.cuda.current = self.current

    def hipInit(self, flags: int) -> int:
        return self.SUCCESS

    def hipDriverGetVersion(self, out: Any) -> int:
        _out(out).value = 60342134
        return self.SUCCESS

    def hipGetDeviceCount(self, out: Any) -> int:
        return self.cuda.cuDeviceGetCount(out)

    def hipDeviceGetName(self, buffer: Any, length: int, device: int) -> int:
        return self.cuda.cuDeviceGetName(buffer, length, device)

    def hipDeviceGetPCIBusId(self, buffer: Any, length: int, device: int) -> int:
        return self.cuda.cuDeviceGetPCIBusId(buffer, length, device)

    def hipSetDevice(self, device: int) -> int:
        self.current = int(_value(device))
        return self.SUCCESS

    def hipMemGetInfo(self, free: Any, total: Any) -> int:
        self._cuda_ctx()
        return self.cuda.cuMemGetInfo_v2(free, total)

    def hipDeviceCanAccessPeer(self, out: Any, device: int, peer: int) -> int:
        return self.cuda.cuDeviceCanAccessPeer(out, device, peer)

    def hipDeviceEnablePeerAccess(self, peer: int, flags: int) -> int:
        self._cuda_ctx()
        return self.cuda.cuCtxEnablePeerAccess(0x1000 + int(_value(peer)), flags)

    def hipDeviceDisablePeerAccess(self, peer: int) -> int:
        self._cuda_ctx()
        return self.cuda.cuCtxDisablePeerAccess(0x1000 + int(_value(peer)))

    def hipMalloc(self, out: Any, nbytes: int) -> int:
        self._cuda_ctx()
        code = self.cuda.cuMemAlloc_v2(out, nbytes)
        return code

    def hipFree(self, pointer: Any) -> int:
        return self.cuda.cuMemFree_v2(pointer)

    def hipHostMalloc(self, out: Any, nbytes: int, flags: int) -> int:
        return self.cuda.cuMemHostAlloc(out, nbytes, flags)

    def hipHostFree(self, pointer: Any) -> int:
        return self.cuda.cuMemFreeHost(pointer)

    def hipStreamCreateWithFlags(self, out: Any, flags: int) -> int:
        self._cuda_ctx()
        return self.cuda.cuStreamCreate(out, flags)

    def hipStreamDestroy(self, stream: Any) -> int:
        return self.cuda.cuStreamDestroy_v2(stream)

    def hipEventCreate(self, out: Any) -> int:
        return self.cuda.cuEventCreate(out, 0)

    def hipEventDestroy(self, event: Any) -> int:
        return self.cuda.cuEventDestroy_v2(event)

    def hipEventRecord(self, event: Any, stream: Any) -> int:
        return self.cuda.cuEventRecord(event, stream)

    def hipEventQuery(self, event: Any) -> int:
        return self.cuda.cuEventQuery(event)

    def hipEventElapsedTime(self, out: Any, start: Any, end: Any) -> int:
        return self.cuda.cuEventElapsedTime(out, start, end)

    def hipMemcpyHtoDAsync(self, dst: Any, src: Any, nbytes: int, stream: Any) -> int:
        return self.cuda.cuMemcpyHtoDAsync_v2(dst, src, nbytes, stream)

    def hipMemcpyDtoHAsync(self, dst: Any, src: Any, nbytes: int, stream: Any) -> int:
        return self.cuda.cuMemcpyDtoHAsync_v2(dst, src, nbytes, stream)

    def hipMemcpyPeerAsync(self, dst: Any, dst_device: int, src: Any, src_device: int, nbytes: int, stream: Any) -> int:
        return self.cuda.cuMemcpyPeerAsync(dst, 0x1000 + int(_value(dst_device)), src, 0x1000 + int(_value(src_device)),
                                           nbytes, stream)


def h200_pair() -> FakeMachine:
    """Two H200 SXM on one NVSwitch baseboard: Gen5 x16 to the host (~53 GB/s pinned), NVLink between."""
    return FakeMachine(
        devices=[FakeDevice("NVIDIA H200", "00000000:18:00.0", total_bytes=143 * 1024**3, h2d_gbps=53.0, d2h_gbps=54.5),
                 FakeDevice("NVIDIA H200", "00000000:2A:00.0", total_bytes=143 * 1024**3, h2d_gbps=53.0, d2h_gbps=54.5)],
        can_access={(0, 1), (1, 0)}, peer_enabled_gbps={(0, 1): 370.0, (1, 0): 370.0}, peer_disabled_gbps=21.0,
    )


# Used by the child-process tests through K3DIAG_PROBE_LIBRARY=tests.probe.fake_gpu:<function>.
def cuda_h200_pair() -> tuple[FakeCudaLibrary, str]:
    return FakeCudaLibrary(h200_pair()), "nvidia"


def cuda_hanging() -> tuple[FakeCudaLibrary, str]:
    machine = h200_pair()
    machine.events_never_finish = True
    return FakeCudaLibrary(machine), "nvidia"


def cuda_slow_h2d() -> tuple[FakeCudaLibrary, str]:
    """GPU1's host link delivers a third of what its Gen5 x16 class gives; P2P slower than staging."""
    machine = h200_pair()
    machine.devices[1].h2d_gbps = 17.0
    machine.devices[1].d2h_gbps = 18.0
    machine.peer_enabled_gbps = {(0, 1): 12.0, (1, 0): 12.0}
    return FakeCudaLibrary(machine), "nvidia"


class _StuckCuda(FakeCudaLibrary):
    def cuInit(self, flags: int) -> int:  # a driver call that never returns (a GPU off the bus)
        import time

        time.sleep(3600)
        return self.SUCCESS


def cuda_stuck() -> tuple[FakeCudaLibrary, str]:
    return _StuckCuda(h200_pair()), "nvidia"
