"""The bytes fast path reads runs of one thread's lines in bulk (the `Channel` lines folded between the
lines that name `comm 0x`, the other lines dispatched by a cached kind, log-wide facts read once per
host): random mixtures of every kind of line it treats so, in rank blocks and interleaved, with the
ways real pastes break them (CRLF, NUL, non-ASCII, glued records, lines cut mid-way, launcher
prefixes, error traces), give exactly what the per-line path gives."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nccl_equivalence import canon as _canon
from nccl_equivalence import exact

from k3diag.parse.nccl import comm_shapes, fast, handlers, parse_bytes

BODIES = [
    "ncclCommInitRank comm 0x{ptr} rank {rank} nranks {n} cudaDev {dev} nvmlDev {dev} busId {bus} commId 0x{cid} - Init START",
    "comm 0x{ptr} rank {rank} nRanks {n} nNodes 1 localRanks {n} localRank {rank} MNNVL 0",
    "ncclCommInitRank comm 0x{ptr} rank {rank} nranks {n} cudaDev {dev} nvmlDev {dev} busId {bus} commId 0x{cid} - Init COMPLETE",
    "Channel {ch:02d}/0 : {rank}[{dev}] -> {peer}[{pdev}] via P2P/CUMEM/read",
    "Channel {ch:02d}/1 : {rank}[{dev}] -> {peer}[{pdev}] [send] via NET/IB/{nic}/GDRDMA",
    "Channel {ch:02d}/0 : {peer}[{pdev}] -> {rank}[{dev}] [receive] via NET/Socket/{nic}",
    "Channel {ch:02d} : {rank}[{dev}] -> {peer}[{pdev}] via SHM/direct/direct",
    "Channel {ch:02d}/0 : {rank}[{dev}] -> {peer}[{pdev}] via P2P/IPC comm 0x{ptr} nRanks {n:02d}",
    "Channel {ch:02d}/0 : {rank}[{dev}] -> {peer}[{pdev}] via WARP/drive",  # a transport k3diag does not know
    "Channel {ch:02d}/02 :    0   1   2   3",
    "Channel {ch:02d}/0 : {rank}[{dev}] -> {peer}[{pdev}] via P2P/CUMEM/read  host9:1:2 [0] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
    "Channel {ch:02d}/0 : {rank}[{dev}] -> {peer}[{pdev}] via P2P/CUMEM/read : opCount 3",
    "Channel {ch:02d}/0 : {rank}[{dev}] -> {peer}",
    "Channelx {ch:02d}/0 : {rank}[{dev}] -> {peer}[{pdev}] via P2P/CUMEM/read",
    "Ring {ch:02d} : {rank}[{dev}] -> {peer}[{pdev}] via P2P/IPC",
    "Ring {ch:02d} : 3 -> {rank} -> 5",
    "Trees [0] {peer}/-1/-1->{rank}->-1 [1] -1/-1/-1->{rank}->{peer}",
    "Tree 0 : -1 -> {rank} -> {peer}",
    "16 coll channels, 0 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer",
    "NCCL_IB_HCA set by environment to mlx5",
    "NCCL_P2P_LEVEL set by environment to {nic}",
    "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_{nic}:1/IB [RO]; OOB eth0:10.1.0.1<0>",
    "NET/IB : No device found.",
    "Using network IB",
    "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",
    "GPU Direct RDMA Disabled for GPU {bus} / HCA 0 (distance 5 > 4)",
    "P2P is disabled between connected GPUs {dev} and {pdev}",
    "P2P Chunksize set to 131072",
    "Connected all rings comm 0x{ptr} nRanks {n:02d} busId {bus}",
    "Connected all rings, use ring PXN 0 GDR 1",
    "Setting affinity for GPU {dev} to ffff,ffffffff",
    "Init timings - ncclCommInitRank: rank {rank} nranks {n} total 1.52",
    "AllReduce: opCount {ch:x} sendbuff 0x7f3a1c000000 count 16 datatype 7 op 0 root 0 comm 0x{ptr} [nranks={n}]",
    "misc/socket.cc:567 -> 2",
    "transport/net.cc:{ch} -> 3 [Proxy Thread]",
    "MNNVL busId 0x{bus} cliqueId 0x1 state 3 healthMask 0x{nic}a",
    "NVLS multicast support is not available on dev {dev}",
    "CollNet {ch:02d}/0 : {rank} [receive] via COLLNET/SHARP/{nic}/GDRDMA",
    "GPU/{bus} :GPU/{bus} (0/5000.0/LOC) NET/0 (3/24.0/PHB)",
    "Pattern 4, crossNic 0, nChannels 16, bw 40.0/40.0, type NVL/PIX, sameChannels 1",
    "DMA-BUF is available on GPU device {dev}",
    "comm 0x{ptr} rank {rank} nRanks {n} nNodes 1 localRanks {n} localRank {rank} MNNVL 0 extra",
    "ncclCommInitRank comm 0x{ptr} rank {rank} nranks {n} cudaDev {dev} busId {bus} - Init COMPLETE",
    "NCCL version 2.21.5+cuda12.4",
    "cudaDriverVersion 12040",
    "-> 4",
    "Chan",
    "",
]
PREFIXES = ["{host}:{pid}:{tid} [{dev}] NCCL INFO ", "[1,{rank}]<stdout>:{host}:{pid}:{tid} [{dev}] NCCL INFO ",
            "{host} [{dev}] NCCL INFO ", "2024-05-01 10:00:0{dev} : {host}:{pid}:{tid} [{dev}] NCCL INFO ",
            "{host}:{pid}:{tid} [{dev}] misc/socket.cc:49 NCCL WARN ", "{host}:{pid}:{tid} [{dev}] NCCL INFO comm 0x1 "]
OTHER = ["[rank3]: step 4 loss 2.1", "NCCL version 2.21.5+cuda12.4", "#  Rank  0 Group  0 Pid 9 on h1 device  0 [0x1b] H100",
         "export NCCL_P2P_DISABLE=1", "junk \x00 here", "héllo wörld NCCL", "RuntimeError: NCCL error in ...", "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"]
MUTATIONS = ["none"] * 12 + ["crlf", "cut", "nul", "utf8", "glue", "tab"]


def _line(rng: random.Random, thread: dict, prefix: str) -> str:
    rank = thread["rank"]
    fields = dict(thread, ch=rng.randrange(4), peer=(rank + 1) % 4, pdev=(thread["dev"] + 1) % 4, nic=rng.randrange(3))
    text = prefix.format(**fields) + rng.choice(BODIES).format(**fields)
    mutation = rng.choice(MUTATIONS)
    if mutation == "crlf":
        text += "\r"
    elif mutation == "cut":
        text = text[: rng.randrange(len(text) + 1)]
    elif mutation == "nul":
        text = text.replace(" ", "\x00", 1)
    elif mutation == "utf8":
        text += " µs"
    elif mutation == "glue":
        text += "  " + prefix.format(**fields) + "Channel 02/0 : 1[1] -> 2[2] via P2P/CUMEM/read"
    elif mutation == "tab":
        text = text.replace(" ", "\t", 1)
    return text


def _log(seed: int, threads: int, runs: int, interleave: bool) -> str:
    rng = random.Random(seed)
    pool = [dict(host=f"h{t % 2}", pid=100 + t // 2, tid=200 + t, dev=t % 4, rank=t % 4, n=4, ptr=f"{0x55d0 + t % 3:x}",
                 cid="abc" if t % 3 else "def", bus=["1b000", "2a000", "3a000", "5d000"][t % 4]) for t in range(threads)]
    lines: list[str] = []
    for _ in range(runs):
        thread = rng.choice(pool)
        prefix = rng.choice(PREFIXES) if rng.random() < 0.2 else PREFIXES[0]
        count = rng.randrange(1, 6) if interleave else rng.randrange(8, 60)
        lines.extend(_line(rng, thread, prefix) for _ in range(count))
        if rng.random() < 0.1:
            lines.append(rng.choice(OTHER))
    return "\n".join(lines) + "\n"


def _exact(text: str) -> str:
    return exact(text, "mix.log")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1 << 30), st.integers(1, 12), st.integers(1, 40), st.booleans())
def test_random_mixtures_read_the_same_in_bulk(seed: int, threads: int, runs: int, interleave: bool) -> None:
    text = _log(seed, threads, runs, interleave)
    data = text.encode("utf-8")
    assert _canon(parse_bytes(data, "mix.log")) == _exact(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1 << 30), st.integers(1, 12), st.integers(1, 40), st.booleans())
def test_facts_read_once_per_host_give_what_reading_every_line_gives(seed: int, threads: int, runs: int,
                                                                     interleave: bool) -> None:
    """Both paths read a log-wide fact (environment, network, channel counts) once per host and text
    (`patterns.read_once`): the result must be the one of reading every such line again."""
    text = _log(seed, threads, runs, interleave)
    every_line = exact(text, "mix.log", every_line=True)
    assert _exact(text) == every_line
    assert _canon(parse_bytes(text.encode("utf-8"), "mix.log")) == every_line


def test_clean_rank_blocks_read_the_same_in_bulk() -> None:
    """Without mutations, so that nearly every run takes the bulk path (and its fold) whole."""
    saved = list(MUTATIONS)
    MUTATIONS[:] = ["none"]
    try:
        for seed in range(40):
            text = _log(seed, 8, 30, False)
            assert _canon(parse_bytes(text.encode(), "mix.log")) == _exact(text), seed
    finally:
        MUTATIONS[:] = saved


COMM_LINE = st.builds(
    lambda ptr, rank, n, dev, nvml, bus, cid, end: (
        f"ncclCommInitRank comm 0x{ptr:x} rank {rank} nranks {n} cudaDev {dev} nvmlDev {nvml} busId {bus} "
        f"commId 0x{cid:x} - Init {end}"),
    st.integers(0, 1 << 48), st.integers(0, 5000), st.integers(1, 5000), st.integers(0, 16), st.integers(0, 16),
    st.sampled_from(["1b000", "db000", "0", "abcdef", "18000"]), st.integers(0, 1 << 64),
    st.sampled_from(["START", "COMPLETE"]))
RANK_LINE = st.builds(
    lambda ptr, rank, n, nodes, local, mnnvl: (
        f"comm 0x{ptr:x} rank {rank} nRanks {n} nNodes {nodes} localRanks {local} localRank {rank % max(local, 1)}"
        + (f" MNNVL {mnnvl}" if mnnvl is not None else "")),
    st.integers(0, 1 << 48), st.integers(0, 5000), st.integers(1, 5000), st.integers(1, 64), st.integers(1, 8),
    st.one_of(st.none(), st.integers(0, 1)))


@settings(max_examples=200, deadline=None)
@given(st.one_of(COMM_LINE, RANK_LINE))
def test_strict_communicator_lines_give_the_tokenized_values(body: str) -> None:
    """`_comm` reads the two usual shapes with one strict match: the values must be the tokenizer's."""
    strict = comm_shapes.INIT_LINE_RE.fullmatch(body) or comm_shapes.COMM_LINE_RE.fullmatch(body)
    assert strict is not None
    keys = comm_shapes.INIT_KEYS if strict.re is comm_shapes.INIT_LINE_RE else comm_shapes.COMM_LINE_KEYS
    assert dict(zip(keys, strict.groups()[1:])) == comm_shapes.comm_values(body)
    assert strict.group(1).lower() == handlers.P.COMM_RE.search(body).group(1).lower()


