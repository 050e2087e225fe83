"""The vLLM server's own log: the layout it ran and what it did about communication.

Lines read (vLLM 0.4 to 0.11 print them as `LEVEL MM-DD HH:MM:SS [file.py:N] message`, worker
processes prefixed with `(VllmWorkerProcess pid=N)` or `(EngineCore_DP0 pid=N)`):
- `Initializing an LLM engine (vX) with config: model='M', ..., tensor_parallel_size=4,
  pipeline_parallel_size=1, disable_custom_all_reduce=False, ...` (V0; V1 says `a V1 LLM engine`);
- `non-default args: {'model': 'M', 'tensor_parallel_size': 2, ...}` and `args: Namespace(...)`;
- `vLLM API server version X`;
- `Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed`,
  `... because it's not supported on more than two PCIe-only GPUs`, `... due to an unsupported world
  size: 3`, `... because this process group spans across nodes` (custom_all_reduce.py);
- `reading GPU P2P access cache from .../gpu_p2p_access_cache_for_0,1,2,3.json`;
- `vLLM is using nccl==2.21.5`; `CUDA_VISIBLE_DEVICES=0,1` wherever the log shows it.
NCCL_DEBUG lines in the same log are handed to the NCCL log parser, unchanged, and a printed `Serving
Benchmark Result` block pasted with the log to `summary_text` (which hands the log lines around its blocks
here): whichever of the two detection picks, both are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.serving import EngineLog
from k3diag.model.source import SourceRef
from k3diag.parse.serving.common import parallel_size

FORMAT = "vllm-engine-log"
_ENGINE_RE = re.compile(r"Initializing an? (?:V\d )?LLM engine \(v(?P<version>[^)\s]+)\) with config:")
_API_VERSION_RE = re.compile(r"vLLM API server version (?P<version>\S+)")
_CUSTOM_AR_RE = re.compile(r"Custom allreduce is disabled (?:because |due to )(?P<reason>.+?)(?:\.\s|\.?$)")
_P2P_CACHE_RE = re.compile(r"gpu_p2p_access_cache_for_(?P<devices>[\d,]+)\.json")
_NCCL_VERSION_RE = re.compile(r"vLLM is using nccl==(?P<version>[\w.+-]+)")
_VISIBLE_RE = re.compile(r"CUDA_VISIBLE_DEVICES['\"]?\s*[=:]\s*['\"]?(?P<ids>\d+(?:\s*,\s*\d+)*)")
_SIZE_NAMES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size"}
_INT_KEYS = {name: re.compile(rf"['\"]?{key}['\"]?\s*[=:]\s*(\d+)") for name, key in _SIZE_NAMES.items()}
_CLI_KEYS = {
    "tp": re.compile(r"--tensor-parallel-size[= ](\d+)|(?<![\w-])-tp[= ](\d+)"),
    "pp": re.compile(r"--pipeline-parallel-size[= ](\d+)|(?<![\w-])-pp[= ](\d+)"),
    "dp": re.compile(r"--data-parallel-size[= ](\d+)|(?<![\w-])-dp[= ](\d+)"),
}
_MODEL_RE = re.compile(r"(?:config: |[{(, ])['\"]?model['\"]?\s*[=:]\s*['\"](?P<model>[^'\"]+)['\"]")
_DISABLE_AR_RE = re.compile(r"disable_custom_all_reduce['\"]?\s*[=:]\s*(True|False|true|false)")
# The records whose values matter and run long enough to be wrapped when a log is copied from a narrow
# window (a 140-column viewer cut `tensor_parallel_size=2` into `tensor_parallel_si` + `ze=2`).
_WRAPPED_RECORD_RE = re.compile(r"with config:|non-default args|Custom allreduce is disabled|args: Namespace\(")
# What starts a record of its own: a process prefix `(APIServer pid=N)`, a level, an NCCL line, a timestamp.
_RECORD_START_RE = re.compile(
    r"^\s*(?:\([^()]{0,80}pid=\d+\)|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|\S+:\d+:\d+ \[\d+\] NCCL|"
    r"\d{4}-\d\d-\d\d[T ]\d|\[\d{4}-\d\d-\d\d|[$#>] )")
MAX_WRAPPED_LINES = 60
_MARKERS_RE = re.compile(
    r"Initializing an? (?:V\d )?LLM engine|vLLM API server version|Custom allreduce is disabled|"
    r"custom_all_reduce\.py|gpu_p2p_access_cache_for_|vLLM is using nccl|VllmWorkerProcess|EngineCore_DP\d|"
    r"\[(?:api_server|arg_utils|llm_engine|core|parallel_state|pynccl)\.py:\d+\]"
)


def sniff(text: str) -> float:
    # Kinds of vLLM line, not lines: an NCCL log with a few vLLM lines interleaved stays the NCCL parser's
    # (it scores 0.95), a server log with its configuration and workers is this one's (and keeps its NCCL lines).
    kinds = {_kind(match.group(0)) for match in _MARKERS_RE.finditer(text[:262144])}
    if len(kinds) >= 2:
        return 0.97
    return 0.7 if kinds else 0.0


def _kind(marker: str) -> str:
    if marker.startswith("[") or "custom_all_reduce" in marker:
        return "file:" + marker.strip("[]").split(":")[0]
    return re.sub(r"\d+", "", marker)


@dataclass
class EngineLogResult:
    engine: EngineLog
    nccl: object | None = None  # a k3diag.parse.nccl_log.NcclLogResult when the log holds NCCL lines
    # a k3diag.parse.serving.common.ServingResult when the paste also holds a printed `Serving Benchmark
    # Result` block (the server's log and the client's result pasted together)
    serving: object | None = None
    warnings: list[str] = field(default_factory=list)


def parse(section, input_name: str, *, results: bool = True) -> EngineLogResult:
    """`results`: also read the printed result blocks the paste holds (`summary_text`, which reads the
    engine lines around its blocks with `results=False`)."""
    engine = EngineLog(engine="vllm", input=input_name)
    result = EngineLogResult(engine=engine)
    has_nccl = False
    lines = section.text.split("\n")
    for offset, raw in enumerate(lines):
        line_no = section.first_line + offset
        if "NCCL INFO" in raw or "NCCL WARN" in raw:
            has_nccl = True
        if len(raw) > 65536:
            raw = raw[:65536]
        if _WRAPPED_RECORD_RE.search(raw):
            raw = _unwrapped(lines, offset, raw)
        _read_line(engine, raw, line_no, input_name, result.warnings)
    if engine.custom_allreduce is None and engine.tp is not None and engine.tp > 1:
        if engine.custom_allreduce_explicit_off:
            engine.custom_allreduce = "disabled"
            engine.custom_allreduce_reason = "disable_custom_all_reduce=True in the engine configuration"
        elif _saw_engine_start(engine):
            # vLLM warns whenever it turns custom all-reduce off on its own; silence here means it stayed on,
            # unless the log was cut before the workers initialised, which the caller cannot know.
            engine.custom_allreduce = "enabled"
            engine.custom_allreduce_reason = "no 'Custom allreduce is disabled' warning in the log"
    if has_nccl:
        try:
            from k3diag.parse import nccl_log

            result.nccl = nccl_log.parse(section, input_name)
        except Exception as exc:  # the NCCL part is a bonus; the engine facts stand on their own
            result.warnings.append(f"{input_name}: the NCCL lines in this log could not be read ({type(exc).__name__})")
    if results:
        from k3diag.parse.serving import summary_text

        if summary_text.sniff(section.text) >= 0.5:
            served = summary_text.parse(section, input_name, engine_lines=False)
            result.serving = served if served.runs else None
            result.warnings.extend(served.warnings)
    if engine.tp is None and engine.custom_allreduce is None and engine.version is None:
        result.warnings.append(f"{input_name}: no vLLM engine configuration line (tensor_parallel_size) was found")
    return result


def _unwrapped(lines: list[str], offset: int, raw: str) -> str:
    """A record a terminal or a viewer hard-wrapped (`...tensor_parallel_si` / `ze=2, ...`): its
    physical lines joined up to the next record, so a key cut in two is read whole."""
    parts = [raw]
    size = len(raw)
    for following in lines[offset + 1:offset + 1 + MAX_WRAPPED_LINES]:
        if not following.strip() or _RECORD_START_RE.match(following) or size > 65536:
            break
        parts.append(following)
        size += len(following)
    return "".join(parts)


def _saw_engine_start(engine: EngineLog) -> bool:
    return any("LLM engine" in ref.text or "Worker ready" in ref.text for ref in engine.evidence)


def _ref(input_name: str, line_no: int, raw: str) -> SourceRef:
    text = raw.strip()
    if len(text) > 300:
        text = text[:297] + "..."
    return SourceRef(input=input_name, line=line_no, text=text)


def _read_line(engine: EngineLog, raw: str, line_no: int, input_name: str, warnings: list[str]) -> None:
    match = _ENGINE_RE.search(raw)
    if match:
        engine.version = engine.version or match.group("version")
        engine.evidence.append(_ref(input_name, line_no, raw))
    match = _API_VERSION_RE.search(raw)
    if match and engine.version is None:
        engine.version = match.group("version")
    config_line = bool(match) or "with config:" in raw or "non-default args" in raw or "Namespace(" in raw \
        or "vllm serve" in raw or "api_server" in raw
    if config_line:
        for name, pattern in _INT_KEYS.items():
            found = pattern.search(raw)
            if found and getattr(engine, name) is None:
                size = parallel_size(found.group(1), f"{input_name}:{line_no}: {_SIZE_NAMES[name]}", warnings)
                if size is None:
                    continue
                setattr(engine, name, size)
                if _ref(input_name, line_no, raw) not in engine.evidence:
                    engine.evidence.append(_ref(input_name, line_no, raw))
        model = _MODEL_RE.search(raw)
        if model and engine.model is None:
            engine.model = model.group("model")
        disable = _DISABLE_AR_RE.search(raw)
        if disable and disable.group(1).lower() == "true":
            engine.custom_allreduce_explicit_off = True
    if "vllm serve" in raw or "vllm.entrypoints" in raw:
        for name, pattern in _CLI_KEYS.items():
            found = pattern.search(raw)
            if found and getattr(engine, name) is None:
                size = parallel_size(next(g for g in found.groups() if g),
                                     f"{input_name}:{line_no}: {_SIZE_NAMES[name]}", warnings)
                if size is None:
                    continue
                setattr(engine, name, size)
                engine.evidence.append(_ref(input_name, line_no, raw))
        if "--disable-custom-all-reduce" in raw:
            engine.custom_allreduce_explicit_off = True
    match = _CUSTOM_AR_RE.search(raw)
    if match and engine.custom_allreduce != "disabled":
        engine.custom_allreduce = "disabled"
        engine.custom_allreduce_reason = match.group("reason").strip().rstrip(".")
        engine.evidence.append(_ref(input_name, line_no, raw))
    match = _P2P_CACHE_RE.search(raw)
    if match and engine.cuda_visible_devices is None:
        engine.cuda_visible_devices = [int(x) for x in match.group("devices").split(",") if x]
        engine.evidence.append(_ref(input_name, line_no, raw))
    match = _VISIBLE_RE.search(raw)
    if match and engine.cuda_visible_devices is None:
        engine.cuda_visible_devices = [int(x) for x in re.findall(r"\d+", match.group("ids"))]
        engine.evidence.append(_ref(input_name, line_no, raw))
    match = _NCCL_VERSION_RE.search(raw)
    if match and engine.nccl_version is None:
        engine.nccl_version = match.group("version")
    if "Worker ready" in raw and not any("Worker ready" in ref.text for ref in engine.evidence):
        engine.evidence.append(_ref(input_name, line_no, raw))
