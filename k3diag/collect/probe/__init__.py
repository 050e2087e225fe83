"""`k3diag probe`: active measurement of host<->GPU and GPU<->GPU copies through the vendor's own
driver library, called with ctypes (no compiler, no new dependency).

- `api.py`: the calls the prober needs (`GpuApi`), independent of the vendor;
- `cuda.py`, `hip.py`: that interface over `libcuda.so.1` (CUDA driver API) and `libamdhip64.so`;
- `measure.py`: the measurement itself (timing arithmetic, data check, deadline, busy-GPU guard);
- `child.py`: runs a measurement in a child process so a hung driver call cannot outlive the deadline.

Tests inject a fake *library* (a function table with the C functions' names and calling
conventions) into the real bindings, so everything above the C boundary runs as on a GPU host.
"""
