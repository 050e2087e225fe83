"""`GpuApi` over the CUDA driver API (`libcuda.so.1`), called through ctypes.

Only driver entry points are used (no runtime library, no compiler): primary contexts, which
the CUDA runtime shares, so a probe sees peer access the way applications do. Versioned names
(`cuMemAlloc_v2`) are the ones the CUDA 11+ headers map the plain names to.

`library` may be any object with these C functions as attributes: the real `ctypes.CDLL`, or a
test's fake function table with the same names and calling conventions.
"""

from __future__ import annotations

import ctypes
from typing import Any

from k3diag.collect.probe.api import CtypesBindings, GpuApiError, GpuUnavailable

LIBRARY_NAME = "libcuda.so.1"

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_SYSTEM_NOT_READY = 802
CU_MEMHOSTALLOC_PORTABLE = 0x01
CU_STREAM_NON_BLOCKING = 0x01
CU_EVENT_DEFAULT = 0x0

_u64 = ctypes.c_uint64
_ptr = ctypes.c_void_p
_int = ctypes.c_int
_uint = ctypes.c_uint
_size = ctypes.c_size_t
_out = ctypes.POINTER

# name -> argtypes; every function returns CUresult (int).
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (_uint,),
    "cuDriverGetVersion": (_out(_int),),
    "cuDeviceGetCount": (_out(_int),),
    "cuDeviceGet": (_out(_int), _int),
    "cuDeviceGetName": (ctypes.c_char_p, _int, _int),
    "cuDeviceGetPCIBusId": (ctypes.c_char_p, _int, _int),
    "cuDeviceCanAccessPeer": (_out(_int), _int, _int),
    "cuDevicePrimaryCtxRetain": (_out(_ptr), _int),
    "cuDevicePrimaryCtxRelease_v2": (_int,),
    "cuCtxSetCurrent": (_ptr,),
    "cuCtxEnablePeerAccess": (_ptr, _uint),
    "cuCtxDisablePeerAccess": (_ptr,),
    "cuMemGetInfo_v2": (_out(_size), _out(_size)),
    "cuMemAlloc_v2": (_out(_u64), _size),
    "cuMemFree_v2": (_u64,),
    "cuMemHostAlloc": (_out(_ptr), _size, _uint),
    "cuMemFreeHost": (_ptr,),
    "cuStreamCreate": (_out(_ptr), _uint),
    "cuStreamDestroy_v2": (_ptr,),
    "cuEventCreate": (_out(_ptr), _uint),
    "cuEventDestroy_v2": (_ptr,),
    "cuEventRecord": (_ptr, _ptr),
    "cuEventQuery": (_ptr,),
    "cuEventElapsedTime": (_out(ctypes.c_float), _ptr, _ptr),
    "cuMemcpyHtoDAsync_v2": (_u64, _ptr, _size, _ptr),
    "cuMemcpyDtoHAsync_v2": (_ptr, _u64, _size, _ptr),
    "cuMemcpyPeerAsync": (_u64, _ptr, _u64, _ptr, _size, _ptr),
    "cuGetErrorName": (_int, _out(ctypes.c_char_p)),
}


def load_library() -> Any:
    """The real driver library, or GpuUnavailable with the reason."""
    try:
        return ctypes.CDLL(LIBRARY_NAME)
    except OSError as exc:
        raise GpuUnavailable(
            f"{LIBRARY_NAME} (the NVIDIA driver's CUDA library) could not be loaded ({exc}); "
            "no NVIDIA driver is installed here, or this container was started without the GPU driver mounted"
        ) from None


