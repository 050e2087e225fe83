"""Checklist questions about where GPUs sit: CPU sockets and NUMA nodes, and each pair's path class."""

from __future__ import annotations

from collections import Counter
from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import PASS, UNKNOWN, WARN, Answer
from k3diag.audit.context import AuditContext
from k3diag.audit.facts import attr
from k3diag.model.topology import endpoint_sort_key, path_rank
from k3diag.model.words import counted

TOPO_REQUEST = "nvidia-smi topo -m"
NUMA_REQUEST = ("nvidia-smi topo -m ; lscpu ; numactl -H ; "
                "for d in /sys/bus/pci/devices/*; do echo $d $(cat $d/numa_node); done")
_BAD_PATHS = ("PHB", "NODE", "SYS")


def _numa_groups(machine: Any) -> dict[int | None, list[Any]]:
    groups: dict[int | None, list[Any]] = {}
    for gpu in facts.gpus(machine):
        groups.setdefault(facts.gpu_numa(machine, gpu), []).append(gpu)
    return groups


def answer_cpu_numa(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="cpu-numa",
        question="Under which CPU does each GPU hang, and do GPU pairs cross NUMA nodes?",
        seed="GPU 分別掛在哪一顆 CPU 下；GPU 是否跨 NUMA 節點",
        verdict=UNKNOWN,
        summary="",
    )
    gpus = facts.gpus(machine)
    if not gpus:
        answer.summary = "The bundle shows no GPU."
        answer.request = NUMA_REQUEST
        return answer
    groups = _numa_groups(machine)
    refs: list = []
    placement: dict[str, dict] = {}
    for node, members in sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        package = facts.package_of_numa(machine, node)
        labels = ", ".join(g.label for g in members)
        if node is None:
            answer.details.append(f"NUMA node unknown: {labels}")
        else:
            where = f"CPU socket {package}" if package is not None else "socket not in the evidence"
            affinity = next((attr(g, "cpu_affinity") for g in members if attr(g, "cpu_affinity")), None)
            answer.details.append(f"NUMA node {node} ({where}" + (f", CPUs {affinity}" if affinity else "")
                                  + f"): {labels}")
        for gpu in members:
            placement[gpu.label] = {"numa_node": node, "package": package, "cpu_affinity": attr(gpu, "cpu_affinity")}
        # one quoted line per NUMA node shows where its GPUs hang
        refs.extend(facts.refs_of(members[0])[:1])
    links = facts.gpu_links(machine)
    crossing = sorted(
        (key for key, link in links.items() if link.path == "SYS"),
        key=lambda pair: tuple(endpoint_sort_key(x) for x in pair),
    )
    if not links:
        # Without a matrix, crossing is inferred from the NUMA nodes themselves.
        known = [n for n in groups if n is not None]
        if len(known) > 1:
            crossing = [("NUMA", "NUMA")]
    crossing_pcie = [pair for pair in crossing if pair != ("NUMA", "NUMA")]
    answer.data = {"gpus": placement, "crossing_pairs": [list(p) for p in crossing_pcie]}
    known_nodes = [n for n in groups if n is not None]
    if not known_nodes and not links:
        answer.verdict = UNKNOWN
        answer.summary = "Neither the NUMA node of each GPU nor a topology matrix is in the evidence."
        answer.request = NUMA_REQUEST
        return answer
    refs.extend(links[pair].source for pair in crossing_pcie[:3])
    answer.evidence = facts.dedupe_refs(refs, limit=10)
    all_nv = bool(links) and all(link.nvlinks for link in links.values())
    if crossing and not all_nv:
        answer.verdict = WARN
        if crossing_pcie:
            shown = ", ".join(f"{a}-{b}" for a, b in crossing_pcie[:8]) + (
                f" and {len(crossing_pcie) - 8} more" if len(crossing_pcie) > 8 else "")
            answer.summary = (f"{counted(len(crossing_pcie), 'GPU pair')} {'crosses' if len(crossing_pcie) == 1 else 'cross'} "
                              f"CPU sockets (SYS): {shown}. Keep tensor-"
                              "parallel groups inside one NUMA node.")
        else:
            answer.summary = ("The GPUs sit on more than one NUMA node; pairs across nodes go through the CPU "
                              "interconnect. Keep tensor-parallel groups inside one NUMA node.")
        answer.request = None
    else:
        answer.verdict = PASS
        if len(known_nodes) <= 1 and not crossing:
            node_text = f"NUMA node {known_nodes[0]}" if known_nodes else "one NUMA node"
            answer.summary = f"All GPUs hang under {node_text}; no GPU pair crosses sockets."
        elif all_nv:
            answer.summary = ("GPUs are spread over NUMA nodes, but every pair talks over NVLink, so GPU-GPU "
                              "traffic does not cross the CPU interconnect.")
        else:
            answer.summary = "No GPU pair crosses CPU sockets."
        if None in groups:
            answer.verdict = UNKNOWN if not links else PASS
            if not links:
                answer.request = NUMA_REQUEST
    return answer


