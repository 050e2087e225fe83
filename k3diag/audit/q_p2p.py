"""Does GPU peer-to-peer really work? Capability (topo -p2p), measurement (p2pBandwidthLatencyTest),
and use (the transports NCCL picked) each say something different; all three are weighed."""

from __future__ import annotations

from typing import Any

from k3diag.audit import facts
from k3diag.audit.answer import FAIL, PASS, UNKNOWN, WARN, Answer
from k3diag.audit.context import AuditContext
from k3diag.audit.facts import attr
from k3diag.model.topology import P2P_STATUS_MEANING, gpu_index
from k3diag.model.words import counted

P2P_REQUEST = (
    "nvidia-smi topo -p2p r ; nvidia-smi topo -p2p w ; nvidia-smi topo -p2p p ; "
    "./p2pBandwidthLatencyTest (CUDA samples) ; "
    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P ./build/all_reduce_perf -b 8M -e 8G -f 2 -g \"$(nvidia-smi -L | wc -l)\""
)
# Capabilities that matter for PCIe peer traffic; `nvlink` only where the pair has NVLink,
# `atomics` is often NS on healthy PCIe boxes and decides nothing for inference.
_PCIE_CAPS = ("read", "write", "pcie", "unknown")
_OK = ("OK", "X")
_DESIGN_CODES = ("CNS", "TNS")
_CROSS_SOCKET = ("SYS", "SOC")


def _p2p_status_problems(machine: Any) -> tuple[list[str], list[Any], int, list[str], int]:
    """One line per status code that is not OK, naming the pairs and capabilities it covers; and, apart, the
    refusals the platform gives by design (CNS/TNS on a pair that crosses sockets), which are no fault."""
    links = facts.gpu_links(machine)
    by_code: dict[str, dict[tuple[str, str], set[str]]] = {}
    across: dict[str, dict[tuple[str, str], set[str]]] = {}
    refs: list[Any] = []
    checked = supported = 0
    for status in attr(machine, "p2p", []) or []:
        src, dst, cap, code = attr(status, "src"), attr(status, "dst"), attr(status, "capability"), attr(status, "status")
        if gpu_index(str(src)) is None or gpu_index(str(dst)) is None or src == dst:
            continue
        pair = tuple(sorted((str(src), str(dst)), key=lambda n: gpu_index(n) or 0))
        pair_link = links.get(pair)  # type: ignore[arg-type]
        relevant = cap in _PCIE_CAPS or (cap == "nvlink" and pair_link is not None and pair_link.nvlinks)
        if not relevant or code is None:
            continue
        checked += 1
        if code in _OK or code == "U":
            supported += code in _OK
            continue
        # Most platforms carry no P2P across CPU sockets: analyze calls it a design property, so does the audit.
        design = code in _DESIGN_CODES and pair_link is not None and pair_link.path in _CROSS_SOCKET
        caps = (across if design else by_code).setdefault(str(code), {}).setdefault(pair, set())  # type: ignore[arg-type]
        if not caps:
            refs.append(attr(status, "source"))
        caps.add(str(cap))
    problems = [_code_line(code, pairs) for code, pairs in sorted(by_code.items())]
    by_design = [_code_line(code, pairs) + " (pairs across CPU sockets, SYS: refused there by design on most "
                 "platforms, not a fault; keep tensor-parallel groups within a socket)"
                 for code, pairs in sorted(across.items())]
    return problems, refs[:4], checked, by_design, supported


def _code_line(code: str, pairs: dict[tuple[str, str], set[str]]) -> str:
    meaning = P2P_STATUS_MEANING.get(code, "not OK")
    names = [f"{a}-{b}" for a, b in sorted(pairs, key=lambda p: (gpu_index(p[0]) or 0, gpu_index(p[1]) or 0))]
    caps = sorted(set().union(*pairs.values()))
    return (f"{code} ({meaning}) for {counted(len(names), 'GPU pair')} ({'/'.join(caps)}): "
            + ", ".join(names[:10]) + (" ..." if len(names) > 10 else ""))


