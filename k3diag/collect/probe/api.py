"""What the prober asks of a GPU driver, whichever vendor's: one method per operation.

Implementations raise `GpuApiError` (with the driver's own error name) on any failure, so the
prober can turn one failed measurement into one sentence and go on with the rest.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol


class GpuApiError(Exception):
    """A driver call failed; `call` is the C function, `code` the driver's error number."""

    def __init__(self, call: str, code: int, name: str | None = None) -> None:
        self.call = call
        self.code = code
        self.name = name
        super().__init__(f"{call} failed with {name or 'error'} ({code})")


class GpuUnavailable(Exception):
    """No usable GPU driver or device here; the message is one sentence a user can act on."""


class GpuApi(Protocol):
    vendor: str  # "nvidia" | "amd"
    library: str  # the shared library that was loaded, as named to the loader

    def init(self) -> None: ...

    def driver_version(self) -> str | None: ...

    def device_count(self) -> int: ...

    def device_name(self, device: int) -> str | None: ...

    def pci_bus_id(self, device: int) -> str | None: ...

    def memory_info(self, device: int) -> tuple[int, int]: ...  # (free, total) bytes

    def can_access_peer(self, device: int, peer: int) -> bool: ...

    def enable_peer_access(self, device: int, peer: int) -> None: ...  # device may then access peer's memory

    def disable_peer_access(self, device: int, peer: int) -> None: ...

    def device_alloc(self, device: int, nbytes: int) -> int: ...

    def device_free(self, device: int, pointer: int) -> None: ...

    def host_alloc(self, nbytes: int) -> int: ...  # pinned (page-locked) host memory, an address

    def host_free(self, pointer: int) -> None: ...

    def stream_create(self, device: int) -> int: ...

    def stream_destroy(self, device: int, stream: int) -> None: ...

    def event_create(self, device: int) -> int: ...

    def event_destroy(self, device: int, event: int) -> None: ...

    def event_record(self, device: int, event: int, stream: int) -> None: ...

    def event_done(self, event: int) -> bool: ...  # cuEventQuery: False while the work is pending

    def event_elapsed_ms(self, start: int, end: int) -> float: ...

    def copy_host_to_device(self, device: int, dst: int, src_host: int, nbytes: int, stream: int) -> None: ...

    def copy_device_to_host(self, device: int, dst_host: int, src: int, nbytes: int, stream: int) -> None: ...

    def copy_peer(self, dst_device: int, dst: int, src_device: int, src: int, nbytes: int, stream: int) -> None: ...

    def close(self) -> None: ...


class CtypesBindings:
    """What the CUDA and HIP bindings share: looking a C function up once (argument and result types set
    when it is a real ctypes function; a test's function table converts nothing) and turning a non-zero
    status into a GpuApiError named by the driver."""

    SIGNATURES: dict[str, tuple[Any, ...]] = {}
    TOO_OLD = "this driver is too old for k3diag probe"

    def __init__(self, library: Any, library_name: str) -> None:
        self.library = library_name
        self._lib = library
        self._functions: dict[str, Any] = {}

    def _fn(self, name: str) -> Any:
        fn = self._functions.get(name)
        if fn is None:
            try:
                fn = getattr(self._lib, name)
            except AttributeError:
                raise GpuUnavailable(f"{self.library} has no {name}: {self.TOO_OLD}") from None
            if hasattr(fn, "argtypes"):
                fn.argtypes = self.SIGNATURES[name]
                fn.restype = ctypes.c_int
            self._functions[name] = fn
        return fn

    def _error_name(self, code: int) -> str | None:
        return None

    def _call(self, name: str, *args: Any, ok: tuple[int, ...] = (0,)) -> int:
        code = int(self._fn(name)(*args))
        if code not in ok:
            raise GpuApiError(name, code, self._error_name(code))
        return code
