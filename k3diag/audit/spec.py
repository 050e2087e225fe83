"""The purchase spec (`--expect spec.toml`): what the order promised, checked line by line.

    [gpu]
    count = 8              # GPUs delivered
    model = "H100"         # every GPU's name contains this (case, spaces and dashes ignored)
    pcie_gen = 5           # every GPU's link can run at least this generation
    pcie_width = 16        # every GPU's link runs at least this wide, now
    nvlinks = 18           # every GPU pair has at least this many NVLinks (NV18)
    memory_gib = 80        # every GPU has at least this much memory (5% tolerance for reserved memory)

    [nic]
    count = 8              # NICs (as `nvidia-smi topo -m` lists them)
    gpu_nic_path = "PXB"   # every GPU reaches a NIC over this path class or a better one
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import FAIL, PASS, UNKNOWN, SpecCheck
from k3diag.audit.facts import attr
from k3diag.model.topology import PCIE_PATH_ORDER, nvlink_count, path_rank

_KNOWN = {
    "gpu": {"count": int, "model": str, "pcie_gen": int, "pcie_width": int, "nvlinks": int, "memory_gib": (int, float)},
    "nic": {"count": int, "gpu_nic_path": str},
}
MAX_SPEC_BYTES = 256 * 1024


class SpecError(Exception):
    """A spec file that cannot be used; `str()` says what is wrong and how to fix it."""


@dataclass
class Spec:
    gpu_count: int | None = None
    gpu_model: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlinks: int | None = None
    memory_gib: float | None = None
    nic_count: int | None = None
    gpu_nic_path: str | None = None


def _toml_loads(text: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib.loads(text)


def parse_spec(text: str, name: str = "spec.toml") -> Spec:
    try:
        data = _toml_loads(text)
    except ValueError as exc:
        if type(exc) is ValueError:  # not the reader's TOMLDecodeError (a subclass): CPython's 4,300-digit limit
            raise SpecError(f"{name} holds a number of more than 4,300 digits, which no spec value has; see "
                            "`docs/audit.md` for the format") from None
        raise SpecError(f"{name} is not valid TOML ({exc}); see `docs/audit.md` for the format") from None
    except Exception as exc:  # anything else the reader raises
        raise SpecError(f"{name} is not valid TOML ({exc}); see `docs/audit.md` for the format") from None
    spec = Spec()
    for section, value in data.items():
        if not isinstance(value, dict) and section not in _KNOWN:  # `count = 8` written above any [section]
            raise SpecError(f"{name}: `{section} = ` stands outside a section; every key goes under [gpu] or "
                            "[nic] ([gpu] on a line of its own, then count = 8)")
        if section not in _KNOWN:
            raise SpecError(f"{name}: unknown section [{section}]; known sections are [gpu] and [nic]")
        if not isinstance(value, dict):
            raise SpecError(f"{name}: {section} must be a table ([{section}])")
        for key, item in value.items():
            expected = _KNOWN[section].get(key)
            if expected is None:
                known = ", ".join(sorted(_KNOWN[section]))
                raise SpecError(f"{name}: unknown key {section}.{key}; known keys in [{section}]: {known}")
            if isinstance(item, bool) or not isinstance(item, expected):
                kind = "a whole number" if expected == int else "a string" if expected == str else "a number"
                raise SpecError(f"{name}: {section}.{key} must be {kind}, not {item!r}")
            # TOML takes nan, inf and -8: no count, width or size is one (nan compared as neither more nor less)
            if expected != str and (item < 0 or not math.isfinite(item) or (key == "memory_gib" and item == 0)):
                kind = "a positive number" if key == "memory_gib" else "a whole number of at least 0"
                raise SpecError(f"{name}: {section}.{key} must be {kind}, not {item!r}")
    gpu = data.get("gpu", {})
    nic = data.get("nic", {})
    spec.gpu_count = gpu.get("count")
    spec.gpu_model = gpu.get("model")
    spec.pcie_gen = gpu.get("pcie_gen")
    spec.pcie_width = gpu.get("pcie_width")
    spec.nvlinks = gpu.get("nvlinks")
    spec.memory_gib = float(gpu["memory_gib"]) if "memory_gib" in gpu else None
    spec.nic_count = nic.get("count")
    path = nic.get("gpu_nic_path")
    if path is not None:
        path = path.strip().upper()
        if path not in PCIE_PATH_ORDER and nvlink_count(path) is None:
            raise SpecError(f"{name}: nic.gpu_nic_path must be one of {', '.join(PCIE_PATH_ORDER)}, not {path!r}")
        spec.gpu_nic_path = path
    return spec


def load_spec(path: Path) -> Spec:
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"could not read the spec {path} ({exc.strerror or exc}); check the path") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{path} is larger than a purchase spec can be ({MAX_SPEC_BYTES // 1024} KiB)")
    from k3diag.parse.text import detect_encoding

    # Notepad and PowerShell save with a byte order mark or as UTF-16; TOML itself is UTF-8.
    try:
        text = data.decode(detect_encoding(data))
    except UnicodeDecodeError:
        raise SpecError(f"{path} is not UTF-8 text; save the spec as UTF-8 TOML") from None
    return parse_spec(text.lstrip("\ufeff"), Path(path).name)


def _squash(text: str) -> str:
    return re.sub(r"[\s_-]+", "", text).lower()


def check_spec(spec: Spec, machine: Any, evidence: Any = ()) -> list[SpecCheck]:
    checks: list[SpecCheck] = []
    gpus = facts.gpus(machine)
    if spec.gpu_count is not None:
        actual = len(gpus)
        refs = [ref for gpu in gpus[:2] for ref in facts.refs_of(gpu)[:1]]
        checks.append(SpecCheck(
            item="gpu.count", expected=str(spec.gpu_count), actual=str(actual) if gpus else "no GPU in the evidence",
            verdict=(PASS if actual == spec.gpu_count else FAIL) if gpus else UNKNOWN,
            evidence=facts.dedupe_refs(refs, 3), request=None if gpus else "nvidia-smi -L ; nvidia-smi topo -m",
        ))
    if spec.gpu_model is not None:
        names = [attr(gpu, "name") for gpu in gpus]
        known = [name for name in names if name]
        wrong = [f"{gpu.label}: {attr(gpu, 'name')}" for gpu in gpus
                 if attr(gpu, "name") and _squash(spec.gpu_model) not in _squash(attr(gpu, "name"))]
        if not known:
            verdict, actual = UNKNOWN, "GPU names not in the evidence"
        elif wrong:
            verdict, actual = FAIL, "; ".join(wrong[:4])
        else:
            verdict, actual = (PASS if len(known) == len(gpus) else UNKNOWN), ", ".join(sorted(set(known)))
        checks.append(SpecCheck(
            item="gpu.model", expected=spec.gpu_model, actual=actual, verdict=verdict,
            evidence=facts.dedupe_refs([ref for gpu in gpus for ref in facts.refs_of(gpu)[:1]], 3),
            request="nvidia-smi -L ; nvidia-smi -q" if verdict == UNKNOWN else None,
        ))
    if spec.pcie_gen is not None:
        checks.append(_per_gpu_check(
            "gpu.pcie_gen", f"Gen{spec.pcie_gen} or newer", gpus, machine,
            lambda gpu: _gen_capable(gpu, machine), lambda value: value >= spec.pcie_gen, "Gen{}",  # type: ignore[operator]
        ))
    if spec.pcie_width is not None:
        checks.append(_per_gpu_check(
            "gpu.pcie_width", f"x{spec.pcie_width} now", gpus, machine,
            lambda gpu: _width_now(gpu, machine), lambda value: value >= spec.pcie_width, "x{}",  # type: ignore[operator]
        ))
    if spec.memory_gib is not None:
        checks.append(_per_gpu_check(
            "gpu.memory_gib", f"{spec.memory_gib:g} GiB", gpus, machine,
            lambda gpu: (attr(gpu, "memory_total_mib") / 1024) if attr(gpu, "memory_total_mib") else None,
            lambda value: value >= spec.memory_gib * 0.95, "{:.0f} GiB",  # type: ignore[operator]
        ))
    if spec.nvlinks is not None:
        checks.append(_nvlink_check(spec.nvlinks, gpus, machine))
    if spec.nic_count is not None:
        counted = facts.network_nics(machine, evidence)
        if counted is None:
            verdict = UNKNOWN
        elif counted.count >= spec.nic_count:
            verdict = PASS
        else:  # fewer than expected: a failure when the NICs were listed, unsettled when only NCCL named some
            verdict = UNKNOWN if counted.lower_bound else FAIL
        checks.append(SpecCheck(
            item="nic.count", expected=str(spec.nic_count),
            actual=counted.text() if counted else "no NIC in the evidence", verdict=verdict,
            evidence=counted.refs if counted else [],
            request="nvidia-smi topo -m ; ibv_devinfo" if verdict == UNKNOWN else None,
        ))
    if spec.gpu_nic_path is not None:
        checks.append(_nic_path_check(spec.gpu_nic_path, gpus, machine))
    return checks


def _gen_capable(gpu: Any, machine: Any) -> int | None:
    pcie = attr(gpu, "pcie")
    candidates = [attr(pcie, "gen_max")]
    host = attr(pcie, "gen_host_max")
    if host:
        candidates = [min(c, host) if c else host for c in candidates]
    value = next((c for c in candidates if c), None)
    if value is None:
        device = facts.pci_device(machine, attr(gpu, "bus_id"))
        link = attr(device, "link") if device is not None else None
        value = facts.gen_from_speed(attr(link, "cap_speed_gts")) if link is not None else None
    return value


def _width_now(gpu: Any, machine: Any) -> int | None:
    value = attr(attr(gpu, "pcie"), "width_current")
    if value is None:
        device = facts.pci_device(machine, attr(gpu, "bus_id"))
        link = attr(device, "link") if device is not None else None
        value = attr(link, "sta_width") if link is not None else None
    return value


def _per_gpu_check(item: str, expected: str, gpus: list[Any], machine: Any, read, ok, fmt: str) -> SpecCheck:
    bad: list[str] = []
    unknown: list[str] = []
    values: list[str] = []
    refs: list = []
    good_ref: list = []
    for gpu in gpus:
        value = read(gpu)
        if value is None:
            unknown.append(gpu.label)
            continue
        values.append(fmt.format(value))
        if not ok(value):
            bad.append(f"{gpu.label} {fmt.format(value)}")
            refs.append(attr(attr(gpu, "pcie"), "source"))
        elif not good_ref:
            good_ref.append(attr(attr(gpu, "pcie"), "source"))
    if not gpus or len(unknown) == len(gpus):
        return SpecCheck(item=item, expected=expected, actual="not in the evidence", verdict=UNKNOWN,
                         request="nvidia-smi -q ; sudo lspci -vv")
    if bad:
        return SpecCheck(item=item, expected=expected, actual="; ".join(bad[:6]), verdict=FAIL,
                         evidence=facts.dedupe_refs(refs, 4))
    refs = refs + good_ref
    actual = "all " + ", ".join(sorted(set(values)))
    if unknown:
        return SpecCheck(item=item, expected=expected, actual=actual + f" (unknown: {', '.join(unknown)})",
                         verdict=UNKNOWN, evidence=facts.dedupe_refs(refs, 2), request="nvidia-smi -q")
    return SpecCheck(item=item, expected=expected, actual=actual, verdict=PASS, evidence=facts.dedupe_refs(refs, 2))


def _nvlink_check(wanted: int, gpus: list[Any], machine: Any) -> SpecCheck:
    links = facts.gpu_links(machine)
    expected = f"NV{wanted} or more between every GPU pair" if wanted else "no NVLink required"
    if wanted <= 0:
        return SpecCheck(item="gpu.nvlinks", expected=expected, actual="-", verdict=PASS)
    if not links:
        return SpecCheck(item="gpu.nvlinks", expected=expected, actual="no topology matrix in the evidence",
                         verdict=UNKNOWN, request="nvidia-smi topo -m ; nvidia-smi nvlink -s")
    worst = min(links.values(), key=lambda link: link.nvlinks or 0)
    short = [f"{a}-{b} {link.path}" for (a, b), link in links.items() if (link.nvlinks or 0) < wanted]
    if short:
        return SpecCheck(item="gpu.nvlinks", expected=expected, actual="; ".join(short[:6]) +
                         (" ..." if len(short) > 6 else ""), verdict=FAIL,
                         evidence=facts.dedupe_refs([worst.source], 2))
    return SpecCheck(item="gpu.nvlinks", expected=expected, actual=f"at least {worst.path} on every pair",
                     verdict=PASS, evidence=facts.dedupe_refs([worst.source], 2))


def _nic_path_check(wanted: str, gpus: list[Any], machine: Any) -> SpecCheck:
    expected = f"{wanted} or better from every GPU to a NIC"
    best: dict[str, Any] = {}
    for (gpu, _nic), link in facts.nic_links(machine).items():
        if gpu not in best or path_rank(link.path) < path_rank(best[gpu].path):
            best[gpu] = link
    if not best:
        return SpecCheck(item="nic.gpu_nic_path", expected=expected, actual="no GPU-NIC paths in the evidence",
                         verdict=UNKNOWN, request="nvidia-smi topo -m")
    bad = [f"{gpu} {link.path}" for gpu, link in sorted(best.items()) if path_rank(link.path) > path_rank(wanted)]
    missing = [gpu.label for gpu in gpus if gpu.label not in best]
    if bad:
        return SpecCheck(item="nic.gpu_nic_path", expected=expected, actual="; ".join(bad[:8]), verdict=FAIL,
                         evidence=facts.dedupe_refs([best[b.split()[0]].source for b in bad], 3))
    actual = "worst " + max((link.path for link in best.values()), key=path_rank)
    if missing:
        return SpecCheck(item="nic.gpu_nic_path", expected=expected, actual=actual + f" (unknown: {', '.join(missing)})",
                         verdict=UNKNOWN, request="nvidia-smi topo -m")
    return SpecCheck(item="nic.gpu_nic_path", expected=expected, actual=actual, verdict=PASS,
                     evidence=facts.dedupe_refs([next(iter(best.values())).source], 2))