def _matrix(matrices: dict, *words: str, without: tuple[str, ...] = ()) -> list[list[Any]] | None:
    for name, matrix in (matrices if isinstance(matrices, dict) else {}).items():
        lowered = name.lower().replace(" ", "")
        if all(word in lowered for word in words) and not any(word in lowered for word in without):
            if isinstance(matrix, list):
                return matrix
    return None


def _p2p_test_problems(machine: Any) -> tuple[list[str], list[str], list[Any], bool]:
    """Problems and good news from p2pBandwidthLatencyTest runs; bool: a test was present."""
    problems: list[str] = []
    good: list[str] = []
    refs: list[Any] = []
    tests = facts.p2p_tests(machine)
    for record, shape in tests:
        refs.extend(facts.summary_refs(record))
        access = shape.get("can_access")
        cannot: list[str] = []
        if isinstance(access, list):
            for i, row in enumerate(access):
                if not isinstance(row, list):
                    continue
                for j, cell in enumerate(row):
                    if i != j and cell is False:
                        cannot.append(f"GPU{i}->GPU{j}")
        if cannot:
            problems.append("p2pBandwidthLatencyTest: CANNOT Access Peer for " + ", ".join(cannot[:12])
                            + (" ..." if len(cannot) > 12 else ""))
        matrices = shape.get("matrices") if isinstance(shape.get("matrices"), dict) else {}
        enabled = _matrix(matrices, "unidirectional", "enabled", "bandwidth")
        disabled = _matrix(matrices, "unidirectional", "disabled", "bandwidth")
        if enabled is None or disabled is None:
            enabled = _matrix(matrices, "enabled", "bandwidth", without=("bidirectional",))
            disabled = _matrix(matrices, "disabled", "bandwidth", without=("bidirectional",))
        if enabled is not None and disabled is not None:
            slow: list[str] = []
            fast = 0
            for i, (row_on, row_off) in enumerate(zip(enabled, disabled)):
                if not isinstance(row_on, list) or not isinstance(row_off, list):
                    continue
                for j, (on, off) in enumerate(zip(row_on, row_off)):
                    on_f, off_f = facts.as_float(on), facts.as_float(off)
                    if i == j or on_f is None or off_f is None or off_f <= 0:
                        continue
                    if on_f <= off_f * 1.1:
                        slow.append(f"GPU{i}->GPU{j} {on_f:g} vs {off_f:g} GB/s")
                    else:
                        fast += 1
            if slow:
                problems.append("P2P enabled is no faster than disabled (traffic bounces through the host): "
                                + ", ".join(slow[:8]) + (" ..." if len(slow) > 8 else ""))
            elif fast:
                good.append(f"p2pBandwidthLatencyTest: P2P beats the host-staged copy on all {fast} measured pairs")
        elif not cannot and isinstance(access, list) and access:
            good.append("p2pBandwidthLatencyTest: every GPU can access every peer")
    return problems, good, refs, bool(tests)


def _nccl_problems(machine: Any) -> tuple[list[str], list[str], list[Any], bool]:
    problems: list[str] = []
    good: list[str] = []
    refs: list[Any] = []
    runs = facts.nccl_runs(machine)
    any_conn = False
    for run in runs:
        pairs = facts.transport_pairs(run)
        if not pairs:
            continue
        any_conn = True
        shm = sorted(pairs.get("SHM", set()))
        p2p = sorted(pairs.get("P2P", set()))
        env = attr(run, "env", {}) or {}
        where = attr(run, "input") or "NCCL log"
        if shm:
            shown = ", ".join(f"{a}-{b}" for a, b in shm[:10]) + (" ..." if len(shm) > 10 else "")
            problems.append(f"NCCL used SHM (host memory) between ranks {shown} in {where}")
            refs.extend(facts.connection_refs(run, "SHM"))
        if str(env.get("NCCL_P2P_DISABLE", "")).strip() in ("1", "true", "True"):
            problems.append(f"NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']} was set for the run in {where}: "
                            "P2P was switched off by hand, so the run proves nothing about P2P")
        if str(env.get("NCCL_P2P_LEVEL", "")).strip().upper() in ("LOC", "0"):
            problems.append(f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']} was set for the run in {where}: P2P only "
                            "within one GPU")
        if p2p and not shm:
            good.append(f"NCCL used P2P for all {len(p2p)} same-host rank pairs it connected in {where}")
            refs.extend(facts.connection_refs(run, "P2P", limit=2))
    return problems, good, refs, any_conn


