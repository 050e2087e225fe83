"""One node's health check under a hard deadline for the whole run.

Slurm kills a `HealthCheckProgram` after 60 s and node-problem-detector a plugin after its `timeout`; a
check that hangs in the kernel (nvidia-smi on a GPU that fell off the bus, an NVML call that never
returns) must still answer in time. So the work runs in a forked child and the parent waits at most the
deadline: if the child has not answered, it is killed with its process group and the check reports
"unknown", naming the step that was running. Every command inside also has its own timeout, shorter
than what is left of the deadline, so the usual case never reaches the kill.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k3diag.exit_codes import EXIT_UNKNOWN
from k3diag.model.words import counted

DEFAULT_DEADLINE_S = 30.0
# Time kept back from the deadline for analysis and output once collection is done.
ANALYSIS_RESERVE_S = 3.0
SPEC_FINDING_ID = "spec-mismatch"


@dataclass
class CheckRequest:
    from_paths: list[Path] = field(default_factory=list)
    root: Path = Path("/")
    command_timeout_s: float = 20.0
    deadline_s: float = DEFAULT_DEADLINE_S
    fail_on: str = "warn"
    spec_path: Path | None = None
    nccl_tests: Path | None = None
    p2p_test: Path | None = None
    node: str | None = None


def spec_findings(spec: Any, machine: Any) -> list[Any]:
    """Purchase-spec lines that the machine does not meet, as findings (unknown lines become notes)."""
    from k3diag.analyze.finding import Finding
    from k3diag.audit.answer import FAIL, UNKNOWN
    from k3diag.audit.spec import check_spec

    findings = []
    for check in check_spec(spec, machine):
        if check.verdict == FAIL:
            findings.append(Finding(
                id=SPEC_FINDING_ID, severity="fail", subjects=[check.item],
                title=f"{check.item}: expected {check.expected}, found {check.actual}",
                explanation=f"The purchase spec says {check.item} = {check.expected}; this node has {check.actual}.",
                evidence=list(check.evidence or []),
                remedy="Compare the node with its order and the vendor's build sheet; reseat or replace the part, or "
                       "correct the spec if the order changed.",
                data={"expected": check.expected, "actual": check.actual},
                kind="fault",  # the node is not what was bought: a part missing, narrower or slower
            ))
        elif check.verdict == UNKNOWN:
            machine.note("spec", f"the spec line {check.item} ({check.expected}) could not be checked: {check.actual}"
                         + (f"; run `{check.request}` to settle it" if check.request else ""))
    return findings


def perform_check(request: CheckRequest, step: Any = None, started: float | None = None) -> dict:
    """Collect (or read), analyze and report; returns {"report": ..., "exit_code": ...}. Runs in the child."""
    from k3diag.analyze.pipeline import analyze_machine
    from k3diag.analyze.verdict import exit_code_for
    from k3diag.fleet.shape import evidence_from_machine, shape_from_report
    from k3diag.render.json_report import build_report

    started = time.monotonic() if started is None else started
    mixed = None  # the finding that saved evidence describes several machines, of which one is judged
    spec = None
    if request.spec_path is not None:
        from k3diag.audit.spec import load_spec

        spec = load_spec(request.spec_path)  # SpecError goes to the caller: a usage error
    left = request.deadline_s - ANALYSIS_RESERVE_S - (time.monotonic() - started)
    command_timeout = max(1.0, min(request.command_timeout_s, left))
    if request.from_paths:
        from k3diag.inputs import load_machines, pick_machine

        if step:
            step("reading saved evidence")
        machines, _ = load_machines(list(request.from_paths))
        machine, picked, why = pick_machine(machines)
        if machines.several:
            from k3diag.analyze.machines import set_aside_finding

            # A node's bundle that mixes machines: said once, as `fleet` says it of the same bundle.
            mixed = set_aside_finding(machines, picked, why)
        source = ", ".join(str(p) for p in request.from_paths)
    else:
        from k3diag.inputs import load_live_machine

        # The collection's own deadline (the runner's): commands asked for after it are not started, so
        # the usual slow host ends with evidence saying what was skipped rather than with the hard kill.
        machine, evidence = load_live_machine(root=request.root, timeout_s=command_timeout, progress=step,
                                              deadline_s=max(1.0, left))
        source = "live host"
        if request.nccl_tests is not None or request.p2p_test is not None:
            from k3diag.collect.benchmarks import run_benchmarks
            from k3diag.join.build import build_machine

            left = request.deadline_s - ANALYSIS_RESERVE_S - (time.monotonic() - started)
            bench = run_benchmarks(request.nccl_tests, request.p2p_test, max(len(machine.gpus), 1),
                                   max(1.0, left), step)
            from k3diag.model.machine import Machine

            machine = build_machine(list(evidence) + bench, Machine(live=True))
    if request.node and not machine.host.hostname:
        machine.host.hostname = request.node
    if step:
        step("analysis")
    analysis = analyze_machine(machine)
    findings = list(analysis.findings)
    if mixed is not None:
        findings.insert(0, mixed)
    if spec is not None:
        findings.extend(spec_findings(spec, machine))
    short = _note_deadline_stops(machine, request.deadline_s)
    code = exit_code_for(machine, findings, request.fail_on)
    report = build_report(machine, findings, analysis.recommendation, analysis.verdict.to_json(), code)
    if short and code == EXIT_UNKNOWN and isinstance(report.get("verdict"), dict):
        # Nothing could be judged because the deadline cut the collection short: that, not the "no GPU"
        # that follows from it, is what the node's operator must read first.
        report["verdict"]["text"] = short
    report["shape"] = shape_from_report(report, source, evidence_from_machine(machine))
    if request.from_paths:
        _name_saved_node(report, request)
    elif request.node:
        report["shape"]["node"] = request.node
    # the collection's own deadline stopped a command: the run reached its deadline though it answered
    return {"report": report, "exit_code": code, "deadline_reached": short is not None}


def _name_saved_node(report: dict, request: CheckRequest) -> None:
    """Saved evidence is named by its host name, else by its file's name (not the path it was saved
    under), and the report says which (`shape.node_from`, and a note when it is only the file's name)."""
    from k3diag.fleet.shape import NODE_FROM_INPUT, name_saved_node

    paths = [str(path) for path in request.from_paths]
    node, how = name_saved_node(report, paths, request.node)
    report["shape"]["node"], report["shape"]["node_from"] = node, how
    if how == NODE_FROM_INPUT:
        report.setdefault("notes", []).append({
            "subject": "node", "level": "info",
            "message": f"{node} is the name of the input file {paths[0]}, not a host name: the evidence names no "
                       "host; give --node NAME to name the node"})


def _note_deadline_stops(machine: Any, deadline_s: float) -> str | None:
    """One note saying which command the collection's deadline stopped and how many it skipped; returns
    the short form (`stopped at the 30 s deadline while running `nvidia-smi -q``), or None."""
    import re

    stopped, skipped = None, 0
    for note in machine.notes:
        if "the collection's deadline" not in note.message:
            continue
        command = re.search(r"`([^`]+)`", note.message)
        if "was not run" in note.message:
            skipped += 1
        elif stopped is None and command:
            stopped = command.group(1)
    if stopped is None and not skipped:
        return None
    was = "was" if skipped == 1 else "were"
    what = f"`{stopped}` was stopped" if stopped else f"{counted(skipped, 'command')} {was} skipped"
    more = f" and {counted(skipped, 'more command')} {was} not run" if stopped and skipped else ""
    machine.note("check", f"k3diag check reached its {deadline_s:g} s deadline: {what}{more}; a GPU that fell off "
                          "the bus or a hung driver makes such commands hang: check `dmesg | grep -i xid` and run "
                          "`k3diag collect -o node.tar.gz --timeout 60` to see which one")
    return (f"stopped at the {deadline_s:g} s deadline while running `{stopped}`" if stopped
            else f"stopped at the {deadline_s:g} s deadline: {counted(skipped, 'command')} not run")


def _child(request: CheckRequest, conn: Any, started: float, parent_pid: int) -> None:
    from k3diag.lifecycle import Terminated, die_with_parent, terminate_on_sigterm

    os.setpgrp()  # the parent kills this group at the deadline, whatever it spawned in it

    def step(message: str) -> None:
        try:
            conn.send(("step", message))
        except (OSError, ValueError):
            pass

    try:
        # The parent's SIGTERM at the deadline raises inside the running command, whose cleanup stops it
        # and every process it started (also those that left its group), before this process goes.
        with terminate_on_sigterm():
            # the parent killed (SIGKILL, or SIGTERM while it could not clean up): the kernel sends this process
            # the SIGTERM the deadline would, so the commands it started stop with it; a SIGTERM held since the
            # fork arrives here, inside the `try`
            die_with_parent(parent_pid, signal.SIGTERM)
            outcome = perform_check(request, step, started)
        conn.send(("done", json.dumps(outcome, default=str)))
    except Terminated:
        os._exit(EXIT_UNKNOWN)
    except BaseException as exc:  # the parent turns it into one sentence
        # a spec or a --from path that cannot be used is the command line's fault: a usage error in the parent
        kind = "spec" if type(exc).__name__ in ("SpecError", "InputPathError") else "error"
        try:
            conn.send((kind, f"{exc}" if kind == "spec" else f"{type(exc).__name__}: {exc}"))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()


class CheckUsageError(Exception):
    """The check cannot start (a spec file that cannot be used); `str()` says why."""


def deadline_report(request: CheckRequest, message: str, elapsed: float, short: str | None = None) -> dict:
    """The report for a check that did not finish: unknown, with the sentence saying why."""
    from k3diag.model.machine import Machine
    from k3diag.render.json_report import build_report

    machine = Machine(live=not request.from_paths)
    if request.node:
        machine.host.hostname = request.node
    machine.note("check", message)
    report = build_report(machine, [], None, {"level": "unknown", "text": short or message, "best_tp": None},
                          EXIT_UNKNOWN)
    from k3diag.fleet.shape import shape_from_report

    report["shape"] = shape_from_report(report, "live host" if not request.from_paths else "saved evidence")
    if request.from_paths:
        _name_saved_node(report, request)
    elif request.node:
        report["shape"]["node"] = request.node
    return report


def run_check(request: CheckRequest) -> tuple[dict, int, dict]:
    """(report, exit code, timing) for one check, never past `request.deadline_s` by more than a second."""
    started = time.monotonic()
    if sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods():
        outcome = perform_check(request, None, started)  # no fork: bounded by the per-command timeouts only
        return outcome["report"], outcome["exit_code"], _timing(request, started, outcome["deadline_reached"],
                                                                None)
    context = multiprocessing.get_context("fork")
    parent_conn, child_conn = context.Pipe(duplex=False)
    from k3diag.lifecycle import sigterm_held

    process = context.Process(target=_child, args=(request, child_conn, started, os.getpid()), daemon=True)
    with sigterm_held():  # a SIGTERM during the fork arrives after it (the child unblocks it for itself)
        process.start()
    child_conn.close()
    last_step: str | None = None
    result: tuple[str, str] | None = None
    try:
        while result is None:
            left = request.deadline_s - (time.monotonic() - started)
            if left <= 0 or not parent_conn.poll(left):
                break
            try:
                kind, payload = parent_conn.recv()
            except (EOFError, OSError):
                break
            if kind == "step":
                last_step = payload
                continue
            result = (kind, payload)
    except BaseException:  # Ctrl-C or SIGTERM: the child and the commands it started go now, not at their timeout
        _kill(process)
        raise
    if result is None:
        _kill(process)
    process.join(timeout=2)
    parent_conn.close()
    elapsed = time.monotonic() - started
    if result is not None and result[0] == "done":
        outcome = json.loads(result[1])
        return outcome["report"], outcome["exit_code"], _timing(request, started, outcome["deadline_reached"],
                                                                last_step)
    if result is not None and result[0] == "spec":
        raise CheckUsageError(result[1])
    short = None
    reached = result is None and elapsed >= request.deadline_s  # not a child that died before it
    if reached:
        short = f"stopped at the {request.deadline_s:g} s deadline while {_doing(last_step)}"
    if result is not None:
        message = (f"k3diag check failed while {_doing(last_step)} ({result[1]}); run `k3diag collect -o node.tar.gz` "
                   "and report the bundle")
    elif process.exitcode not in (None, 0) and elapsed < request.deadline_s:
        message = (f"k3diag check stopped while {_doing(last_step)} (exit {process.exitcode}); run "
                   "`k3diag collect -o node.tar.gz` to see which source fails")
    elif last_step == "analysis":
        # Collection finished; the deadline left too little time to judge what it read: not a hung tool.
        message = (f"k3diag check did not finish within its {request.deadline_s:g} s deadline and was stopped while "
                   f"{_doing(last_step)}, after collection had finished; give a longer --deadline (the check keeps "
                   f"{ANALYSIS_RESERVE_S:g} s of it for analysis)")
    else:
        message = (f"k3diag check did not finish within its {request.deadline_s:g} s deadline and was stopped while "
                   f"{_doing(last_step)}; a GPU that fell off the bus or a hung driver makes such commands hang: "
                   "check `dmesg | grep -i xid` and run `k3diag collect -o node.tar.gz --timeout 60` to see which "
                   "one")
    return (deadline_report(request, message, elapsed, short), EXIT_UNKNOWN,
            _timing(request, started, reached, last_step, killed=reached))


def _doing(step: str | None) -> str:
    if not step:
        return "starting"
    if step == "analysis":
        return "analysing the evidence"
    if step.split()[0] in {"nvidia-smi", "lspci", "rocm-smi", "amd-smi"}:
        return f"running `{step}`"
    return f"collecting {step}"


def _timing(request: CheckRequest, started: float, timed_out: bool, step: str | None, killed: bool = False) -> dict:
    """`timed_out`: the run reached its deadline, whether the collection's deadline stopped a command (the
    check still answered) or the whole check was stopped (`killed`, its last step in `last_step`)."""
    return {"deadline_s": request.deadline_s, "elapsed_s": round(time.monotonic() - started, 3),
            "timed_out": timed_out, "killed": killed, "last_step": step}


def _kill(process: Any) -> None:
    pid = process.pid
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)  # lets the child stop the commands it started
        process.join(timeout=1.5)
    except OSError:
        pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            process.kill()
        except Exception:
            pass
