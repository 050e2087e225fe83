"""Bytes per parameter for the storage formats checkpoints and engines use, scales included.

A quantized tensor costs its packed values plus one scale per group: MXFP4 stores 4-bit values
and one 8-bit shared exponent per 32 values (0.5 + 1/32 bytes), compressed-tensors INT4 with
group 32 stores a BF16 scale per 32 values (0.5 + 2/32), DeepSeek's FP8 stores one FP32 scale per
128x128 block. Getting these right is what makes the K3 and K2 Thinking figures come out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class DtypeInfo:
    name: str
    bytes_per_param: float
    description: str


DTYPES: dict[str, DtypeInfo] = {
    d.name: d
    for d in (
        DtypeInfo("fp32", 4.0, "32-bit float"),
        DtypeInfo("bf16", 2.0, "bfloat16"),
        DtypeInfo("fp16", 2.0, "float16"),
        DtypeInfo("fp8", 1.0, "FP8 (E4M3) with per-tensor or per-channel scales"),
        DtypeInfo("fp8-block128", 1.0 + 4.0 / (128 * 128), "FP8 with one FP32 scale per 128x128 block (DeepSeek-V3, Kimi K2)"),
        DtypeInfo("int8", 1.0 + 2.0 / 128, "INT8 weights, BF16 scale per 128 values"),
        DtypeInfo("int4-g128", 0.5 + 2.0 / 128, "INT4 weights, BF16/FP16 scale per 128 values (AWQ/GPTQ default)"),
        DtypeInfo("int4-g32", 0.5 + 2.0 / 32, "INT4 weights, BF16 scale per 32 values (Kimi K2 Thinking, compressed-tensors)"),
        DtypeInfo("mxfp4", 0.5 + 1.0 / 32, "MXFP4: 4-bit E2M1 values, one 8-bit E8M0 scale per 32 values"),
        DtypeInfo("nvfp4", 0.5 + 1.0 / 16, "NVFP4: 4-bit values, one FP8 scale per 16 values"),
        DtypeInfo("mlx-q4", 0.5 + 4.0 / 64, "MLX 4-bit affine, FP16 scale and bias per 64 values"),
        DtypeInfo("mlx-q8", 1.0 + 4.0 / 64, "MLX 8-bit affine, FP16 scale and bias per 64 values"),
    )
}

# What people type, mapped to the formats above.
DTYPE_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "e4m3": "fp8",
    "float8": "fp8",
    "fp8-block": "fp8-block128",
    "int4": "int4-g128",
    "w4a16": "int4-g128",
    "awq": "int4-g128",
    "gptq": "int4-g128",
    "q4": "mlx-q4",
    "fp4": "mxfp4",
    "mxfp4-g32": "mxfp4",
}


# Integer formats with any group size a quantization config may name: int4-g64, int8-g32...
_INT_GROUP_RE = re.compile(r"^int(4|8)-g(\d+)$")


def canonical_dtype(name: str) -> str | None:
    """The format name for what a user typed, or None when it is not one we know."""
    key = name.strip().lower().replace("_", "-")
    key = DTYPE_ALIASES.get(key, key)
    if key in DTYPES:
        return key
    match = _INT_GROUP_RE.match(key)
    if match and int(match.group(2)) > 0:
        return key
    return None


@lru_cache(maxsize=512)
def bytes_per_param(name: str) -> float:
    """Storage bytes per parameter of a format (a pure function of the name: asked ~30,000 times per plan)."""
    canonical = canonical_dtype(name)
    if canonical is None:
        raise KeyError(name)
    if canonical in DTYPES:
        return DTYPES[canonical].bytes_per_param
    match = _INT_GROUP_RE.match(canonical)
    assert match is not None
    bits, group = int(match.group(1)), int(match.group(2))
    return bits / 8 + 2.0 / group  # BF16/FP16 scale per group


def known_dtype_names() -> list[str]:
    return sorted(DTYPES)