def answer_p2p(ctx: AuditContext) -> Answer:
    machine = ctx.machine
    answer = Answer(
        id="p2p",
        question="Does GPU peer-to-peer (P2P) really work?",
        seed="GPU P2P 是否可用",
        verdict=UNKNOWN,
        summary="",
    )
    if facts.settled_by_gpu_count(answer, machine, "peer-to-peer does not apply"):
        return answer
    status_problems, status_refs, checked, by_design, supported = _p2p_status_problems(machine)
    test_problems, test_good, test_refs, has_test = _p2p_test_problems(machine)
    nccl_problems, nccl_good, nccl_refs, has_nccl = _nccl_problems(machine)
    problems = status_problems + test_problems + nccl_problems
    answer.details.extend(problems)
    answer.details.extend(by_design)
    answer.details.extend(test_good + nccl_good)
    if checked and not status_problems and not by_design:
        answer.details.append(f"nvidia-smi topo -p2p: OK for all {checked} GPU pair readings")
    all_nv = bool(facts.gpu_links(machine)) and all(link.nvlinks for link in facts.gpu_links(machine).values())
    # one line from each kind of proof first, so a short listing still shows all three
    answer.evidence = facts.dedupe_refs(status_refs[:1] + test_refs[:1] + nccl_refs[:1] + status_refs + test_refs
                                        + nccl_refs + [attr(s, "source") for s in (attr(machine, "p2p", []) or [])[:2]],
                                        limit=10)
    answer.data = {"topo_p2p_readings": checked, "p2p_test": has_test, "nccl_connections": has_nccl,
                   "problems": problems, "by_design": by_design}
    measured_ok = bool(test_good or nccl_good)
    design_codes = ", ".join(line.split()[0] for line in by_design)
    across = (f" Across CPU sockets the driver refuses it ({design_codes}): by design on most platforms, not a "
              "fault." if by_design else "")
    if problems:
        answer.verdict = FAIL
        answer.summary = "P2P does not work for every GPU pair: " + problems[0] + (
            f" (and {counted(len(problems) - 1, 'more problem')})" if len(problems) > 1 else "") + "."
        answer.request = ("Fix the cause (driver without P2P on consumer cards, ACS redirect, IOMMU translation, "
                          "cross-socket pairs) and re-run: " + P2P_REQUEST)
    elif measured_ok:
        answer.verdict = PASS
        basis = " and ".join(x for x in ("measured by p2pBandwidthLatencyTest" if test_good else "",
                                          "used by NCCL" if nccl_good else "") if x)
        answer.summary = f"P2P works: {basis}" + (", and the driver reports it OK" if supported else "") + "." + across
    elif supported:
        answer.verdict = WARN
        answer.summary = ("The driver reports P2P as supported (topo -p2p OK), but nothing in the bundle measures "
                          "it; `topo -p2p` OK does not prove transfers work." + across)
        answer.request = P2P_REQUEST
    elif by_design:
        answer.verdict = WARN
        answer.summary = (f"No GPU pair has P2P: every pair the driver reports on crosses CPU sockets, where it "
                          f"refuses P2P ({design_codes}) by design, so the GPUs exchange data through host memory.")
        answer.request = P2P_REQUEST
    else:
        answer.verdict = UNKNOWN
        answer.summary = "Nothing in the bundle says whether P2P works" + (
            " (the GPUs are NVLink-connected, which normally implies it)" if all_nv else "") + "."
        answer.request = P2P_REQUEST
    return answer

