"""Live AMD GPU readings through the amdsmi Python library, recorded as evidence.

`amdsmi` is optional (`pip install k3diag[amd]`): the PyPI wheel must match the host's ROCm,
and `import amdsmi` itself fails (a `KeyError` on `libamd_smi.so`, or an `OSError` from the
loader) on a host without ROCm. So the library is imported here, inside a function, and any
failure becomes one sentence on the evidence instead of an exception.

Readings, per GPU: bus id, name, NUMA node, PCIe link (current/max speed and width); per
ordered GPU pair: link type and hops (`amdsmi_topo_get_link_type`), weight
(`amdsmi_topo_get_link_weight`), P2P accessibility (`amdsmi_is_P2P_accessible`) and min/max
bandwidth (`amdsmi_get_minmax_bandwidth_between_processors`). A call that fails records its
error next to the value it would have given; the rest is still read.

Tests replay recorded readings through `FakeAmdSmiBackend`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from k3diag.evidence import Evidence
from k3diag.model import json_text

SCHEMA = "k3diag.amdsmi-readings/1"
EVIDENCE_NAME = "amdsmi-readings.json"
FORMAT_HINT = "amdsmi-readings"

LIBRARY_MISSING = (
    "ROCm's libamd_smi.so was not found: install ROCm or `pip install k3diag[amd]` matching your ROCm version"
)
PACKAGE_MISSING = (
    "the amdsmi Python package is not installed, so AMD GPUs were not read live: "
    "`pip install k3diag[amd]` with the amdsmi version matching your ROCm"
)


class AmdSmiUnavailable(Exception):
    """amdsmi cannot be used on this host; the message is the one sentence a user reads."""


class AmdSmiBackend(Protocol):
    """What k3diag asks amdsmi. Handles are opaque; every method may raise."""

    def processors(self) -> list[Any]: ...

    def bus_id(self, handle: Any) -> str: ...

    def name(self, handle: Any) -> str | None: ...

    def numa_node(self, handle: Any) -> int: ...

    def link_type(self, src: Any, dst: Any) -> tuple[str | None, int | None, int | None]:
        """(XGMI | PCIE | None, raw enum value, hops)."""
        ...

    def link_weight(self, src: Any, dst: Any) -> int: ...

    def p2p_accessible(self, src: Any, dst: Any) -> bool: ...

    def minmax_bandwidth(self, src: Any, dst: Any) -> tuple[int, int]: ...

    def pcie_info(self, handle: Any) -> dict: ...

    def library_version(self) -> str | None: ...

    def close(self) -> None: ...


# -- the real library -----------------------------------------------------------------------


class RealAmdSmiBackend:
    """amdsmi itself. `open()` imports and initialises it or raises AmdSmiUnavailable."""

    def __init__(self, module: Any) -> None:
        self._amdsmi = module
        self._link_names = _link_type_names(module)

    @classmethod
    def open(cls) -> "RealAmdSmiBackend":
        try:
            import amdsmi  # noqa: PLC0415  (heavy, optional, and may fail on import)
        except ImportError as exc:
            if "libamd_smi" in str(exc):
                raise AmdSmiUnavailable(LIBRARY_MISSING) from None
            raise AmdSmiUnavailable(PACKAGE_MISSING) from None
        except (KeyError, OSError):
            # amdsmi looks libamd_smi.so up through ROCM_PATH/ld paths at import time.
            raise AmdSmiUnavailable(LIBRARY_MISSING) from None
        except Exception as exc:  # a broken install must not take the report down
            reason = f"importing amdsmi failed ({type(exc).__name__}: {exc}); {LIBRARY_MISSING}"
            raise AmdSmiUnavailable(reason) from None
        try:
            amdsmi.amdsmi_init()
        except Exception as exc:
            raise AmdSmiUnavailable(
                f"amdsmi could not initialise ({_error_text(exc)}): is the amdgpu driver loaded? "
                "check `lsmod | grep amdgpu` and that this user is in the render and video groups"
            ) from None
        return cls(amdsmi)

    def processors(self) -> list[Any]:
        return list(self._amdsmi.amdsmi_get_processor_handles())

    def bus_id(self, handle: Any) -> str:
        return str(self._amdsmi.amdsmi_get_gpu_device_bdf(handle))

    def name(self, handle: Any) -> str | None:
        try:
            asic = self._amdsmi.amdsmi_get_gpu_asic_info(handle)
            name = asic.get("market_name")
            if name and name != "N/A":
                return str(name)
        except Exception:
            pass
        board = self._amdsmi.amdsmi_get_gpu_board_info(handle)
        name = board.get("product_name")
        return str(name) if name and name != "N/A" else None

    def numa_node(self, handle: Any) -> int:
        return int(self._amdsmi.amdsmi_topo_get_numa_node_number(handle))

    def link_type(self, src: Any, dst: Any) -> tuple[str | None, int | None, int | None]:
        answer = self._amdsmi.amdsmi_topo_get_link_type(src, dst)
        raw = answer.get("type")
        raw_int = int(raw) if raw is not None else None
        return self._link_names.get(raw_int) if raw_int is not None else None, raw_int, answer.get("hops")

    def link_weight(self, src: Any, dst: Any) -> int:
        return int(self._amdsmi.amdsmi_topo_get_link_weight(src, dst))

    def p2p_accessible(self, src: Any, dst: Any) -> bool:
        return bool(self._amdsmi.amdsmi_is_P2P_accessible(src, dst))

    def minmax_bandwidth(self, src: Any, dst: Any) -> tuple[int, int]:
        # The name changed across releases (and once carried a typo).
        for name in (
            "amdsmi_get_minmax_bandwidth_between_processors",
            "amdsmi_get_minmax_bandwith_between_processors",
            "amdsmi_get_minmax_bandwidth",
        ):
            function = getattr(self._amdsmi, name, None)
            if function is not None:
                answer = function(src, dst)
                return int(answer["min_bandwidth"]), int(answer["max_bandwidth"])
        raise AttributeError("this amdsmi has no min/max bandwidth call")

    def pcie_info(self, handle: Any) -> dict:
        return dict(self._amdsmi.amdsmi_get_pcie_info(handle))

    def library_version(self) -> str | None:
        try:
            version = self._amdsmi.amdsmi_get_lib_version()
            if isinstance(version, dict):
                return ".".join(str(version.get(key)) for key in ("major", "minor", "release") if key in version)
            return str(version)
        except Exception:
            return None

    def close(self) -> None:
        try:
            self._amdsmi.amdsmi_shut_down()
        except Exception:
            pass


def _link_type_names(module: Any) -> dict[int, str]:
    """Enum value -> XGMI/PCIE for this amdsmi build: the numbering changed between releases
    (AMDSMI_LINK_TYPE_XGMI and _PCIE were swapped), so it is read from the module, never assumed."""
    names: dict[int, str] = {}
    wrapper = getattr(module, "amdsmi_wrapper", None)
    for source in (wrapper, module):
        if source is None:
            continue
        for attr, label in (("AMDSMI_LINK_TYPE_XGMI", "XGMI"), ("AMDSMI_LINK_TYPE_PCIE", "PCIE")):
            value = getattr(source, attr, None)
            if isinstance(value, int):
                names.setdefault(value, label)
    for enum_name in ("AmdSmiLinkType", "AmdSmiIoLinkType"):
        enum = getattr(module, enum_name, None)
        if enum is None:
            continue
        for member in enum:
            label = "XGMI" if "XGMI" in member.name else "PCIE" if "PCI" in member.name else None
            if label is not None:
                names.setdefault(int(member.value), label)
    if not names:
        names = {1: "PCIE", 2: "XGMI"}  # the original rsmi/amdsmi io-link numbering
    return names


def _error_text(exc: BaseException) -> str:
    for getter in ("get_error_info", "get_error_code"):
        function = getattr(exc, getter, None)
        if callable(function):
            try:
                return str(function())
            except Exception:
                pass
    return f"{type(exc).__name__}: {exc}".strip()


# -- fake backend ----------------------------------------------------------------------------


class RecordedAmdSmiError(Exception):
    """A failure replayed from recorded readings; reads back as the text that was recorded."""

    def get_error_info(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class FakeAmdSmiBackend:
    """Replays readings recorded by `read_amdsmi` (or written by hand for a test). A value
    recorded as an error raises again, so the error path is exercised too."""

    readings: dict

    @classmethod
    def from_file(cls, path: str | Path) -> "FakeAmdSmiBackend":
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def _gpu(self, handle: int) -> dict:
        return self.readings["processors"][handle]

    def _pair(self, src: int, dst: int) -> dict:
        src_index = self._gpu(src).get("index", src)
        dst_index = self._gpu(dst).get("index", dst)
        for pair in self.readings.get("pairs", []):
            if pair.get("src") == src_index and pair.get("dst") == dst_index:
                return pair
        raise LookupError(f"no recorded reading for GPU{src_index} -> GPU{dst_index}")

    @staticmethod
    def _value(record: dict, key: str) -> Any:
        error = (record.get("errors") or {}).get(key)
        if error is not None:
            raise RecordedAmdSmiError(error)
        return record.get(key)

    def processors(self) -> list[Any]:
        return list(range(len(self.readings.get("processors", []))))

    def bus_id(self, handle: int) -> str:
        return self._value(self._gpu(handle), "bus_id")

    def name(self, handle: int) -> str | None:
        return self._value(self._gpu(handle), "name")

    def numa_node(self, handle: int) -> int:
        return self._value(self._gpu(handle), "numa_node")

    def link_type(self, src: int, dst: int) -> tuple[str | None, int | None, int | None]:
        pair = self._pair(src, dst)
        self._value(pair, "link_type")
        return pair.get("link_type"), pair.get("link_type_raw"), pair.get("hops")

    def link_weight(self, src: int, dst: int) -> int:
        return self._value(self._pair(src, dst), "weight")

    def p2p_accessible(self, src: int, dst: int) -> bool:
        return self._value(self._pair(src, dst), "p2p_accessible")

    def minmax_bandwidth(self, src: int, dst: int) -> tuple[int, int]:
        pair = self._pair(src, dst)
        self._value(pair, "bandwidth")
        return pair.get("bandwidth_min"), pair.get("bandwidth_max")

    def pcie_info(self, handle: int) -> dict:
        summary = self._value(self._gpu(handle), "pcie") or {}
        # Back to the shape amdsmi_get_pcie_info returns, so replay takes the real path.
        return {
            "pcie_static": {
                "max_pcie_width": summary.get("width_max"),
                "max_pcie_speed": summary.get("speed_max"),
                "pcie_interface_version": summary.get("gen_max"),
            },
            "pcie_metric": {"pcie_width": summary.get("width_current"), "pcie_speed": summary.get("speed_current")},
        }

    def library_version(self) -> str | None:
        return (self.readings.get("library") or {}).get("version")

    def close(self) -> None:
        return None


# -- reading ---------------------------------------------------------------------------------


def read_amdsmi(backend: AmdSmiBackend) -> dict:
    """Every reading k3diag wants, as a JSON-ready dict. Never raises for one failed call."""
    readings: dict = {"schema": SCHEMA, "library": {"version": _quiet(backend.library_version)}, "processors": [],
                      "pairs": [], "errors": []}
    try:
        handles = backend.processors()
    except Exception as exc:
        readings["errors"].append(f"amdsmi_get_processor_handles failed: {_error_text(exc)}")
        return readings
    for index, handle in enumerate(handles):
        gpu: dict = {"index": index, "errors": {}}
        _record(gpu, "bus_id", lambda: backend.bus_id(handle))
        _record(gpu, "name", lambda: backend.name(handle))
        _record(gpu, "numa_node", lambda: backend.numa_node(handle))
        _record(gpu, "pcie", lambda: _pcie_summary(backend.pcie_info(handle)))
        readings["processors"].append(gpu)
    for src_index, src in enumerate(handles):
        for dst_index, dst in enumerate(handles):
            if src_index == dst_index:
                continue
            pair: dict = {"src": src_index, "dst": dst_index, "errors": {}}
            try:
                name, raw, hops = backend.link_type(src, dst)
                pair.update(link_type=name, link_type_raw=raw, hops=hops)
            except Exception as exc:
                pair["errors"]["link_type"] = _error_text(exc)
            _record(pair, "weight", lambda: backend.link_weight(src, dst))
            _record(pair, "p2p_accessible", lambda: backend.p2p_accessible(src, dst))
            try:
                low, high = backend.minmax_bandwidth(src, dst)
                pair.update(bandwidth_min=low, bandwidth_max=high)
            except Exception as exc:
                pair["errors"]["bandwidth"] = _error_text(exc)
            readings["pairs"].append(pair)
    return readings


def _record(target: dict, key: str, call: Callable[[], Any]) -> None:
    try:
        target[key] = call()
    except Exception as exc:
        target[key] = None
        target["errors"][key] = _error_text(exc)


def _quiet(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:
        return None


def _pcie_summary(info: dict) -> dict:
    """amdsmi_get_pcie_info -> the link state k3diag models. Speeds are MT/s on current
    releases and GT/s on some older ones; both are kept as printed plus the PCIe generation."""
    static = info.get("pcie_static") or {}
    metric = info.get("pcie_metric") or {}
    speed_max = _number(static.get("max_pcie_speed"))
    speed_now = _number(metric.get("pcie_speed"))
    return {
        "width_max": _number(static.get("max_pcie_width")),
        "width_current": _number(metric.get("pcie_width")),
        "speed_max": speed_max,
        "speed_current": speed_now,
        "gen_max": _generation(static.get("pcie_interface_version")) or pcie_generation(speed_max),
        "gen_current": pcie_generation(speed_now),
    }


def pcie_generation(speed: float | int | None) -> int | None:
    """PCIe generation from a link speed in MT/s (16000) or GT/s (16)."""
    if speed is None or speed <= 0 or speed >= 0xFFFF_FFFF:
        return None
    gts = speed / 1000 if speed > 200 else speed
    for generation, rate in ((1, 2.5), (2, 5.0), (3, 8.0), (4, 16.0), (5, 32.0), (6, 64.0), (7, 128.0)):
        if abs(gts - rate) < 0.6:
            return generation
    return None


def _generation(value: Any) -> int | None:
    """`pcie_interface_version` is 5, "Gen 4" or "PCIe 5.0" depending on the release."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value < 10 else None
    if isinstance(value, str):
        match = re.search(r"\d+", value)
        if match and 0 < int(match.group()) < 10:
            return int(match.group())
    return None


def _number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if value < 0xFFFF_FFFF else None
    if isinstance(value, str):
        digits = "".join(ch for ch in value if ch.isdigit())
        return int(digits) if digits else None
    return None


def collect_amdsmi(backend: AmdSmiBackend | None = None) -> Evidence:
    """The amdsmi readings of this host as evidence; an `error` sentence when amdsmi is unusable."""
    owned = backend is None
    if backend is None:
        try:
            backend = RealAmdSmiBackend.open()
        except AmdSmiUnavailable as exc:
            return Evidence(name=EVIDENCE_NAME, kind="reading", format_hint=FORMAT_HINT, error=str(exc))
    try:
        readings = read_amdsmi(backend)
    finally:
        if owned:
            backend.close()
    error = None
    if not readings["processors"]:
        error = "amdsmi found no AMD GPU on this host"
        if readings["errors"]:
            error += f" ({readings['errors'][0]})"
    return Evidence(
        name=EVIDENCE_NAME,
        kind="reading",
        format_hint=FORMAT_HINT,
        data=json_text.dumps(readings, indent=1, sort_keys=True).encode("utf-8"),
        error=error,
    )
