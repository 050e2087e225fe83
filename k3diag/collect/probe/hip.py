"""`GpuApi` over the HIP runtime (`libamdhip64.so`), called through ctypes.

HIP keeps a current device per thread instead of contexts, so each call first selects its device.
`library` may be the real `ctypes.CDLL` or a test's fake function table with the same C names.
"""

from __future__ import annotations

import ctypes
from typing import Any

from k3diag.collect.probe.api import CtypesBindings, GpuApiError, GpuUnavailable

LIBRARY_NAMES = ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so.5")

HIP_SUCCESS = 0
HIP_ERROR_NO_DEVICE = 100
HIP_ERROR_NOT_READY = 600
HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
HIP_ERROR_PEER_ACCESS_NOT_ENABLED = 705
HIP_HOST_MALLOC_PORTABLE = 0x1
HIP_STREAM_NON_BLOCKING = 0x1

_ptr = ctypes.c_void_p
_int = ctypes.c_int
_uint = ctypes.c_uint
_size = ctypes.c_size_t
_out = ctypes.POINTER

_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "hipInit": (_uint,),
    "hipDriverGetVersion": (_out(_int),),
    "hipGetDeviceCount": (_out(_int),),
    "hipDeviceGetName": (ctypes.c_char_p, _int, _int),
    "hipDeviceGetPCIBusId": (ctypes.c_char_p, _int, _int),
    "hipSetDevice": (_int,),
    "hipMemGetInfo": (_out(_size), _out(_size)),
    "hipDeviceCanAccessPeer": (_out(_int), _int, _int),
    "hipDeviceEnablePeerAccess": (_int, _uint),
    "hipDeviceDisablePeerAccess": (_int,),
    "hipMalloc": (_out(_ptr), _size),
    "hipFree": (_ptr,),
    "hipHostMalloc": (_out(_ptr), _size, _uint),
    "hipHostFree": (_ptr,),
    "hipStreamCreateWithFlags": (_out(_ptr), _uint),
    "hipStreamDestroy": (_ptr,),
    "hipEventCreate": (_out(_ptr),),
    "hipEventDestroy": (_ptr,),
    "hipEventRecord": (_ptr, _ptr),
    "hipEventQuery": (_ptr,),
    "hipEventElapsedTime": (_out(ctypes.c_float), _ptr, _ptr),
    "hipMemcpyHtoDAsync": (_ptr, _ptr, _size, _ptr),
    "hipMemcpyDtoHAsync": (_ptr, _ptr, _size, _ptr),
    "hipMemcpyPeerAsync": (_ptr, _int, _ptr, _int, _size, _ptr),
}


def load_library() -> tuple[Any, str]:
    errors = []
    for name in LIBRARY_NAMES:
        try:
            return ctypes.CDLL(name), name
        except OSError as exc:
            errors.append(str(exc))
    raise GpuUnavailable(
        "libamdhip64.so (the ROCm HIP runtime) could not be loaded; ROCm is not installed here "
        f"or not on the loader path ({errors[0] if errors else 'not found'})"
    )


