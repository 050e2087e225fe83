"""Roofline estimates of decode time per token: what memory bandwidth and links allow, at best.

Decode reads every active weight and the sequence's KV/state once per step. Within a pipeline
stage the GPUs read their shards in parallel, so a stage takes as long as its busiest GPU needs
to stream its bytes at peak bandwidth; one token then passes the stages one after another, so
the floor is the sum over stages. Replicated tensors (MLA down-projections, latent MoE
projections, routers) are read by every GPU, which is why TP8 does not make the floor 8x smaller.

Communication per token: tensor parallelism all-reduces the hidden state twice per layer
(after attention and after the FFN/MoE), each a ring costing 2(n-1) x latency + 2(n-1)/n x
bytes / bandwidth; expert parallelism sends each token's top_k expert inputs out (dispatch) and
the outputs back (combine) per MoE layer; pipeline stages hand the hidden state on.

These are floors: no kernel reaches peak bandwidth, and real engines overlap some of this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from k3diag.advise.architecture import EXPERTS, ModelSpec, embedding_items, head_items, layer_items
from k3diag.advise.dtypes import bytes_per_param
from k3diag.advise.links import LinkInfo
from k3diag.advise.memory import Layout, StageLedger, item_dtype, shard_fraction, stage_items
from k3diag.model.shared import shared


def ring_allreduce_us(n: int, nbytes: float, link: LinkInfo) -> float:
    """Ring all-reduce: 2(n-1) steps of latency plus 2(n-1)/n of the buffer over the link."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * link.latency_us + 2 * (n - 1) / n * nbytes / (link.bandwidth_gbs * 1e3)


def alltoall_us(n: int, nbytes: float, link: LinkInfo) -> float:
    """All-to-all of `nbytes` per rank: a message to each of the n-1 peers (latency each, as
    nccl-tests alltoall times grow with the rank count) and (n-1)/n of the bytes leave the GPU."""
    if n <= 1:
        return 0.0
    return (n - 1) * link.latency_us + (n - 1) / n * nbytes / (link.bandwidth_gbs * 1e3)


