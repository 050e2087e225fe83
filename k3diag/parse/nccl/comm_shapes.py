"""The shapes of the communicator lines (`ncclCommInitRank comm 0x.. - Init START`, `comm 0x.. rank R nRanks N
...`): the strict matches of the usual ones, the tokenizer that reads any other, and the bus id they name.
Every rank of every communicator prints three or four such lines, so they are read once each, at C speed."""

from __future__ import annotations

import re

from k3diag.parse.ids import bdf_from_nccl_busid

# `ncclCommInitRank comm 0x.. rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 1b000 commId 0x.. - Init START`; the
# first word is the API that made the communicator (NCCL's `__func__`): ncclCommInitRankConfig (PyTorch since
# 2.14), ncclCommInitRankScalable (2.23+), ncclCommInitAll, RCCL's ncclCommInitAll_impl. ncclCommSplit and
# ncclCommShrink lines name a parent instead of a commId: they take the general path
INIT_LINE_RE = re.compile(
    r"ncclComm(?:InitRank|InitRankConfig|InitRankScalable|InitAll|InitAll_impl) comm (0x[0-9a-fA-F]+) "
    r"rank ([0-9]+) nranks ([0-9]+) cudaDev ([0-9]+) nvmlDev ([0-9]+) busId ([0-9a-fA-F]+) commId (0x[0-9a-fA-F]+) - Init (?:START|COMPLETE)", re.ASCII)
INIT_KEYS = ("rank", "nranks", "cudadev", "nvmldev", "busid", "commid")
# `comm 0x.. rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0`
COMM_LINE_RE = re.compile(
    r"comm (0x[0-9a-fA-F]+) rank ([0-9]+) nRanks ([0-9]+) nNodes ([0-9]+) localRanks ([0-9]+) localRank ([0-9]+)"
    r"(?: MNNVL [0-9]+)?", re.ASCII)
COMM_LINE_KEYS = ("rank", "nranks", "nnodes", "localranks", "localrank")

_COMM_KEYS = {"rank": "rank", "nranks": "nranks", "nRanks": "nranks", "nNodes": "nnodes", "localRanks": "localranks",
              "localRank": "localrank", "cudaDev": "cudadev", "nvmlDev": "nvmldev", "busId": "busid", "commId": "commid"}
_COMM_KEY_SET = frozenset(_COMM_KEYS)
_COMM_KEY_ORDER = {token: index for index, token in enumerate(_COMM_KEYS)}
_HEX = frozenset("0123456789abcdefABCDEFx")


def comm_values(body: str) -> dict[str, str]:
    """`rank 3 nRanks 16 nNodes 2 ... busId 1b000 commId 0x..`: the first value of each known key
    (a C-level dict of token -> next token instead of a regex: three such lines per rank and
    communicator; built from the end so that the first occurrence wins)."""
    tokens = body.split()
    following = dict(zip(tokens[-2::-1], tokens[:0:-1]))
    values: dict[str, str] = {}
    for token in sorted(_COMM_KEY_SET.intersection(following), key=_COMM_KEY_ORDER.__getitem__):
        name = _COMM_KEYS[token]
        value = following[token]
        if name not in values:
            value = value.rstrip(",;.")
            if value and _HEX.issuperset(value) and value.find("x") in (-1, 1):
                values[name] = value
    return values


BUS_CACHE: dict[str, str | None] = {}


def bus_id(text: str) -> str | None:
    """The PCI address a `busId` value names (None if it names none), remembered per text."""
    value = BUS_CACHE.get(text, "")
    if value == "":
        # `busId` is printed with %lx: a GPU on bus 0 (AWS g5 `1e0` = 0000:00:1e.0, GCP `30` = 0000:00:03.0) has
        # fewer than the 4 digits `bdf_from_nccl_busid` asks of a bracket, where a short value is a device number
        value = bdf_from_nccl_busid(text.rjust(4, "0") if 2 <= len(text) < 4 else text)
        if len(BUS_CACHE) < 4096:
            BUS_CACHE[text] = value
    return value