class HipRuntimeApi(CtypesBindings):
    vendor = "amd"
    SIGNATURES = _SIGNATURES
    TOO_OLD = "this ROCm release is too old for k3diag probe"

    def __init__(self, library: Any, library_name: str = LIBRARY_NAMES[0]) -> None:
        super().__init__(library, library_name)

    def _error_name(self, code: int) -> str | None:
        try:
            fn = getattr(self._lib, "hipGetErrorName")
            if hasattr(fn, "argtypes"):
                fn.argtypes = (ctypes.c_int,)
                fn.restype = ctypes.c_char_p
            name = fn(code)
        except Exception:
            return None
        return name.decode("ascii", "replace") if isinstance(name, bytes) else None

    def _select(self, device: int) -> None:
        self._call("hipSetDevice", device)

    def init(self) -> None:
        try:
            self._call("hipInit", 0)
        except GpuApiError as exc:
            if exc.code == HIP_ERROR_NO_DEVICE:
                raise GpuUnavailable("the ROCm runtime is installed but finds no GPU (hipErrorNoDevice)") from None
            raise GpuUnavailable(f"hipInit failed: {exc}") from None

    def driver_version(self) -> str | None:
        version = ctypes.c_int()
        try:
            self._call("hipDriverGetVersion", ctypes.byref(version))
        except GpuApiError:
            return None
        return str(version.value)

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._call("hipGetDeviceCount", ctypes.byref(count))
        return count.value

    def device_name(self, device: int) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        self._call("hipDeviceGetName", buffer, 256, device)
        return buffer.value.decode("utf-8", "replace") or None

    def pci_bus_id(self, device: int) -> str | None:
        buffer = ctypes.create_string_buffer(64)
        self._call("hipDeviceGetPCIBusId", buffer, 64, device)
        return buffer.value.decode("ascii", "replace") or None

    def memory_info(self, device: int) -> tuple[int, int]:
        self._select(device)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("hipMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def can_access_peer(self, device: int, peer: int) -> bool:
        flag = ctypes.c_int()
        self._call("hipDeviceCanAccessPeer", ctypes.byref(flag), device, peer)
        return bool(flag.value)

    def enable_peer_access(self, device: int, peer: int) -> None:
        self._select(device)
        self._call("hipDeviceEnablePeerAccess", peer, 0, ok=(HIP_SUCCESS, HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED))

    def disable_peer_access(self, device: int, peer: int) -> None:
        self._select(device)
        self._call("hipDeviceDisablePeerAccess", peer, ok=(HIP_SUCCESS, HIP_ERROR_PEER_ACCESS_NOT_ENABLED))

    def device_alloc(self, device: int, nbytes: int) -> int:
        self._select(device)
        pointer = ctypes.c_void_p()
        self._call("hipMalloc", ctypes.byref(pointer), nbytes)
        return pointer.value or 0

    def device_free(self, device: int, pointer: int) -> None:
        self._select(device)
        self._call("hipFree", ctypes.c_void_p(pointer))

    def host_alloc(self, nbytes: int) -> int:
        pointer = ctypes.c_void_p()
        self._call("hipHostMalloc", ctypes.byref(pointer), nbytes, HIP_HOST_MALLOC_PORTABLE)
        return pointer.value or 0

    def host_free(self, pointer: int) -> None:
        self._call("hipHostFree", ctypes.c_void_p(pointer))

    def stream_create(self, device: int) -> int:
        self._select(device)
        stream = ctypes.c_void_p()
        self._call("hipStreamCreateWithFlags", ctypes.byref(stream), HIP_STREAM_NON_BLOCKING)
        return stream.value or 0

    def stream_destroy(self, device: int, stream: int) -> None:
        self._select(device)
        self._call("hipStreamDestroy", ctypes.c_void_p(stream))

    def event_create(self, device: int) -> int:
        self._select(device)
        event = ctypes.c_void_p()
        self._call("hipEventCreate", ctypes.byref(event))
        return event.value or 0

    def event_destroy(self, device: int, event: int) -> None:
        self._select(device)
        self._call("hipEventDestroy", ctypes.c_void_p(event))

    def event_record(self, device: int, event: int, stream: int) -> None:
        self._select(device)
        self._call("hipEventRecord", ctypes.c_void_p(event), ctypes.c_void_p(stream))

    def event_done(self, event: int) -> bool:
        return self._call("hipEventQuery", ctypes.c_void_p(event), ok=(HIP_SUCCESS, HIP_ERROR_NOT_READY)) == HIP_SUCCESS

    def event_elapsed_ms(self, start: int, end: int) -> float:
        elapsed = ctypes.c_float()
        self._call("hipEventElapsedTime", ctypes.byref(elapsed), ctypes.c_void_p(start), ctypes.c_void_p(end))
        return float(elapsed.value)

    def copy_host_to_device(self, device: int, dst: int, src_host: int, nbytes: int, stream: int) -> None:
        self._select(device)
        self._call("hipMemcpyHtoDAsync", ctypes.c_void_p(dst), ctypes.c_void_p(src_host), nbytes, ctypes.c_void_p(stream))

    def copy_device_to_host(self, device: int, dst_host: int, src: int, nbytes: int, stream: int) -> None:
        self._select(device)
        self._call("hipMemcpyDtoHAsync", ctypes.c_void_p(dst_host), ctypes.c_void_p(src), nbytes, ctypes.c_void_p(stream))

    def copy_peer(self, dst_device: int, dst: int, src_device: int, src: int, nbytes: int, stream: int) -> None:
        self._select(src_device)
        self._call("hipMemcpyPeerAsync", ctypes.c_void_p(dst), dst_device, ctypes.c_void_p(src), src_device, nbytes,
                   ctypes.c_void_p(stream))

    def close(self) -> None:
        """HIP has no per-process context to release; freed buffers and streams are enough."""
