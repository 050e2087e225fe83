"""Serving results, engine logs and vLLM's P2P cache into the machine, so an audit or `serving --from`
finds them in a bundle. They are kept as the readers made them (`Machine.extras`): a serving result
describes a deployment on the machine, not a fact about its hardware."""

from __future__ import annotations

from k3diag.model.machine import InputRecord, Machine

RUNS = "serving_runs"
ENGINES = "serving_engines"
P2P_CACHES = "vllm_p2p_caches"


def merge_serving(result, machine: Machine, record: InputRecord | None = None) -> None:
    runs = getattr(result, "runs", None) or []
    machine.extras.setdefault(RUNS, []).extend(runs)
    engine = getattr(result, "engine", None)  # a server log pasted with the printed result
    if engine is not None:
        merge_engine_log(engine, machine, record)


def merge_engine_log(result, machine: Machine, record: InputRecord | None = None) -> None:
    engine = getattr(result, "engine", None)
    if engine is not None:
        machine.extras.setdefault(ENGINES, []).append(engine)
    nccl = getattr(result, "nccl", None)
    if nccl is not None:
        from k3diag.join.merge_nccl import merge_nccl_log

        merge_nccl_log(nccl, machine, record)
    serving = getattr(result, "serving", None)  # a printed result pasted with the server log
    if serving is not None:
        merge_serving(serving, machine, record)


def merge_p2p_cache(result, machine: Machine, record: InputRecord | None = None) -> None:
    cache = getattr(result, "cache", None)
    if cache is not None:
        machine.extras.setdefault(P2P_CACHES, []).append(cache)
