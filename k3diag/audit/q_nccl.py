"""Measured NCCL all-reduce bandwidth, judged against the links the GPUs have, and how it scales."""

from __future__ import annotations

from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, Answer, worse
from k3diag.audit.context import AuditContext
from k3diag.audit.facts import attr
from k3diag.collect.benchmarks import gpu_steps
from k3diag.model.topology import path_rank
from k3diag.model.words import counted

# One NVLink lane pair carries ~25 GB/s each way (NVLink 2-4); all_reduce busbw reaches ~75%
# of the slowest link in the ring (field notes: 8xA100 NV12 ~230, 8xH100 NV18 ~370-480).
NVLINK_GBPS_PER_LINK = 25.0
ACHIEVABLE = 0.75
FAIL_BELOW = 0.25
WARN_BELOW = 0.6
SCALING_DROP = 0.7


def all_reduce_command(gpus: int) -> str:
    return f"./build/all_reduce_perf -b 8M -e 8G -f 2 -g {gpus}"


def expected_busbw(machine: Any, nranks: int) -> tuple[float | None, str]:
    """What all_reduce busbw over GPUs 0..n-1 should reach, and the basis for saying so."""
    chosen = [f"GPU{i}" for i in range(nranks)]
    links = facts.gpu_links(machine)
    inside = [link for (a, b), link in links.items() if a in chosen and b in chosen]
    if inside and all(link.nvlinks for link in inside):
        lanes = min(link.nvlinks for link in inside)
        value = lanes * NVLINK_GBPS_PER_LINK * ACHIEVABLE
        return value, f"NV{lanes} between every pair: {lanes} x {NVLINK_GBPS_PER_LINK:g} GB/s x {ACHIEVABLE:g}"
    widths: list[tuple[float, str]] = []
    for gpu in facts.gpus(machine):
        if gpu.label not in chosen:
            continue
        pcie = attr(gpu, "pcie")
        width = attr(pcie, "width_current")
        gen = attr(pcie, "gen_max") or attr(pcie, "gen_current")
        host_gen = attr(pcie, "gen_host_max")
        if host_gen and gen and host_gen < gen:
            gen = host_gen
        if width is None or gen is None:
            device = facts.pci_device(machine, attr(gpu, "bus_id"))
            link = attr(device, "link") if device is not None else None
            width = width or attr(link, "sta_width")
            gen = gen or facts.gen_from_speed(attr(link, "cap_speed_gts"))
        gbps = facts.link_gbps(gen, width)
        if gbps is not None:
            widths.append((gbps, f"{gpu.label} PCIe Gen{gen} x{width}"))
    if not widths:
        return None, "no link width or generation in the evidence"
    slowest, label = min(widths)
    value = slowest * ACHIEVABLE
    worst_path = max((link.path for link in inside), key=path_rank, default=None)
    basis = f"slowest GPU link {label} = {slowest:g} GB/s x {ACHIEVABLE:g}"
    if worst_path == "SYS":
        basis += " (pairs cross sockets: expect less)"
    return value, basis


