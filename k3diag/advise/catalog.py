"""The model and GPU catalogs (package data files), name resolution and config.json import.

Unknown names are answered with the closest known ones (difflib), so a typo costs one retry.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from k3diag.advise.architecture import DTYPE_GROUPS, ModelSpec
from k3diag.advise.dtypes import canonical_dtype
from k3diag.advise.hfconfig import import_config


class CatalogError(ValueError):
    """A name or file the user gave cannot be used; the message is one sentence for them."""


@dataclass(frozen=True)
class Fabric:
    kind: str  # nvlink | xgmi | pcie | unified
    generation: int | None = None
    links: int = 0
    per_link_gbs: float = 0.0  # one direction of one link


@dataclass(frozen=True)
class LinkClass:
    id: str
    label: str
    latency_us: float
    bandwidth_gbs: float | None = None  # fixed figure (network classes)
    pcie_efficiency: float | None = None  # fraction of the PCIe generation's x16 bandwidth


@dataclass
class GpuSpec:
    id: str
    name: str
    vendor: str
    memory_mib: int
    bandwidth_gbs: float
    bf16_tflops: float | None
    fp8_tflops: float | None
    gpus_per_node: int
    fabric: Fabric
    pcie_gen: int | None
    p2p: bool
    scale_out: str
    aliases: list[str] = field(default_factory=list)
    match: list[str] = field(default_factory=list)
    os_reserved_pct: float = 0.0
    cuda_graphs: bool = True
    source: str | None = None
    note: str | None = None

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


@dataclass
class GpuCatalog:
    gpus: list[GpuSpec]
    link_classes: dict[str, LinkClass]
    fabric_defaults: dict[str, dict[str, float]]
    pcie_x16_gbs: dict[int, float]


def _read_data(name: str) -> dict[str, Any]:
    text = resources.files("k3diag").joinpath("data", name).read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def gpu_catalog() -> GpuCatalog:
    raw = _read_data("gpus.json")
    gpus = []
    for entry in raw["gpus"]:
        fabric = entry.get("fabric") or {"kind": "pcie"}
        gpus.append(
            GpuSpec(
                id=entry["id"],
                name=entry["name"],
                vendor=entry["vendor"],
                memory_mib=int(entry["memory_mib"]),
                bandwidth_gbs=float(entry["bandwidth_gbs"]),
                bf16_tflops=entry.get("bf16_tflops"),
                fp8_tflops=entry.get("fp8_tflops"),
                gpus_per_node=int(entry.get("gpus_per_node", 8)),
                fabric=Fabric(
                    kind=fabric["kind"],
                    generation=fabric.get("generation"),
                    links=int(fabric.get("links", 0)),
                    per_link_gbs=float(fabric.get("per_link_gbs", 0.0)),
                ),
                pcie_gen=entry.get("pcie_gen"),
                p2p=bool(entry.get("p2p", True)),
                scale_out=entry.get("scale_out", "ethernet-100g"),
                aliases=list(entry.get("aliases", [])),
                match=list(entry.get("match", [])),
                os_reserved_pct=float(entry.get("os_reserved_pct", 0.0)),
                cuda_graphs=bool(entry.get("cuda_graphs", True)),
                source=entry.get("source"),
                note=entry.get("note"),
            )
        )
    classes = {
        key: LinkClass(
            id=key,
            label=value["label"],
            latency_us=float(value["latency_us"]),
            bandwidth_gbs=value.get("bandwidth_gbs"),
            pcie_efficiency=value.get("pcie_efficiency"),
        )
        for key, value in raw["link_classes"].items()
    }
    pcie = {int(k): float(v) for k, v in raw["pcie_gbs_per_direction_x16"].items()}
    return GpuCatalog(gpus=gpus, link_classes=classes, fabric_defaults=raw["fabric_defaults"], pcie_x16_gbs=pcie)


@lru_cache(maxsize=1)
def _model_entries() -> tuple[dict[str, Any], ...]:
    return tuple(_read_data("models.json")["models"])


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _close(name: str, candidates: list[str]) -> list[str]:
    return difflib.get_close_matches(_norm(name), candidates, n=4, cutoff=0.5)


def model_names() -> list[str]:
    return [entry["id"] for entry in _model_entries()]


def gpu_names() -> list[str]:
    return [gpu.id for gpu in gpu_catalog().gpus]


def _apply_dtypes(spec_dtypes: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    dtypes = dict(spec_dtypes)
    default = overrides.get("default")
    if default:
        for group in DTYPE_GROUPS:
            dtypes[group] = default
    for group, value in overrides.items():
        if group != "default":
            dtypes[group] = value
    return dtypes


def model_from_entry(entry: dict[str, Any]) -> ModelSpec:
    imported = import_config(entry["config"])
    if imported.arch is None:  # a catalog entry that does not import is a packaging bug
        raise CatalogError(f"catalog entry {entry['id']} is incomplete: {imported.missing or imported.problems}")
    dtypes = _apply_dtypes(imported.dtypes, entry.get("dtypes") or {})
    return ModelSpec(
        id=entry["id"],
        name=entry["name"],
        arch=imported.arch,
        dtypes=dtypes,
        kv_cache_dtype=entry.get("kv_cache_dtype", "bf16"),
        linear_state_dtype=entry.get("linear_state_dtype", "fp32"),
        conv_state_dtype=entry.get("conv_state_dtype", "bf16"),
        total_params_claimed=entry.get("total_params"),
        source=entry.get("source"),
        # The catalog states its own assumptions; the importer's generic notes would only repeat them.
        assumptions=list(entry.get("assumptions", [])),
        aliases=list(entry.get("aliases", [])),
        hf_id=entry.get("hf_id"),
    )


def find_model(name: str) -> ModelSpec:
    wanted = _norm(name)
    names: list[str] = []
    for entry in _model_entries():
        keys = [_norm(entry["id"]), _norm(entry["name"]), *(_norm(a) for a in entry.get("aliases", []))]
        if wanted in keys:
            return model_from_entry(entry)
        names.extend(keys)
    close = _close(name, names)
    hint = f" Close names: {', '.join(close)}." if close else ""
    known = ", ".join(model_names())
    raise CatalogError(f"unknown model {name!r}.{hint} Known models: {known}; or pass --config path/to/config.json.")


def find_gpu(name: str) -> GpuSpec:
    wanted = _norm(name)
    names: list[str] = []
    for gpu in gpu_catalog().gpus:
        keys = [_norm(gpu.id), _norm(gpu.name), *(_norm(a) for a in gpu.aliases)]
        if wanted in keys:
            return gpu
        names.extend(keys)
    close = _close(name, names)
    hint = f" Close names: {', '.join(close)}." if close else ""
    raise CatalogError(f"unknown GPU {name!r}.{hint} Known GPUs: {', '.join(gpu_names())}.")


def gpu_from_device_name(device_name: str | None, memory_mib: int | None = None) -> GpuSpec | None:
    """The catalog GPU a tool-reported name ('NVIDIA H100 80GB HBM3', 'AMD Instinct MI355X') means."""
    if not device_name:
        return None
    lowered = device_name.lower()
    best: tuple[int, GpuSpec] | None = None
    for gpu in gpu_catalog().gpus:
        for pattern in gpu.match:
            if pattern.lower() in lowered:
                # The longest matching pattern wins: 'H100 PCIe' before 'H100'.
                score = len(pattern)
                if best is None or score > best[0]:
                    best = (score, gpu)
    if best is None:
        return None
    gpu = best[1]
    if memory_mib and gpu.id == "a100" and memory_mib < 60000:
        return None  # A100 40GB: not in the catalog; better unknown than wrong by half
    return gpu


# The biggest Hugging Face config.json files (multimodal ones) are tens of KB.
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def read_small_text(path: Path, what: str, limit: int, error: type[Exception]) -> str:
    """A small text file the user named (config.json, spec.toml), or `error` with one sentence.

    Saved from Windows, such files may be UTF-16 or carry a byte order mark; both are decoded.
    """
    from k3diag.parse.text import detect_encoding, looks_binary

    path = Path(path)
    if path.is_dir():
        raise error(f"{path} is a folder, not {what} file; give the file inside it.")
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{path} does not exist.") from None
    except OSError as exc:
        raise error(f"cannot read {path} ({exc.strerror or exc}); check the path and its permissions.") from None
    if len(data) > limit:
        raise error(f"{path} is over {limit // 1024 // 1024} MiB, far larger than {what} file can be; check the path.")
    encoding = detect_encoding(data)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        text = None
    if text is None or looks_binary(text.encode("utf-8")):
        raise error(f"{path} is not text ({what} is UTF-8 text); check the path.")
    return text


def load_config_file(path: Path) -> tuple[ModelSpec, list[str]]:
    """A ModelSpec from a Hugging Face config.json; returns it with the assumptions made."""
    text = read_small_text(path, "a config.json", MAX_CONFIG_BYTES, CatalogError)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}).") from None
    except ValueError:  # CPython's limit on the digits int() takes (4,300): the reader refuses such a number
        raise CatalogError(f"{path} holds a number of more than 4,300 digits, which no model has (a damaged "
                           "file?).") from None
    imported = import_config(raw)
    if imported.arch is None:
        if imported.missing:
            raise CatalogError(
                f"{path} lacks {', '.join(imported.missing)}, which the memory ledger cannot do without."
            )
        raise CatalogError(f"{path} cannot be used: {'; '.join(imported.problems)}.")
    name = raw.get("_name_or_path") if isinstance(raw, dict) else None
    if name:
        label = str(name)
    elif path.name == "config.json" and path.parent.name:
        label = path.parent.name  # a downloaded model folder is named after the model
    else:
        label = path.stem
    spec = ModelSpec(
        id=_norm(label),
        name=label,
        arch=imported.arch,
        dtypes=imported.dtypes,
        source=str(path),
        assumptions=list(imported.assumptions),
        hf_id=str(name) if name else None,
    )
    return spec, list(imported.assumptions)


def parse_dtype_overrides(text: str | None) -> dict[str, str]:
    """`fp8` -> every linear group; `routed_experts=int4,attention=fp8` -> per group."""
    from k3diag.advise.architecture import LINEAR_GROUPS

    if not text:
        return {}
    overrides: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" in part:
            group, _, value = part.partition("=")
            group = group.strip().lower().replace("-", "_")
            if group not in DTYPE_GROUPS:
                close = difflib.get_close_matches(group, DTYPE_GROUPS, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise CatalogError(
                    f"unknown tensor group {group!r}{hint}; groups are {', '.join(DTYPE_GROUPS)}."
                )
            groups: tuple[str, ...] = (group,)
        else:
            value = part
            groups = LINEAR_GROUPS
        canonical = canonical_dtype(value)
        if canonical is None:
            from k3diag.advise.dtypes import known_dtype_names

            raise CatalogError(f"unknown dtype {value.strip()!r}; use one of {', '.join(known_dtype_names())} or int4-gN.")
        for group in groups:
            overrides[group] = canonical
    return overrides


def with_overrides(spec: ModelSpec, dtype_overrides: dict[str, str], kv_dtype: str | None) -> ModelSpec:
    """A copy of the spec with the user's storage formats applied."""
    from dataclasses import replace

    dtypes = dict(spec.dtypes)
    dtypes.update(dtype_overrides)
    kv = spec.kv_cache_dtype
    if kv_dtype:
        canonical = canonical_dtype(kv_dtype)
        if canonical is None:
            raise CatalogError(f"unknown KV cache dtype {kv_dtype!r}; use bf16, fp16, fp8 or fp32.")
        kv = canonical
    return replace(spec, dtypes=dtypes, kv_cache_dtype=kv)