def expected_distinct_experts(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected experts a step touches when `tokens` tokens each pick top_k of num_experts (uniform routing)."""
    return num_experts * (1 - (1 - top_k / num_experts) ** tokens)


def _poly_mul(a: list[int], b: list[int], degree: int) -> list[int]:
    out = [0] * min(len(a) + len(b) - 1, degree + 1)
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b[: degree + 1 - i]):
                out[i + j] += x * y
    return out


def _poly_pow(base: list[int], exponent: int, degree: int) -> list[int]:
    result = [1]
    while exponent:
        if exponent & 1:
            result = _poly_mul(result, base, degree)
        base = _poly_mul(base, base, degree)
        exponent >>= 1
    return result


@lru_cache(maxsize=256)
def expected_max_experts_per_rank(num_experts: int, top_k: int, ranks: int) -> float:
    """Expected number of one token's top_k experts that land on the busiest of `ranks` EP ranks.

    Exact for uniform routing over experts split evenly: P(max <= m) counts the ways to choose
    top_k experts with at most m from each rank ([x^k] of (sum_j<=m C(g,j) x^j)^ranks) over C(E,k).
    That busiest rank sets the step's time, not the average top_k / ranks.
    """
    if ranks <= 1:
        return float(top_k)
    small, extra = divmod(num_experts, ranks)  # `extra` ranks hold one expert more
    total = math.comb(num_experts, top_k)
    expected = 0.0
    previous = 0.0
    for m in range(0, top_k + 1):
        big = _poly_pow([math.comb(small + 1, j) for j in range(min(m, small + 1) + 1)], extra, top_k)
        rest = _poly_pow([math.comb(small, j) for j in range(min(m, small) + 1)], ranks - extra, top_k)
        poly = _poly_mul(big, rest, top_k)
        cdf = (poly[top_k] if len(poly) > top_k else 0) / total
        expected += m * (cdf - previous)
        previous = cdf
    return expected


@dataclass
class Roofline:
    floor_ms: float
    weights_ms: float
    state_ms: float
    comm_ms: float
    tp_ms: float
    ep_ms: float
    pp_ms: float
    busiest_gpu_gb: float  # bytes the busiest GPU of the worst stage reads per step
    aggregate_floor_ms: float  # all bytes read once / (GPUs x bandwidth): the naive figure
    batch: int
    lines: list[str] = field(default_factory=list)

    @property
    def estimate_ms(self) -> float:
        return self.floor_ms + self.comm_ms

    @property
    def dominant(self) -> str:
        return "communication" if self.comm_ms > self.floor_ms else "memory bandwidth"

    def to_json(self) -> dict:
        return {
            "batch": self.batch,
            "decode_ms_floor": round(self.floor_ms, 3),
            "decode_ms_comm": round(self.comm_ms, 3),
            "decode_ms_estimate": round(self.estimate_ms, 3),
            "weights_ms": round(self.weights_ms, 3),
            "state_ms": round(self.state_ms, 3),
            "tp_allreduce_ms": round(self.tp_ms, 3),
            "ep_alltoall_ms": round(self.ep_ms, 3),
            "pp_sendrecv_ms": round(self.pp_ms, 3),
            "busiest_gpu_gb_per_step": round(self.busiest_gpu_gb, 3),
            "aggregate_floor_ms": round(self.aggregate_floor_ms, 3),
            "dominant": self.dominant,
            "explain": list(self.lines),
        }


def weights_read_per_token_bytes(spec: ModelSpec) -> float:
    """Bytes of weights one token reads at batch 1 on one GPU holding everything (no replication)."""
    return shared(spec, "weights_read_per_token", lambda: _weights_read_per_token_bytes(spec))


def _weights_read_per_token_bytes(spec: ModelSpec) -> float:
    a = spec.arch
    total = 0.0
    for i in range(a.num_layers):
        for item in layer_items(a, i):
            nbytes = item.params * bytes_per_param(item_dtype(item, spec))
            if item.shard == EXPERTS:
                nbytes *= a.experts_per_token / a.num_experts
            total += nbytes
    for item in head_items(a):
        total += item.params * bytes_per_param(item_dtype(item, spec))
    for item in embedding_items(a):
        if item.read_per_token:
            total += item.params * bytes_per_param(item_dtype(item, spec))
    return total


def _stage_weight_bytes(spec: ModelSpec, layout: Layout, stage: int, bounds: tuple[int, int], batch: int) -> float:
    a = spec.arch
    total = 0.0
    for item, count in stage_items(spec, layout, stage, bounds):
        if not item.read_per_token:
            continue
        nbytes = item.params * count * bytes_per_param(item_dtype(item, spec))
        if item.shard == EXPERTS:
            per_expert = nbytes / a.num_experts
            if layout.ep == 1:
                touched = expected_distinct_experts(a.num_experts, a.experts_per_token, batch)
                total += touched * per_expert / layout.tp
            elif batch == 1:
                total += expected_max_experts_per_rank(a.num_experts, a.experts_per_token, layout.ep) * per_expert
            else:
                touched = expected_distinct_experts(a.num_experts, a.experts_per_token, batch)
                total += touched / layout.ep * per_expert
            continue
        total += nbytes * shard_fraction(item, spec, layout)
    return total


def decode_roofline(
    spec: ModelSpec,
    layout: Layout,
    stages: list[StageLedger],
    context: int,
    bandwidth_gbs: float,
    tp_link: LinkInfo,
    ep_link: LinkInfo,
    pp_link: LinkInfo,
    batch: int = 1,
) -> Roofline:
    a = spec.arch
    act = bytes_per_param(spec.activation_dtype)
    weights_s = 0.0
    state_s = 0.0
    busiest = 0.0
    for ledger in stages:
        bounds = (ledger.first_layer, ledger.last_layer)
        w = _stage_weight_bytes(spec, layout, ledger.stage, bounds, batch)
        # The KV/latent cache is read once per step; recurrent state is read and written back.
        s = batch * (ledger.state_bytes_per_token * context + 2 * ledger.state_bytes_fixed)
        weights_s += w / (bandwidth_gbs * 1e9)
        state_s += s / (bandwidth_gbs * 1e9)
        busiest = max(busiest, w + s)
    floor_ms = (weights_s + state_s) * 1e3

    hidden_bytes = batch * a.hidden_size * act
    moe_layers = a.num_moe_layers
    dense_layers = a.num_layers - moe_layers
    tp_us = 0.0
    lines: list[str] = []
    if layout.tp > 1:
        per_layer_ffn = dense_layers + (moe_layers if layout.ep == 1 else 0)
        count = a.num_layers + per_layer_ffn
        each = ring_allreduce_us(layout.tp, hidden_bytes, tp_link)
        tp_us = count * each
        lines.append(
            f"TP{layout.tp}: {count} all-reduces of {hidden_bytes:,.0f} B per token step "
            f"(after attention in {a.num_layers} layers and after {per_layer_ffn} FFN/MoE blocks), "
            f"{each:.1f} us each = 2x{layout.tp - 1}x{tp_link.latency_us:g} us + 2x{layout.tp - 1}/{layout.tp} x bytes / "
            f"{tp_link.bandwidth_gbs:.0f} GB/s ({tp_link.source})"
        )
    ep_us = 0.0
    if layout.ep > 1 and moe_layers:
        width = a.expert_width
        nbytes = batch * a.experts_per_token * width * act
        each = alltoall_us(layout.ep, nbytes, ep_link)
        ep_us = 2 * moe_layers * each
        lines.append(
            f"EP{layout.ep}: dispatch and combine in {moe_layers} MoE layers, each {a.experts_per_token} x {width} x "
            f"{act:g} B = {nbytes:,.0f} B per token, {each:.1f} us each over {ep_link.bandwidth_gbs:.0f} GB/s ({ep_link.source})"
        )
    pp_us = 0.0
    if layout.pp > 1:
        carried = 1 + a.attn_res_blocks
        nbytes = hidden_bytes * carried
        pp_us = (layout.pp - 1) * (pp_link.latency_us + nbytes / (pp_link.bandwidth_gbs * 1e3))
        what = "hidden state" + (f" and {a.attn_res_blocks} AttnRes block summaries" if a.attn_res_blocks else "")
        lines.append(
            f"PP{layout.pp}: {layout.pp - 1} hand-off{'s' if layout.pp > 2 else ''} of the {what} ({nbytes:,.0f} B) over {pp_link.bandwidth_gbs:.0f} GB/s"
        )
    comm_ms = (tp_us + ep_us + pp_us) / 1e3

    # The figure vendors quote: each active weight read once, spread over every GPU of a replica.
    aggregate_ms = weights_read_per_token_bytes(spec) / (layout.tp * layout.pp * bandwidth_gbs * 1e9) * 1e3
    lines.insert(
        0,
        f"memory floor: the busiest GPU reads {busiest / 1e9:.2f} GB per step at {bandwidth_gbs:g} GB/s"
        + (f"; {layout.pp} stages run one after another for one token" if layout.pp > 1 else ""),
    )
    return Roofline(
        floor_ms=floor_ms,
        weights_ms=weights_s * 1e3,
        state_ms=state_s * 1e3,
        comm_ms=comm_ms,
        tp_ms=tp_us / 1e3,
        ep_ms=ep_us / 1e3,
        pp_ms=pp_us / 1e3,
        busiest_gpu_gb=busiest / 1e9,
        aggregate_floor_ms=aggregate_ms,
        batch=batch,
        lines=lines,
    )