def test_a_block_opening_with_glued_records_names_the_host_on_the_first_record() -> None:
    """Found by the mixtures above (seed 109): the exact path splits records glued on one line and quotes
    the first alone as where the host was seen; the bulk path quoted the whole line."""
    text = _log(109, 1, 1, False)
    assert text.startswith("h0:100:200 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC  h0:100:200")
    assert _canon(parse_bytes(text.encode("utf-8"), "mix.log")) == _exact(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 1 << 30), st.integers(1, 12), st.integers(1, 40), st.booleans())
def test_every_run_read_in_bulk_whatever_its_length(monkeypatch, seed: int, threads: int, runs: int,
                                                    interleave: bool) -> None:
    """A run of one line or of a few long ones goes to the bulk reader too (`fast.LONG_RUN_BYTES`: its lines
    are not counted first): with every run sent there, the result is still the per-line path's."""
    monkeypatch.setattr(fast, "LONG_RUN_BYTES", 0)
    text = _log(seed, threads, runs, interleave)
    assert _canon(parse_bytes(text.encode("utf-8"), "mix.log")) == _exact(text)


def _kind_of_bytes(body: bytes) -> str:
    """`fast._kind` as first written, on the bytes themselves: what the text version must keep giving."""
    if b": opCount " in body:
        return fast._COLL
    tag = body[:4]
    action = {tag[5:].encode(): action for tag, action in handlers.P.TAG_ACTIONS.items()}.get(tag)
    if action is None:
        if len(body) < 16 or body.startswith(b"-> ") or body.find(b" -> ", len(body) - 16) >= 0:
            return fast._EXACT
        if not (tag[:1].isdigit() and handlers.P.COUNT_TAG_NEEDS.encode() in body):
            return fast._DROPPED
    elif action == 1:
        return fast._EXACT
    else:
        need = {tag[5:].encode(): need.encode() for tag, need in handlers.P.TAG_NEEDS.items()}.get(tag)
        if need is not None and need not in body:
            return fast._DROPPED
    if b"comm 0x" in body:
        return fast._CUT
    if handlers.P.read_once(body.decode()):
        return fast._ONCE
    return fast._READ


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(BODIES) - 1), st.integers(0, 1 << 30), st.sampled_from(["", " ", "  x", " -> 2", " : opCount 1"]))
def test_the_kind_of_a_line_read_as_text_is_the_kind_read_as_bytes(index: int, seed: int, tail: str) -> None:
    rng = random.Random(seed)
    fields = dict(rank=rng.randrange(8), dev=rng.randrange(8), n=8, ptr="55d0", cid="abc", bus="1b000",
                  ch=rng.randrange(4), peer=1, pdev=1, nic=rng.randrange(3))
    body = (BODIES[index].format(**fields) + tail).encode()
    for cut in (len(body), rng.randrange(len(body) + 1)):
        assert fast._kind(body[:cut]) == _kind_of_bytes(body[:cut])
