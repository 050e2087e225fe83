"""vLLM's cache of its own GPU peer-to-peer test: `gpu_p2p_access_cache_for_<CUDA_VISIBLE_DEVICES>.json`.

`vllm/distributed/device_communicators/custom_all_reduce_utils.py` (`gpu_p2p_access_check`) tests
every ordered pair of visible devices once, by copying through peer memory in a subprocess, and
writes `{"0->0": true, "0->1": false, ...}` with `json.dump(..., indent=4)` under VLLM_CACHE_ROOT
(`~/.cache/vllm`, older versions `~/.config/vllm`). Keys are indices into CUDA_VISIBLE_DEVICES, which
only the file's name records; the content alone says logical indices.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from k3diag.model.serving import P2PCache
from k3diag.model.source import SourceRef

FORMAT = "vllm-p2p-cache"
_PAIR_KEY_RE = re.compile(r"^(\d+)->(\d+)$")
_NAME_RE = re.compile(r"gpu_p2p_access_cache_for_([\d,]+)\.json")


def sniff(text: str) -> float:
    head = text.lstrip()[:4096]
    if not head.startswith("{"):
        return 0.0
    keys = re.findall(r'"(\d+->\d+)"\s*:\s*(?:true|false)', head)
    return 0.95 if len(keys) >= 2 else 0.0


@dataclass
class P2PCacheResult:
    cache: P2PCache | None
    warnings: list[str] = field(default_factory=list)


def parse(section, input_name: str) -> P2PCacheResult:
    warnings: list[str] = []
    try:
        data = json.loads(section.text)
    except (ValueError, RecursionError) as exc:
        pairs = {(int(a), int(b)): v == "true" for a, b, v in
                 re.findall(r'"(\d+)->(\d+)"\s*:\s*(true|false)', section.text)}
        reason = getattr(exc, "msg", "nested too deeply")
        warnings.append(f"{input_name}: not valid JSON ({reason}); {len(pairs)} pairs were read from what is there")
        data = None
    else:
        pairs = {}
        if isinstance(data, dict):
            for key, value in data.items():
                match = _PAIR_KEY_RE.match(str(key))
                if match and isinstance(value, bool):
                    pairs[(int(match.group(1)), int(match.group(2)))] = value
    if not pairs:
        return P2PCacheResult(cache=None, warnings=warnings + [f"{input_name}: no GPU pair entries"])
    name = _NAME_RE.search(input_name)
    devices = [int(x) for x in name.group(1).split(",") if x] if name else None
    if devices is None:
        warnings.append(
            f"{input_name}: the file name does not carry CUDA_VISIBLE_DEVICES "
            "(gpu_p2p_access_cache_for_0,1,2,3.json); pairs are read as logical device indices"
        )
    # Quote the first pair that failed (the reason the file matters), else the first pair.
    lines = section.text.split("\n")
    index = next((i for i, line in enumerate(lines) if "->" in line and "false" in line), None)
    if index is None:
        index = next((i for i, line in enumerate(lines) if "->" in line), 0)
    cache = P2PCache(input=input_name, devices=devices, pairs=pairs,
                     source=SourceRef(input=input_name, line=section.first_line + index, text=lines[index].strip()))
    return P2PCacheResult(cache=cache, warnings=warnings)
