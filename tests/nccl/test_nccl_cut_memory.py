"""A log cut in two to be read in parallel keeps bounded memory however many jobs it holds: the later
part remembers only the first forgotten threads (those the earlier part left busy speak again right after
the cut) and the first keys of the runs it built; the result is still the one pass's, and a thread whose
state could not be followed across the cut is counted and said."""

from __future__ import annotations

from nccl_equivalence import canon

from k3diag.parse.nccl import parse_bytes, parse_path
from k3diag.parse.nccl import patterns as P
from k3diag.parse.nccl import pool
from k3diag.parse.nccl.parser import NcclLogParser


def _rank_lines(job: int, rank: int, ranks: int, complete: bool = True, comm: int | None = None) -> list[str]:
    pid = 1000 * (job + 1) + rank
    pre = f"node{rank // 4}:{pid}:{pid + 7} [{rank % 4}] NCCL INFO "
    ptr = f"0x{0x5000 + 16 * job + rank:x}"
    comm_id = f"0x{comm if comm is not None else 0xabc000 + job:x}"
    init = (f"ncclCommInitRank comm {ptr} rank {rank} nranks {ranks} cudaDev {rank % 4} nvmlDev {rank % 4} "
            f"busId {rank % 4 + 1}8000 commId {comm_id} - Init ")
    lines = [pre + init + "START",
             pre + f"comm {ptr} rank {rank} nRanks {ranks} nNodes {ranks // 4} localRanks 4 localRank {rank % 4} "
                   "MNNVL 0"]
    lines += [pre + f"Channel {ch:02d}/0 : {rank}[{rank % 4}] -> {(rank + 1) % ranks}[{(rank + 1) % 4}] via P2P/IPC"
              for ch in range(8)]
    if complete:
        lines.append(pre + init + "COMPLETE")
    return lines


def _jobs(first: int, count: int, ranks: int = 8) -> list[str]:
    return [line for job in range(first, first + count) for rank in range(ranks)
            for line in _rank_lines(job, rank, ranks)]


def _cut_in_two(monkeypatch, tmp_path, text: str):
    path = tmp_path / "jobs.log"
    path.write_text(text)
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pool, "PICKLE_LEAD_BYTES", 0)
    parts: list[NcclLogParser] = []
    run_parts = pool._run_parts

    def keep_parts(*args):
        parts.extend(run_parts(*args))
        return parts

    monkeypatch.setattr(pool, "_run_parts", keep_parts)
    return parse_path(path, "jobs.log", workers=2), parts


def test_the_later_part_remembers_a_bounded_number_of_threads_and_runs(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(P, "MAX_THREADS", 16)
    monkeypatch.setattr(P, "MAX_ADOPTERS", 24)
    monkeypatch.setattr(P, "MAX_FINALIZED_KEYS", 5)
    text = "\n".join(_jobs(0, 60)) + "\n"
    cut, parts = _cut_in_two(monkeypatch, tmp_path, text)
    later = parts[1]
    assert len(later.adopters) == 24 and later.adopters_dropped > 100
    assert len(later.finalized_keys) == 5 and later.finalized_more
    assert len(parts[0].finalized_keys) == 5  # the merged first part: bounded too
    # what the user sees is what one pass gives: every job's run, counted; no thread left uncertain
    assert canon(cut) == canon(parse_bytes(text.encode(), "jobs.log"))
    assert cut.summary.runs_total == 60
    assert "cut_threads" not in cut.summary.not_kept


def test_late_lines_still_find_their_run_when_only_a_few_run_keys_are_remembered(monkeypatch) -> None:
    # 12 runs built while reading, 2 keys remembered: a process's connection line printed after its run was
    # built (lazy p2p) is still that run's, as when every key was remembered
    lines = _jobs(0, 12, ranks=4)
    lines.append("node0:1000:1007 [0] NCCL INFO Channel 09/1 : 0[0] -> 2[2] via P2P/IPC")
    text = "\n".join(lines) + "\n"
    full = canon(parse_bytes(text.encode(), "late.log"))
    monkeypatch.setattr(P, "MAX_FINALIZED_KEYS", 2)
    assert canon(parse_bytes(text.encode(), "late.log")) == full


def test_a_thread_busy_at_the_cut_that_is_forgotten_past_the_bound_is_counted(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(P, "MAX_THREADS", 16)
    monkeypatch.setattr(P, "MAX_ADOPTERS", 8)
    # job 0's rank 0 never completes its init (busy at the cut); its thread speaks again only at the very end,
    # after 40 jobs of other threads in the later part
    busy = _rank_lines(0, 0, 8, complete=False)
    again = [line.replace("0x5000 ", "0x5999 ").replace("commId 0xabc000", "commId 0xfff000")
             for line in _rank_lines(0, 0, 1)]
    text = "\n".join(_jobs(1, 40) + busy + _jobs(41, 40) + again) + "\n"
    cut, parts = _cut_in_two(monkeypatch, tmp_path, text)
    assert parts[1].adopters_dropped > 0
    assert cut.summary.to_json()["not_kept"] == {"cut_threads": 1}
    assert ("1 thread busy where the file was cut to be read in parallel could not be followed across the cut: "
            "the later part forgot more than 8 threads before they spoke again") in " ".join(cut.warnings)


def test_a_log_cut_in_four_with_the_bounds_lowered_reads_as_one_pass(monkeypatch, tmp_path) -> None:
    # each later part forgets threads past its bound; the merges chain (a thread busy at the first cut is
    # followed through the second and third parts) and still give the one pass's result
    monkeypatch.setattr(P, "MAX_THREADS", 16)
    monkeypatch.setattr(P, "MAX_ADOPTERS", 24)
    monkeypatch.setattr(P, "MAX_FINALIZED_KEYS", 5)
    lines = _jobs(0, 50)
    # a process whose rank prints its connection lines before any communicator line (pending), in every part
    for index in range(0, len(lines), len(lines) // 6):
        lines.insert(index, "late:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC")
    text = "\n".join(lines) + "\n"
    path = tmp_path / "jobs.log"
    path.write_text(text)
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pool, "PICKLE_LEAD_BYTES", 0)
    one_pass = canon(parse_bytes(text.encode(), "jobs.log"))
    for workers in (3, 4):
        assert canon(parse_path(path, "jobs.log", workers=workers)) == one_pass
