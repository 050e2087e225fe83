"""The bulk path lets the connection aggregates of many ranks share one set of channel codes (a job's ranks print
the same channels); a line read on its own later adds to its own aggregate only. What the user sees, each
connection's channels and line count, is what the per-line path gives."""

from __future__ import annotations

from nccl_equivalence import canon, exact

from k3diag.parse.nccl import parse_bytes


def _block(host: str, pid: int, rank: int, peer: int, extra: str = "") -> list[str]:
    pre = f"{host}:{pid}:{pid + 1} [{rank}] NCCL INFO "
    lines = [pre + f"ncclCommInitRank comm 0x55d0{rank} rank {rank} nranks 2 cudaDev {rank} nvmlDev {rank} "
                   f"busId {rank + 1}8000 commId 0xabc - Init START",
             pre + f"comm 0x55d0{rank} rank {rank} nRanks 2 nNodes 1 localRanks 2 localRank {rank} MNNVL 0"]
    lines += [pre + f"Channel {ch:02d}/0 : {rank}[{rank}] -> {peer}[{peer}] via P2P/CUMEM/read" for ch in range(16)]
    if extra:
        lines.append(pre + extra)
    lines.append(pre + f"ncclCommInitRank comm 0x55d0{rank} rank {rank} nranks 2 cudaDev {rank} nvmlDev {rank} "
                       f"busId {rank + 1}8000 commId 0xabc - Init COMPLETE")
    return lines


def test_a_line_added_to_a_shared_set_changes_only_its_own_connection() -> None:
    # rank 0's 16 channels folded from a plan, then channel 16 of the same pair on a line with trailing blanks
    # (read on its own); rank 1 folds the same channels from the same codes and must keep 16
    text = "\n".join(_block("node1", 100, 0, 1, extra="Channel 16/0 : 0[0] -> 1[1] via P2P/CUMEM/read  ")
                     + _block("node1", 200, 1, 0)) + "\n"
    bulk = parse_bytes(text.encode(), "run.log")
    assert canon(bulk) == exact(text, "run.log")
    lines = {(c.src_rank, c.dst_rank): c.lines for run in bulk.runs for c in run.connections}
    assert lines == {(0, 1): 17, (1, 0): 16}