def answer_path_classes(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="path-classes",
        question="Is each GPU pair connected by NV#, PIX, PXB, PHB, NODE or SYS?",
        seed="GPU 之間是 NV#、PIX、PXB、PHB 還是 SYS",
        verdict=UNKNOWN,
        summary="",
    )
    gpus = facts.gpus(machine)
    links = facts.gpu_links(machine)
    if facts.settled_by_gpu_count(answer, machine, "there are no GPU pairs"):
        return answer
    if not links:
        answer.summary = "The evidence has no GPU topology matrix."
        answer.request = TOPO_REQUEST
        return answer
    counts = Counter(link.path or "unknown" for link in links.values())
    ordered = sorted(counts.items(), key=lambda item: path_rank(None if item[0] == "unknown" else item[0]))
    answer.details.append("pairs by class: " + ", ".join(f"{path} {n}" for path, n in ordered))
    by_gpu: dict[str, list[str]] = {}
    matrix: dict[str, str | None] = {}
    for (a, b), link in sorted(links.items(), key=lambda item: tuple(endpoint_sort_key(x) for x in item[0])):
        matrix[f"{a}-{b}"] = link.path
        by_gpu.setdefault(a, []).append(f"{b}:{link.path or '?'}")
    for label, cells in by_gpu.items():
        answer.details.append(f"{label} -> " + " ".join(cells))
    worst = max(links.values(), key=lambda link: path_rank(link.path))
    bad = {key: link for key, link in links.items() if link.path in _BAD_PATHS}
    expected_pairs = len(gpus) * (len(gpus) - 1) // 2
    answer.data = {"matrix": matrix, "counts": dict(counts), "worst": worst.path}
    answer.evidence = facts.dedupe_refs(
        [worst.source] + [link.source for link in bad.values()] + [link.source for link in links.values()], limit=6)
    if bad:
        answer.verdict = WARN
        classes = sorted({link.path for link in bad.values()}, key=path_rank)
        answer.summary = (f"{len(bad)} of {len(links)} GPU pairs go through the CPU ({'/'.join(classes)}); the worst "
                          f"pair class is {worst.path}. Those pairs suit data or pipeline parallelism, not tensor "
                          "parallelism.")
    else:
        answer.verdict = PASS
        best = min(links.values(), key=lambda link: path_rank(link.path))
        answer.summary = (f"Every GPU pair is {worst.path}" if worst.path == best.path else
                          f"Every GPU pair is between {best.path} and {worst.path}") + \
            ": no pair goes through a CPU host bridge."
    if expected_pairs and len(links) < expected_pairs:
        answer.details.append(f"{counted(expected_pairs - len(links), 'pair')} missing from the matrix")
        if answer.verdict == PASS:
            answer.verdict = UNKNOWN
            answer.request = TOPO_REQUEST
    return answer