class CudaDriverApi(CtypesBindings):
    vendor = "nvidia"
    SIGNATURES = _SIGNATURES
    TOO_OLD = "this NVIDIA driver is too old for k3diag probe"

    def __init__(self, library: Any, library_name: str = LIBRARY_NAME) -> None:
        super().__init__(library, library_name)
        self._contexts: dict[int, int] = {}
        self._devices: dict[int, int] = {}

    # -- plumbing ---------------------------------------------------------------------------

    def _error_name(self, code: int) -> str | None:
        text = ctypes.c_char_p()
        try:
            if self._fn("cuGetErrorName")(code, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
                return text.value.decode("ascii", "replace")
        except Exception:
            return None
        return None

    def _device(self, ordinal: int) -> int:
        if ordinal not in self._devices:
            handle = ctypes.c_int()
            self._call("cuDeviceGet", ctypes.byref(handle), ordinal)
            self._devices[ordinal] = handle.value
        return self._devices[ordinal]

    def _context(self, ordinal: int) -> int:
        if ordinal not in self._contexts:
            ctx = ctypes.c_void_p()
            self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self._device(ordinal))
            self._contexts[ordinal] = ctx.value or 0
        return self._contexts[ordinal]

    def _current(self, ordinal: int) -> None:
        self._call("cuCtxSetCurrent", ctypes.c_void_p(self._context(ordinal)))

    # -- GpuApi -----------------------------------------------------------------------------

    def init(self) -> None:
        try:
            self._call("cuInit", 0)
        except GpuApiError as exc:
            if exc.code == CUDA_ERROR_NO_DEVICE:
                raise GpuUnavailable("the NVIDIA driver is loaded but reports no CUDA device (CUDA_ERROR_NO_DEVICE)") from None
            if exc.code == CUDA_ERROR_SYSTEM_NOT_READY:
                raise GpuUnavailable(
                    "CUDA is not initialized on this NVSwitch system (CUDA_ERROR_SYSTEM_NOT_READY, 802): "
                    "start nvidia-fabricmanager (`systemctl status nvidia-fabricmanager`)"
                ) from None
            raise GpuUnavailable(f"cuInit failed: {exc}") from None

    def driver_version(self) -> str | None:
        version = ctypes.c_int()
        try:
            self._call("cuDriverGetVersion", ctypes.byref(version))
        except GpuApiError:
            return None
        return f"{version.value // 1000}.{version.value % 1000 // 10}"

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._call("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def device_name(self, device: int) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buffer, 256, self._device(device))
        return buffer.value.decode("utf-8", "replace") or None

    def pci_bus_id(self, device: int) -> str | None:
        buffer = ctypes.create_string_buffer(64)
        self._call("cuDeviceGetPCIBusId", buffer, 64, self._device(device))
        return buffer.value.decode("ascii", "replace") or None

    def memory_info(self, device: int) -> tuple[int, int]:
        self._current(device)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def can_access_peer(self, device: int, peer: int) -> bool:
        flag = ctypes.c_int()
        self._call("cuDeviceCanAccessPeer", ctypes.byref(flag), self._device(device), self._device(peer))
        return bool(flag.value)

    def enable_peer_access(self, device: int, peer: int) -> None:
        self._current(device)
        self._call("cuCtxEnablePeerAccess", ctypes.c_void_p(self._context(peer)), 0,
                   ok=(CUDA_SUCCESS, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED))

    def disable_peer_access(self, device: int, peer: int) -> None:
        self._current(device)
        self._call("cuCtxDisablePeerAccess", ctypes.c_void_p(self._context(peer)),
                   ok=(CUDA_SUCCESS, CUDA_ERROR_PEER_ACCESS_NOT_ENABLED))

    def device_alloc(self, device: int, nbytes: int) -> int:
        self._current(device)
        pointer = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(pointer), nbytes)
        return pointer.value

    def device_free(self, device: int, pointer: int) -> None:
        self._current(device)
        self._call("cuMemFree_v2", pointer)

    def host_alloc(self, nbytes: int) -> int:
        self._current(0)  # pinned memory needs a current context; PORTABLE makes it pinned for all
        pointer = ctypes.c_void_p()
        self._call("cuMemHostAlloc", ctypes.byref(pointer), nbytes, CU_MEMHOSTALLOC_PORTABLE)
        return pointer.value or 0

    def host_free(self, pointer: int) -> None:
        self._call("cuMemFreeHost", ctypes.c_void_p(pointer))

    def stream_create(self, device: int) -> int:
        self._current(device)
        stream = ctypes.c_void_p()
        self._call("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
        return stream.value or 0

    def stream_destroy(self, device: int, stream: int) -> None:
        self._current(device)
        self._call("cuStreamDestroy_v2", ctypes.c_void_p(stream))

    def event_create(self, device: int) -> int:
        self._current(device)
        event = ctypes.c_void_p()
        self._call("cuEventCreate", ctypes.byref(event), CU_EVENT_DEFAULT)
        return event.value or 0

    def event_destroy(self, device: int, event: int) -> None:
        self._current(device)
        self._call("cuEventDestroy_v2", ctypes.c_void_p(event))

    def event_record(self, device: int, event: int, stream: int) -> None:
        self._current(device)
        self._call("cuEventRecord", ctypes.c_void_p(event), ctypes.c_void_p(stream))

    def event_done(self, event: int) -> bool:
        code = self._call("cuEventQuery", ctypes.c_void_p(event), ok=(CUDA_SUCCESS, CUDA_ERROR_NOT_READY))
        return code == CUDA_SUCCESS

    def event_elapsed_ms(self, start: int, end: int) -> float:
        elapsed = ctypes.c_float()
        self._call("cuEventElapsedTime", ctypes.byref(elapsed), ctypes.c_void_p(start), ctypes.c_void_p(end))
        return float(elapsed.value)

    def copy_host_to_device(self, device: int, dst: int, src_host: int, nbytes: int, stream: int) -> None:
        self._current(device)
        self._call("cuMemcpyHtoDAsync_v2", dst, ctypes.c_void_p(src_host), nbytes, ctypes.c_void_p(stream))

    def copy_device_to_host(self, device: int, dst_host: int, src: int, nbytes: int, stream: int) -> None:
        self._current(device)
        self._call("cuMemcpyDtoHAsync_v2", ctypes.c_void_p(dst_host), src, nbytes, ctypes.c_void_p(stream))

    def copy_peer(self, dst_device: int, dst: int, src_device: int, src: int, nbytes: int, stream: int) -> None:
        # The stream belongs to the source device's context, which must be current.
        self._current(src_device)
        self._call("cuMemcpyPeerAsync", dst, ctypes.c_void_p(self._context(dst_device)), src,
                   ctypes.c_void_p(self._context(src_device)), nbytes, ctypes.c_void_p(stream))

    def close(self) -> None:
        for ordinal in list(self._contexts):
            try:
                self._call("cuDevicePrimaryCtxRelease_v2", self._device(ordinal))
            except (GpuApiError, GpuUnavailable):
                pass
        self._contexts.clear()
