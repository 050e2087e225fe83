"""The ring search of the TP plan (`_best_ring`): its pruned depth-first search gives what exhaustive
enumeration of every ring gives, link for link, on groups with ties, unknown links and unsorted GPU ids."""

from __future__ import annotations

import random
from itertools import permutations

from k3diag.analyze.pair_quality import PairQuality
from k3diag.analyze.planner import _best_ring

PATHS = {"NV18": 450.0, "NV4": 100.0, "PIX": 24.0, "PXB": 24.0, "NODE": 20.0, "SYS": 12.0, None: None}


def exhaustive(group: list[int], pairs: dict[tuple[int, int], PairQuality]) -> tuple[str | None, float | None]:
    """Every ring through the group, GPU group[0] fixed, each once: the reference the search is held to."""
    def link(a: int, b: int) -> PairQuality:
        return pairs[(min(a, b), max(a, b))]

    first, rest = group[0], group[1:]
    best = None
    for order in permutations(rest):
        if order[0] > order[-1]:
            continue
        ring = (first, *order, first)
        slowest = min((link(a, b) for a, b in zip(ring, ring[1:])), key=lambda pq: pq.bandwidth_gbs or 0.0)
        value = slowest.bandwidth_gbs or 0.0
        if best is None or value > best[0]:
            best = (value, slowest)
    return (best[1].path, best[1].bandwidth_gbs)


def random_pairs(gpus: list[int], rng: random.Random) -> dict[tuple[int, int], PairQuality]:
    names = list(PATHS)
    pairs = {}
    for x, a in enumerate(sorted(gpus)):
        for b in sorted(gpus)[x + 1:]:
            path = rng.choice(names)
            pairs[(a, b)] = PairQuality(path=path, bandwidth_gbs=PATHS[path], measured=False, p2p_ok=None,
                                        same_numa=None)
    return pairs


def test_the_pruned_search_finds_the_ring_full_enumeration_finds() -> None:
    rng = random.Random(13)
    for trial in range(400):
        size = rng.randint(3, 8)
        gpus = rng.sample(range(16), size)  # unsorted, not contiguous: the skip compares GPU ids
        pairs = random_pairs(gpus, rng)
        assert _best_ring(gpus, pairs) == exhaustive(gpus, pairs), (trial, gpus)


def test_a_full_nvlink_group_with_one_pcie_pair_rings_around_it() -> None:
    gpus = list(range(8))
    pairs = {(a, b): PairQuality(path="NV18", bandwidth_gbs=450.0, measured=False, p2p_ok=True, same_numa=True)
             for a in gpus for b in gpus if a < b}
    pairs[(0, 1)] = PairQuality(path="SYS", bandwidth_gbs=12.0, measured=False, p2p_ok=True, same_numa=False)
    assert _best_ring(gpus, pairs) == ("NV18", 450.0)
