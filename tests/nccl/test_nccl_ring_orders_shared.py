"""Ring orders are read once per distinct order: rank 0 of a big job prints one order per channel, often
the same ranks on every channel (16 lists of 8,192 new ints were ~5 MB per job). What the user sees, each
channel's order, is what the per-line path gives, on one pass and across the pool's cut."""

from __future__ import annotations

from pathlib import Path

from nccl_equivalence import canon, exact

from k3diag.parse.nccl import parse_bytes, pool

NRANKS = 600  # a ring longer than any cached line (`patterns.MAX_CACHED_TEXT`)


def _log(reversed_channel: int) -> str:
    pre = "node1:100:101 [0] NCCL INFO "
    forward = "".join(f" {rank:3d}" for rank in range(NRANKS))
    backward = "".join(f" {rank:3d}" for rank in reversed(range(NRANKS)))
    lines = [pre + f"ncclCommInitRank comm 0x55d01 rank 0 nranks {NRANKS} cudaDev 0 nvmlDev 0 busId 18000 "
                   "commId 0xabc - Init START",
             pre + f"comm 0x55d01 rank 0 nRanks {NRANKS} nNodes 75 localRanks 8 localRank 0 MNNVL 0"]
    lines += [pre + f"Channel {ch:02d}/04 :" + (backward if ch == reversed_channel else forward) for ch in range(4)]
    lines += [pre + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"]
    return "\n".join(lines) + "\n"


def test_channels_with_the_same_order_share_it_and_another_order_stays_its_own() -> None:
    text = _log(reversed_channel=2)
    result = parse_bytes(text.encode(), "ring.log")
    assert canon(result) == exact(text, "ring.log")
    (run,) = result.runs
    orders = {ring.channel: ring.order for ring in run.rings}
    assert orders[0] == orders[1] == orders[3] == list(range(NRANKS))
    assert orders[2] == list(reversed(range(NRANKS)))
    assert orders[0] is orders[1] is orders[3]  # one list for the three channels that print the same ranks
    assert orders[0][599] is orders[2][0]  # one int per rank


def test_the_orders_are_the_same_when_the_file_is_cut_for_two_processes(tmp_path: Path, monkeypatch) -> None:
    text = _log(reversed_channel=1) * 3
    path = tmp_path / "ring.log"
    path.write_text(text)
    monkeypatch.setattr(pool, "PICKLE_LEAD_BYTES", 0)
    cut = pool.parse_file(path, "ring.log", workers=2)
    assert canon(cut) == canon(pool.parse_file(path, "ring.log", workers=1)) == exact(text, "ring.log")
    assert [ring.order[:3] for ring in cut.runs[0].rings] == [[0, 1, 2], [599, 598, 597], [0, 1, 2], [0, 1, 2]]
