"""How a partition of GPUs into groups is scored: the types and functions the partition solvers share.

Quality, not cost: bigger is better. A partition is compared by its slowest link inside any group, then
the sum of the groups' slowest links, then the sum of every link inside the groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, Union

PairCost = Union[Callable[[int, int], float], Sequence[Sequence[float]]]
Matrix = list[list[float]]


@dataclass(frozen=True, order=True)
class PartitionScore:
    """How good a partition is; compared field by field, bigger is better (quality, not cost)."""

    worst: float  # the slowest link inside any group
    sum_worst: float  # the groups' slowest links, summed
    total: float  # every link inside every group, summed


@dataclass
class PartitionResult:
    """A partition of the GPUs into groups of one size, its score, and how it was found."""

    groups: list[list[int]]
    leftover: list[int]  # GPUs in no group when the size does not divide the count
    score: PartitionScore
    exact: bool  # proven optimal: searched exhaustively, or a tree instance packed without splits
    method: str  # "trivial" | "tree" | "exhaustive" | "local search" | "tree + local search"


def quality_matrix(n: int, cost: PairCost, higher_is_better: bool = False) -> Matrix:
    """A symmetric quality matrix (bigger is better) from a cost callable or matrix.

    An asymmetric input is read by its worse direction, since a collective waits for the slower one.
    """
    if callable(cost):
        raw = [[cost(i, j) if i != j else 0.0 for j in range(n)] for i in range(n)]
    else:
        raw = [[cost[i][j] if i != j else 0.0 for j in range(n)] for i in range(n)]
    sign = 1 if higher_is_better else -1
    q: Matrix = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            value = min(sign * raw[i][j], sign * raw[j][i])
            q[i][j] = q[j][i] = value
    return q


def group_stats(group: Sequence[int], q: Matrix) -> tuple[float, float]:
    """(slowest link, sum of links) of one group; a single GPU has no links and never limits."""
    worst = math.inf
    total = 0
    for x, a in enumerate(group):
        row = q[a]
        for b in group[x + 1 :]:
            value = row[b]
            total += value
            if value < worst:
                worst = value
    return worst, total


def score_partition(groups: Sequence[Sequence[int]], q: Matrix) -> PartitionScore:
    worst = math.inf
    sum_worst = 0
    total = 0
    for group in groups:
        gmin, gsum = group_stats(group, q)
        if gmin != math.inf:
            sum_worst += gmin
        worst = min(worst, gmin)
        total += gsum
    return PartitionScore(worst, sum_worst, total)
