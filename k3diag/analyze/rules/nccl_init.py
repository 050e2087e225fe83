"""How far NCCL's communicator init got: ranks that started and never completed (a hang or a death in init),
and an init that completed but took unusually long (`Init timings`, NCCL 2.23+), named by the phase that took
the time.

A rank that printed `Init START` and no `Init COMPLETE` is a fault only where the log is whole: a log visibly
cut (a few lines quoted in a document, a truncated paste, a file read only in part) says only that init was not
seen to complete in that excerpt (`NcclInitState.excerpt`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.analyze.rules.nccl import _subject_run
from k3diag.model.machine import Machine
from k3diag.model.words import counted

if TYPE_CHECKING:  # annotations only: a machine without an NCCL log does not load its records
    from k3diag.model.nccl import NcclRun

INIT_DEBUG_HINT = "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,NET"
# An init that took longer than this, in seconds, is reported. NCCL's own init of every rank present takes well
# under a few seconds on one node (the fixtures: 0.08 s to 0.25 s for 2 ranks, 2 s at 64 ranks), and grows with
# the number of ranks through bootstrap's allgathers (NVIDIA/nccl#1156 reports about 150 s at several thousand
# GPUs): 10 s plus 20 ms a rank is far beyond NCCL's own work at any size, so what is left is time spent waiting
# (for a rank that came late, the network's out-of-band path, a transport that connects slowly).
SLOW_INIT_BASE_S = 10.0
SLOW_INIT_PER_RANK_S = 0.02
_PHASE_MEANING = {
    "bootstrap": ("bootstrap (the ranks finding each other over the out-of-band TCP network)",
                  "a rank that called init late (still loading a model, a slow container start), or the OOB "
                  "interface: check NCCL_SOCKET_IFNAME names an interface every host can reach, firewalls, DNS"),
    "connections": ("connections (transport setup: P2P/SHM buffers, NET/IB queue pairs)",
                    "transport setup: IB/RoCE link or GID problems, a slow network plugin, or many channels and peers; "
                    "look at the NET/IB lines and try NCCL_DEBUG_SUBSYS=INIT,NET"),
    "topo": ("topo (topology detection)", "topology detection: a slow `nvidia-smi`/NVML, many NICs or a PCI tree "
             "NCCL reads slowly; NCCL_TOPO_DUMP_FILE shows what it found"),
    "graphs": ("graphs (the search for rings and trees)", "the graph search: large or unusual topologies"),
    "allgathers": ("allgathers (the exchange of every rank's information)", "the out-of-band network between "
                   "hosts, as for bootstrap"),
    "alloc": ("alloc (device memory allocation)", "device memory allocation: a GPU nearly full, or cuMem/NVLS "
              "buffers; check free memory with nvidia-smi"),
    "kernels": ("kernels (loading NCCL's CUDA kernels)", "loading CUDA kernels: a first run after a driver "
                "install, lazy loading (CUDA_MODULE_LOADING), or a busy GPU"),
    "rest": ("rest (init work outside the timed phases)", "the untimed rest of init, often waiting on the other "
             "ranks of a split (ncclCommSplit) or on the application"),
}


def _label(run: NcclRun) -> str:
    if run.comm_id:
        return f"communicator {run.comm_id}"
    return f"{run.nranks}-rank communicator" if run.nranks else "an NCCL communicator"


# a finding's subject names the communicator as the other NCCL rules do (one key for `fleet` to count by)
_subject = _subject_run


def _ranges(numbers: list[int]) -> str:
    """`0-3, 6, 9-11` for a sorted list of ranks."""
    out: list[str] = []
    start = prev = None
    for number in numbers:
        if prev is not None and number == prev + 1:
            prev = number
            continue
        if start is not None:
            out.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = number
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(out)


# -- nccl-init-incomplete --------------------------------------------------------------------------


def check_init_incomplete(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for run in machine.nccl:
        state = run.init
        if state is None or not state.stuck_total:
            continue
        stuck = state.stuck
        ranks = _ranges([s.rank for s in stuck]) + (f" and {state.stuck_total - len(stuck)} more"
                                                     if state.stuck_total > len(stuck) else "")
        hosts = sorted({s.host for s in stuck if s.host})
        evidence = []
        lasts = []
        for item in stuck:
            if item.last is not None and (item.start is None or item.last.line != item.start.line):
                evidence.append(item.last)
                lasts.append(f"rank {item.rank} last printed line {item.last.line}")
            elif item.start is not None:
                evidence.append(item.start)
                lasts.append(f"rank {item.rank} printed nothing after its init start (line {item.start.line})")
        of = f" of {state.nranks}" if state.nranks else ""
        seen = (f"{counted(state.started, 'rank')}{of} started init, {state.completed} completed"
                if state.completed else f"{counted(state.started, 'rank')}{of} started init and none completed")
        missing = ""
        if state.missing_total:
            listed = _ranges(state.missing) + (" ..." if state.missing_total > len(state.missing) else "")
            missing = (f" {counted(state.missing_total, 'rank')} ({listed}) never appear in this log: their "
                       "processes never started init, or their output is in another file (another node's log).")
        confirm = (f"rerun with {INIT_DEBUG_HINT} and keep every rank's output; on "
                   f"{', '.join(hosts[:4]) or 'the hosts of those ranks'}: check the process is alive and where it waits "
                   "(`py-spy dump --pid PID` or `gdb -p PID -batch -ex 'thread apply all bt'`), and that the hosts reach "
                   "each other on the interface NCCL's Bootstrap line names (NCCL_SOCKET_IFNAME)")
        data = {"comm_id": run.comm_id, "nranks": state.nranks, "started": state.started,
                "completed": state.completed, "stuck_ranks": [s.rank for s in stuck],
                "stuck_total": state.stuck_total, "missing_total": state.missing_total, "excerpt": state.excerpt}
        if state.excerpt:
            yield Finding(
                id="nccl-init-incomplete",
                severity="info",
                kind="missing-evidence",
                subjects=[_subject(run)],
                title=f"NCCL init not seen to complete in this excerpt for {counted(state.stuck_total, 'rank')} "
                      f"({ranks}) of {_label(run)}",
                explanation=(
                    f"In {_label(run)}, {seen}: rank {ranks} printed an init start and no `Init COMPLETE`. This log "
                    f"is only part of one ({state.excerpt_why}), so the rest of init may simply not be quoted; it is "
                    f"not judged a hang.{missing}"
                ),
                evidence=evidence[:8],
                remedy="Give the whole log of the job (every rank's output) to have it judged.",
                confirm_with=confirm,
                data=data,
            )
            continue
        # an error trace (`init.cc:1234 -> 2`) says an init call failed; a WARN alone may be benign
        failed = any(m.level == "ERROR" for m in run.messages)
        why = ("NCCL printed error traces before the log ends (see nccl-warnings), so the job likely died in init"
               if failed else
               "other ranks of the communicator completed while these did not" if state.completed else
               "no rank of it completed")
        yield Finding(
            id="nccl-init-incomplete",
            severity="fail" if failed or state.completed else "warn",
            subjects=[_subject(run)],
            title=f"{counted(state.stuck_total, 'rank')} ({ranks}) of {_label(run)} started NCCL init and never "
                  "completed it",
            explanation=(
                f"In {_label(run)}, {seen}; rank {ranks} printed an init start and no `Init COMPLETE` before the log "
                f"ends: {why}. A rank stuck in init means the job hung or died there, most often in bootstrap (ranks "
                "that cannot reach each other over the out-of-band network, a rank that never called init) or while "
                "connecting the network transport (IB/RoCE, a net plugin). What each stuck rank printed last says "
                f"how far it got: {'; '.join(lasts[:4])}.{missing}"
            ),
            evidence=evidence[:8],
            remedy=("Look at the last lines of those ranks: a Bootstrap/socket line points at the OOB network "
                    "(NCCL_SOCKET_IFNAME, firewalls, every rank started?), NET/IB or plugin lines at the transport. "
                    "Make sure every rank of the communicator was launched and calls init with the same unique id."),
            confirm_with=confirm,
            data=data,
        )


# -- nccl-init-slow --------------------------------------------------------------------------------


def slow_threshold(nranks: int | None) -> float:
    return SLOW_INIT_BASE_S + SLOW_INIT_PER_RANK_S * (nranks or 0)


def check_init_slow(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for run in machine.nccl:
        timings = run.init_timings
        if timings is None or not timings.slowest:
            continue
        slowest = timings.slowest[0]
        limit = slow_threshold(slowest.nranks or run.nranks)
        if slowest.total <= limit:
            continue
        phase = slowest.dominant
        name, meaning = _PHASE_MEANING.get(phase or "", (phase or "an untimed phase", "the phase NCCL named"))
        share = (f"{slowest.phases[phase]:.2f} s of it in {name}" if phase else "no phase named")
        slow = [t for t in timings.slowest if t.total > limit]
        listing = ", ".join(f"rank {t.rank} {t.total:.2f} s" for t in slow[:4])
        fastest = (f"; the fastest rank timed took {timings.fastest_total:.2f} s"
                   if timings.fastest_total is not None and timings.ranks_timed > 1 else "")
        yield Finding(
            id="nccl-init-slow",
            severity="warn",
            subjects=[_subject(run)],
            title=f"NCCL init of {_label(run)} took {slowest.total:.1f} s (rank {slowest.rank}), mostly in {phase or 'untimed work'}",
            explanation=(
                f"NCCL's `Init timings` line of rank {slowest.rank} ({slowest.api}, {slowest.nranks} ranks) says init "
                f"took {slowest.total:.2f} s, {share}; {listing} of {counted(timings.ranks_timed, 'rank')} timed"
                f"{fastest}. k3diag reports an init over {limit:.0f} s for {slowest.nranks} ranks ({SLOW_INIT_BASE_S:.0f} s "
                f"plus {SLOW_INIT_PER_RANK_S * 1000:.0f} ms a rank): NCCL's own work takes seconds at most, so the rest "
                f"is waiting. Time in {phase or 'that phase'} points at {meaning}."
            ),
            evidence=[t.source for t in slow[:4] if t.source is not None],
            remedy=("For bootstrap: start every rank together (time to load a model before init counts here) and check "
                    "NCCL_SOCKET_IFNAME; for connections: check the NICs (ibv_devinfo, link state) and the net plugin's "
                    "lines in the log."),
            confirm_with=f"{INIT_DEBUG_HINT} (the Bootstrap timings and NET lines of the slow rank)",
            data={"comm_id": run.comm_id, "rank": slowest.rank, "nranks": slowest.nranks, "total_s": slowest.total,
                  "dominant_phase": phase, "threshold_s": limit, "ranks_timed": timings.ranks_timed},
        )


RULES = (
    Rule("nccl-init-incomplete", "fail", "NCCL ranks started init and never completed it", check_init_incomplete,
         kind="fault"),
    Rule("nccl-init-slow", "warn", "NCCL communicator init took unusually long", check_init_slow, kind="fault"),
)