def answer_nccl_allreduce(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="nccl-allreduce",
        question="What NCCL all-reduce bandwidth was measured, and does it scale from 1 to 2, 4 and 8 GPUs?",
        seed="NCCL All-Reduce 實測帶寬是多少",
        verdict=UNKNOWN,
        summary="",
    )
    gpu_count = len(facts.gpus(machine))
    runs = []
    for record, shape in facts.nccl_tests_runs(machine):
        op = str(shape.get("op") or attr(record, "op") or "all_reduce").lower().replace("-", "_")
        if "all_reduce" not in op and "allreduce" not in op:
            continue
        runs.append((record, shape))
    steps = gpu_steps(max(gpu_count, 1))
    if not runs:
        answer.summary = "The bundle holds no nccl-tests all_reduce_perf result."
        answer.request = (" ; ".join(all_reduce_command(n) for n in steps)
                          + "   (or `k3diag collect -o bundle.tar.gz --nccl-tests /path/to/nccl-tests`)")
        return answer
    best: dict[int, tuple[float, Any, dict]] = {}
    averages: dict[int, tuple[float, Any]] = {}
    unsized: list[float] = []
    wrong = 0
    refs: list = []
    for record, shape in runs:
        busbw = facts.best_busbw(shape)
        wrong += facts.wrong_count(shape)
        nranks = facts.nranks_of(record, shape)
        if busbw is None:
            average = facts.average_busbw(shape)
            if average is not None and nranks is not None and average > averages.get(nranks, (-1.0, None))[0]:
                averages[nranks] = (average, record)
            continue
        if nranks is None:
            unsized.append(busbw)
            continue
        if nranks not in best or busbw > best[nranks][0]:
            best[nranks] = (busbw, record, shape)
    verdict = PASS
    problems: list[str] = []
    per_n: dict[str, dict] = {}
    for nranks in sorted(best):
        busbw, record, _ = best[nranks]
        refs.extend(facts.summary_refs(record)[:2])
        if nranks == 1:
            answer.details.append(f"1 GPU: busbw {busbw:g} GB/s (a single rank only copies locally; not judged)")
            per_n["1"] = {"busbw": busbw, "expected": None}
            continue
        expected, basis = expected_busbw(machine, nranks)
        per_n[str(nranks)] = {"busbw": busbw, "expected": round(expected, 1) if expected else None, "basis": basis}
        line = f"{nranks} GPUs: peak busbw {busbw:g} GB/s"
        if expected:
            ratio = busbw / expected
            line += f", {ratio:.0%} of the ~{expected:.0f} GB/s expected ({basis})"
            if ratio < FAIL_BELOW:
                verdict = worse(verdict, FAIL)
                problems.append(f"{nranks}-GPU busbw {busbw:g} GB/s is under a quarter of the ~{expected:.0f} GB/s "
                                "the links allow")
            elif ratio < WARN_BELOW:
                verdict = worse(verdict, WARN)
                problems.append(f"{nranks}-GPU busbw {busbw:g} GB/s is well below the ~{expected:.0f} GB/s the "
                                "links allow")
        else:
            line += f" (no expectation: {basis})"
        answer.details.append(line)
    # Tables pasted without their rows leave only `# Avg bus bandwidth`, an average over every size
    # (small ones included): it can prove a link fast, never slow.
    for nranks in sorted(n for n in averages if n not in best and n >= 2):
        average, record = averages[nranks]
        refs.extend(facts.summary_refs(record)[:2])
        expected, basis = expected_busbw(machine, nranks)
        per_n[str(nranks)] = {"busbw": None, "avg_busbw": average,
                              "expected": round(expected, 1) if expected else None, "basis": basis}
        line = f"{nranks} GPUs: only the average busbw over all sizes, {average:.3g} GB/s, is in the evidence"
        if expected and average >= expected * WARN_BELOW:
            answer.details.append(line + f" (already {average / expected:.0%} of the ~{expected:.0f} GB/s expected)")
        else:
            verdict = worse(verdict, WARN)
            answer.details.append(line)
            problems.append(f"{nranks}-GPU run: only an average busbw of {average:.3g} GB/s is in the evidence"
                            + (f", below the ~{expected:.0f} GB/s the links allow" if expected else "")
                            + "; the per-size table is needed to judge the peak")
    multi = [n for n in sorted(best) if n >= 2]
    multi_any = sorted(set(multi) | {n for n in averages if n >= 2})
    for smaller, larger in zip(multi, multi[1:]):
        before, after = best[smaller][0], best[larger][0]
        if after < before * SCALING_DROP:
            verdict = worse(verdict, WARN)
            problems.append(f"busbw falls from {before:g} GB/s at {smaller} GPUs to {after:g} GB/s at {larger} GPUs: "
                            "adding GPUs adds a slower link to the ring")
    if wrong:
        verdict = FAIL
        problems.insert(0, f"nccl-tests counted {counted(wrong, 'wrong value')}: data corruption on the GPU links")
    if unsized:
        answer.details.append("results with an unknown GPU count: " + ", ".join(f"{v:g} GB/s" for v in unsized))
    missing = [n for n in steps if n not in best and n not in averages]
    if missing:
        answer.details.append("not measured at " + ", ".join(counted(n, "GPU") for n in missing))
    answer.details.extend(problems)
    answer.data = {"busbw_by_gpus": per_n, "wrong": wrong, "missing_steps": missing}
    answer.evidence = facts.dedupe_refs(refs, limit=8)
    if not multi and multi_any:
        answer.verdict = verdict
        answer.summary = facts.sentence(problems[0]) if problems else (
            "Only average bus bandwidths are in the evidence, and they already reach what the links allow.")
        answer.request = ("send the full all_reduce_perf tables: "
                          + " ; ".join(all_reduce_command(n) for n in steps if n >= 2))
    elif not multi:
        answer.verdict = UNKNOWN
        answer.summary = ("Only a single-GPU all-reduce was measured"
                          if best else "The all_reduce_perf output holds no bandwidth rows") + \
            "; that says nothing about the links between GPUs."
        answer.request = " ; ".join(all_reduce_command(n) for n in steps if n >= 2)
    else:
        answer.verdict = verdict
        peak = max(best[n][0] for n in multi)
        shown = ", ".join(f"{best[n][0]:g} GB/s at {n} GPUs" for n in multi)
        if problems:
            answer.summary = facts.sentence(problems[0]) + f" Measured busbw: {shown}."
            answer.request = ("Find the slow link (see the PCIe, P2P and ACS answers), fix it and re-run: "
                              + " ; ".join(all_reduce_command(n) for n in steps if n >= 2))
        else:
            answer.summary = f"Measured all-reduce busbw: {shown} (peak {peak:g} GB/s), in line with the links."
            if missing:
                answer.request = " ; ".join(all_reduce_command(n) for n in missing)
    return answer

