"""Why a layout serves as it does, from the machine's own evidence.

For each measured layout (its TP group: the GPUs one replica runs on) this joins what the bundle
says about those GPUs: the worst link inside the group (`nvidia-smi topo -m`, or the PCIe tree),
peer-to-peer status (`topo -p2p`, vLLM's own P2P test cache), the transport NCCL actually used
(`NCCL_DEBUG=INFO` connections of a communicator with TP ranks), whether the engine ran its custom
all-reduce (vLLM log), and an estimate of the all-reduce time each decoded token costs on that link
(`k3diag.advise`'s ring model, passed in by the command: 2 all-reduces of the hidden state per layer)
against the measured TPOT. A fact the evidence lacks is `unknown`, with the command that would settle it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from k3diag.model.serving import EngineLog, P2PCache, ServingRun
from k3diag.model.source import SourceRef
from k3diag.model.topology import path_rank
from k3diag.model.words import counted

P2P_BROKEN = {"NS", "CNS", "GNS", "TNS", "DR"}


@dataclass
class Fact:
    name: str  # worst_link | p2p | nccl_transport | custom_allreduce | allreduce_per_token
    state: str  # good | bad | unknown
    text: str
    value: Any = None
    evidence: list[SourceRef] = field(default_factory=list)
    command: str | None = None  # what would settle an unknown

    def to_json(self) -> dict:
        return {"name": self.name, "state": self.state, "text": self.text, "value": self.value,
                "evidence": [ref.to_json() for ref in self.evidence[:4]], "command": self.command}


@dataclass
class LayoutExplanation:
    label: str
    tp: int | None
    gpus: list[int] | None
    facts: list[Fact] = field(default_factory=list)

    def fact(self, name: str) -> Fact | None:
        return next((f for f in self.facts if f.name == name), None)

    def to_json(self) -> dict:
        return {"label": self.label, "tp": self.tp, "gpus": self.gpus, "facts": [f.to_json() for f in self.facts]}


def representative_runs(runs: list[ServingRun]) -> list[ServingRun]:
    """One run per layout (the one with the lowest concurrency: closest to one token per step)."""
    chosen: dict[tuple, ServingRun] = {}
    for run in runs:
        key = run.layout.key()
        current = chosen.get(key)
        if current is None or (run.concurrency_per_replica or 1e9) < (current.concurrency_per_replica or 1e9):
            chosen[key] = run
    return list(chosen.values())


# estimate(run, machine, group, model_name) -> Fact: the per-token all-reduce time on the group's link. It needs
# the model's architecture and a link model, which live in k3diag.advise (a layer above this one); the command
# passes k3diag.advise.serving.estimate_allreduce in.
Estimator = Callable[[ServingRun, Any, "list[int] | None", "str | None"], "Fact"]


def explain(runs: list[ServingRun], machine: Any | None, model_name: str | None = None,
            estimate: Estimator | None = None) -> list[LayoutExplanation]:
    out: list[LayoutExplanation] = []
    engines: list[EngineLog] = list(getattr(machine, "extras", {}).get("serving_engines", [])) if machine else []
    caches: list[P2PCache] = list(getattr(machine, "extras", {}).get("vllm_p2p_caches", [])) if machine else []
    for run in sorted(representative_runs(runs), key=lambda r: (r.layout.tp or 0, r.layout.label())):
        layout = run.layout
        item = LayoutExplanation(label=layout.label(), tp=layout.tp, gpus=list(layout.gpus) if layout.gpus else None)
        group = _group(run)
        if group is None and machine is not None and layout.tp and layout.tp * (layout.pp or 1) == len(machine.gpus) \
                and (layout.dp or 1) == 1:
            # A group as large as the machine can only be every GPU.
            group = sorted(machine.gpus)
        if layout.tp == 1:
            item.facts.append(Fact("worst_link", "good", "TP1: one GPU per replica, no all-reduce between GPUs"))
        elif machine is None:
            item.facts.append(Fact("worst_link", "unknown", "no machine evidence given",
                                   command="k3diag serving RESULTS --from BUNDLE (a `k3diag collect` bundle)"))
        elif group is None:
            item.facts.append(Fact("worst_link", "unknown",
                                   "which GPUs the group ran on is not known",
                                   command="vllm bench serve ... --metadata tp=N gpus=0,1 (or a k3diag-run.toml)"))
        else:
            item.facts.append(_worst_link(machine, group))
            item.facts.append(_p2p(machine, group, caches))
            item.facts.append(_nccl(machine, layout.tp or len(group)))
        if layout.tp and layout.tp > 1:
            item.facts.append(_custom_allreduce(engines, run))
            if estimate is None:
                item.facts.append(Fact("allreduce_per_token", "unknown", "no all-reduce model was given to estimate with",
                                       command="k3diag serving RESULTS --from BUNDLE"))
            else:
                item.facts.append(estimate(run, machine, group, model_name))
        out.append(item)
    return out


def _group(run: ServingRun) -> list[int] | None:
    gpus = run.layout.gpus
    tp = run.layout.tp
    if not gpus or not tp:
        return None
    # A DP layout lists every replica's GPUs; its first TP group stands for all of them here.
    return list(gpus[:tp]) if len(gpus) >= tp else None


def _worst_link(machine: Any, group: list[int]) -> Fact:
    worst = None
    missing: list[tuple[int, int]] = []
    for i, a in enumerate(group):
        for b in group[i + 1:]:
            link = machine.link(f"GPU{a}", f"GPU{b}")
            if link is None or link.path is None:
                missing.append((a, b))
                continue
            if worst is None or path_rank(link.path) > path_rank(worst[0].path):
                worst = (link, (a, b))
    if worst is None:
        return Fact("worst_link", "unknown", f"no topology reading for GPUs {_ids(group)}",
                    command="nvidia-smi topo -m")
    link, (a, b) = worst
    refs = [link.source] if getattr(link, "source", None) else []
    state = "bad" if link.path in ("SYS", "PHB", "NODE") else "good"
    text = f"worst link inside the group: GPU{a}-GPU{b} {link.path}"
    if link.path == "SYS":
        text += " (crosses the CPU interconnect between sockets)"
    elif link.path in ("PHB", "NODE"):
        text += " (through the CPU's host bridge)"
    if missing:
        text += f"; {counted(len(missing), 'pair')} not in the topology reading"
    return Fact("worst_link", state, text, value=link.path, evidence=refs)


def _p2p(machine: Any, group: list[int], caches: list[P2PCache]) -> Fact:
    broken: list[str] = []
    ok = 0
    refs: list[SourceRef] = []
    for a in group:
        for b in group:
            if a == b:
                continue
            for status in machine.p2p_status(f"GPU{a}", f"GPU{b}"):
                if status.capability not in ("read", "write", "unknown"):
                    continue
                if status.status in P2P_BROKEN:
                    broken.append(f"GPU{a}->GPU{b} {status.status}")
                    if getattr(status, "source", None):
                        refs.append(status.source)
                elif status.status == "OK":
                    ok += 1
    tested = []
    failed_test: set[tuple[int, int]] = set()
    for cache in caches:
        inside = [(i, j) for (i, j) in cache.failed_pairs() if i in group and j in group]
        seen = {(cache.physical(i), cache.physical(j)) for (i, j) in cache.pairs}
        if all((a, b) in seen for a in group for b in group if a != b):
            tested.append(cache)
        failed_test.update(tuple(sorted(pair)) for pair in inside)
        if inside and cache.source:
            refs.append(cache.source)
    if failed_test:
        broken.append("vLLM's P2P test failed for GPU pairs " + ", ".join(f"{a}-{b}" for a, b in sorted(failed_test)))
    if broken:
        return Fact("p2p", "bad", "peer-to-peer does not work inside the group: " + ", ".join(sorted(set(broken))[:6]),
                    value=False, evidence=refs)
    if ok or tested:
        return Fact("p2p", "good", "peer-to-peer works between the group's GPUs", value=True)
    return Fact("p2p", "unknown", "peer-to-peer status not recorded", command="nvidia-smi topo -p2p r")


def _nccl(machine: Any, tp: int) -> Fact:
    runs = [run for run in getattr(machine, "nccl", []) or [] if run.nranks == tp and run.connections]
    if not runs:
        return Fact("nccl_transport", "unknown", f"no NCCL log of a {tp}-rank communicator",
                    command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P vllm serve ... 2>&1 | tee vllm.log")
    counts = {"P2P": 0, "SHM": 0, "NET": 0}
    refs: list[SourceRef] = []
    for run in runs:
        for transport, count in run.transport_counts().items():
            counts[transport] = counts.get(transport, 0) + count
        for conn in run.connections:
            if conn.transport != "P2P" and getattr(conn, "source", None) and len(refs) < 3:
                refs.append(conn.source)
    used = ", ".join(f"{name} {count}" for name, count in counts.items() if count)
    if counts.get("SHM") or counts.get("NET"):
        return Fact("nccl_transport", "bad", f"NCCL connections between the {tp} ranks: {used} (not all GPU-to-GPU)",
                    value=counts, evidence=refs)
    return Fact("nccl_transport", "good", f"NCCL connections between the {tp} ranks: {used}", value=counts)


def _custom_allreduce(engines: list[EngineLog], run: ServingRun) -> Fact:
    tp = run.layout.tp
    matching = [e for e in engines if e.tp == tp]
    if run.layout.gpus:
        exact = [e for e in matching if e.cuda_visible_devices and
                 sorted(e.cuda_visible_devices) == sorted(run.layout.gpus[: len(e.cuda_visible_devices)])]
        matching = exact or matching
    known = [e for e in matching if e.custom_allreduce]
    if not known:
        return Fact("custom_allreduce", "unknown", f"no vLLM log of the TP{tp} server", command="vllm serve ... 2>&1 | tee vllm.log")
    engine = known[0]
    refs = [ref for ref in engine.evidence if "allreduce" in ref.text.lower()][:1] or \
        [ref for ref in engine.evidence if "LLM engine" in ref.text][:1]
    if engine.custom_allreduce == "disabled":
        return Fact("custom_allreduce", "bad", f"vLLM custom all-reduce disabled: {engine.custom_allreduce_reason}; "
                    "every all-reduce goes through NCCL", value="disabled", evidence=refs)
    return Fact("custom_allreduce", "good", "vLLM custom all-reduce on (no warning that it was disabled)",
                value="enabled", evidence=refs)


def _ids(group: list[int]) -> str:
    return ",".join(str(g) for g in group)
