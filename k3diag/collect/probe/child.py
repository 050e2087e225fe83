"""The probe's own process: `python -m k3diag.collect.probe.child OPTIONS_JSON` prints one readings
document (JSON) on stdout.

A driver call can block for ever on a GPU that fell off the bus; in a child process the parent can
kill it (with its process group) when the deadline passes, and k3diag itself never initializes
CUDA, so nothing of the driver stays in the parent.

K3DIAG_PROBE_LIBRARY=module:function (for tests on hosts without a GPU) names a function that
returns `(library, vendor)`: a fake function table that the real bindings then drive.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from k3diag.collect.probe.api import GpuApi, GpuUnavailable
from k3diag.collect.probe.measure import ProbeOptions, empty_document, run_probe

LIBRARY_OVERRIDE_ENV = "K3DIAG_PROBE_LIBRARY"


def _wrap(library: Any, vendor: str, name: str | None = None) -> GpuApi:
    if vendor == "amd":
        from k3diag.collect.probe.hip import LIBRARY_NAMES, HipRuntimeApi

        return HipRuntimeApi(library, name or LIBRARY_NAMES[0])
    from k3diag.collect.probe.cuda import LIBRARY_NAME, CudaDriverApi

    return CudaDriverApi(library, name or LIBRARY_NAME)


def open_api(vendor: str = "auto") -> GpuApi:
    """The first vendor library that loads (NVIDIA, then AMD), or GpuUnavailable naming both reasons."""
    override = os.environ.get(LIBRARY_OVERRIDE_ENV)
    if override:
        module_name, _, function = override.partition(":")
        library, fake_vendor = getattr(importlib.import_module(module_name), function)()
        return _wrap(library, fake_vendor, f"{fake_vendor}-fake")
    reasons = []
    if vendor in ("auto", "nvidia"):
        from k3diag.collect.probe import cuda

        try:
            return _wrap(cuda.load_library(), "nvidia")
        except GpuUnavailable as exc:
            reasons.append(str(exc))
    if vendor in ("auto", "amd"):
        from k3diag.collect.probe import hip

        try:
            library, name = hip.load_library()
            return _wrap(library, "amd", name)
        except GpuUnavailable as exc:
            reasons.append(str(exc))
    raise GpuUnavailable("; ".join(reasons))


def main(argv: list[str]) -> int:
    settings = json.loads(argv[1]) if len(argv) > 1 else {}
    vendor = settings.pop("vendor", "auto")
    options = ProbeOptions(**settings)
    try:
        api = open_api(vendor)
    except GpuUnavailable as exc:
        doc = empty_document(None, None, options)
        doc["unavailable"] = str(exc)
    else:
        doc = run_probe(api, options)
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
