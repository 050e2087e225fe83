"""`NcclRun.rank_info` answers from an index (the rules ask it for both ends of every pair) and still
gives what a scan of `ranks` gives: the first entry of a rank, after `ranks` is replaced or grows."""

from __future__ import annotations

from k3diag.model.nccl import NcclRank, NcclRun


def test_the_first_entry_of_a_rank_and_none_for_an_unknown_rank() -> None:
    run = NcclRun(ranks=[NcclRank(rank=0, host="a"), NcclRank(rank=1, host="b"), NcclRank(rank=1, host="c")])
    assert run.rank_info(1).host == "b"
    assert run.host_of(0) == "a"
    assert run.rank_info(7) is None and run.host_of(7) is None


def test_the_index_follows_ranks_replaced_or_appended() -> None:
    run = NcclRun(ranks=[NcclRank(rank=0, host="a")])
    assert run.rank_info(1) is None
    run.ranks.append(NcclRank(rank=1, host="b"))
    assert run.host_of(1) == "b"
    run.ranks = [NcclRank(rank=1, host="z")]
    assert run.host_of(1) == "z" and run.rank_info(0) is None
