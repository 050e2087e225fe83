"""TP/DP grouping planner: which GPUs to put together for tensor parallelism at each TP size, and why.

Two layers in one module:

* the pure partition algorithm (`best_partition`, `solve_partition`): given a pairwise link quality,
  split n GPUs into groups of one size so that the slowest link inside any group is as fast as
  possible, then the sum of the groups' slowest links, then the sum of every link inside the groups;
* the machine-facing part (`pair_quality`, `recommend_tp_groups`): turns what the model knows about
  each GPU pair (measured bandwidth, path code, P2P status, NUMA and NIC locality) into that quality
  and explains the chosen groups in words.

The objective follows go-gpuallocator's frame (score pairs, pick the best *partition* of all GPUs rather
than the greedy best first set) but ranks by the bottleneck link first, because a tensor-parallel
all-reduce runs at the pace of the slowest link in its group. docs/planner.md has the details.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Callable, Sequence, Union

from k3diag.model.machine import Machine
from k3diag.model.topology import Gpu, Link, gpu_index, nvlink_count, pair_key, path_rank

PairCost = Union[Callable[[int, int], float], Sequence[Sequence[float]]]
Matrix = list[list[float]]

# Exhaustive search is used up to this many GPUs; beyond it the tree algorithm plus local search.
EXACT_MAX_GPUS = 16
# Random shakes of the worst groups the local search tries after settling (beyond the exact range).
KICKS = 30
KICK_PATIENCE = 8  # ... stopping after this many in a row that found nothing better
KICK_WORK_BUDGET = 150_000  # ... or once this many swaps have been priced (about 0.3 s)
# Branch-and-bound nodes before the exhaustive search gives up and keeps the best partition found.
EXACT_NODE_BUDGET = 300_000


# =====================================================================================================
# The pure partition algorithm
# =====================================================================================================


@dataclass(frozen=True, order=True)
class PartitionScore:
    """How good a partition is; compared field by field, bigger is better (quality, not cost)."""

    worst: float  # the slowest link inside any group
    sum_worst: float  # the groups' slowest links, summed
    total: float  # every link inside every group, summed


@dataclass
class PartitionResult:
    groups: list[list[int]]
    leftover: list[int]  # GPUs in no group when the size does not divide the count
    score: PartitionScore
    exact: bool  # proven optimal: searched exhaustively, or a tree instance packed without splits
    method: str  # "trivial" | "tree" | "exhaustive" | "local search" | "tree + local search"


class _OutOfBudget(Exception):
    pass


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


def best_partition(
    n: int,
    size: int,
    cost: PairCost,
    *,
    higher_is_better: bool = False,
    exact_up_to: int = EXACT_MAX_GPUS,
    node_budget: int = EXACT_NODE_BUDGET,
) -> list[list[int]]:
    """The best split of GPUs 0..n-1 into groups of `size` (as many full groups as fit).

    `cost` is a pairwise cost, lower is better (pass `higher_is_better=True` for a quality such as
    bandwidth). The partition minimizes the worst cost inside any group, then the sum of the groups'
    worst costs, then the total cost of all pairs inside groups.
    """
    q = quality_matrix(n, cost, higher_is_better)
    return solve_partition(q, size, exact_up_to=exact_up_to, node_budget=node_budget).groups


def solve_partition(
    q: Matrix,
    size: int,
    *,
    exact_up_to: int = EXACT_MAX_GPUS,
    node_budget: int = EXACT_NODE_BUDGET,
) -> PartitionResult:
    """Best partition for a symmetric quality matrix (bigger is better), with how it was found."""
    n = len(q)
    if size < 1:
        raise ValueError(f"group size must be at least 1, got {size}")
    if size == 1 or size >= n:  # one way to do it
        groups = [[i] for i in range(n)] if size == 1 else ([list(range(n))] if size == n else [])
        leftover = list(range(n)) if size > n else []
        return PartitionResult(groups, leftover, score_partition(groups, q), True, "trivial")
    fast = fast_partition(q, size)
    if fast.exact or n > exact_up_to:
        return fast
    return _exact_search(q, size, fast, node_budget)


def fast_partition(q: Matrix, size: int) -> PartitionResult:
    """Tree packing (exact when the qualities form an ultrametric) or greedy seeds plus local search."""
    root, ultrametric = _dendrogram(q)
    tree_groups, tree_left, perfect = _pack_tree(root, size)
    tree = (tree_groups, tree_left)
    if ultrametric and perfect and not tree_left:
        return PartitionResult(_canonical(tree_groups), [], score_partition(tree_groups, q), True, "tree")
    best: tuple[PartitionScore, list[list[int]], list[int]] | None = None
    for groups, leftover in (tree, _greedy_seed(q, size)):
        groups, leftover, _ = _local_search(q, [list(g) for g in groups], list(leftover))
        score = score_partition(groups, q)
        if best is None or score > best[0]:
            best = (score, groups, leftover)
    assert best is not None
    groups, leftover = _iterated_search(q, best[1], best[2])
    score = score_partition(groups, q)
    # On an ultrametric the tree packing already maximizes the first two criteria (see docs/planner.md);
    # local search can only have polished the total. The exact flag stays False: the total is not proven.
    method = "tree + local search" if ultrametric else "local search"
    return PartitionResult(_canonical(groups), sorted(leftover), score, False, method)


def _canonical(groups: Sequence[Sequence[int]]) -> list[list[int]]:
    return sorted((sorted(g) for g in groups), key=lambda g: g[0] if g else -1)


# -- tree (ultrametric) algorithm ----------------------------------------------------------------------


@dataclass
class _Node:
    members: list[int]
    children: list["_Node"] = field(default_factory=list)


def _dendrogram(q: Matrix) -> tuple[_Node, bool]:
    """Single-linkage clustering by quality, and whether the qualities are an ultrametric.

    Pairs are merged from the best quality down; all clusters joined at one quality level become one
    node (a node may have many children). The qualities are an ultrametric (a tree: pair > switch >
    NUMA node > host) exactly when every pair across two clusters merged at level L has quality L.
    """
    n = len(q)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    nodes: dict[int, _Node] = {i: _Node([i]) for i in range(n)}
    levels: dict[float, list[tuple[int, int]]] = {}
    for i in range(n):
        row = q[i]
        for j in range(i + 1, n):
            levels.setdefault(row[j], []).append((i, j))
    ultrametric = True
    for level in sorted(levels, reverse=True):
        pairs = levels[level]
        # clusters as they were before this level, joined by this level's pairs
        link: dict[int, int] = {}

        def top(x: int) -> int:
            while link.get(x, x) != x:
                x = link[x]
            return x

        cross: dict[tuple[int, int], int] = {}
        for i, j in pairs:
            ri, rj = find(i), find(j)
            if ri == rj:
                ultrametric = False  # a pair inside a cluster built from better links is worse than them
                continue
            key = (ri, rj) if ri < rj else (rj, ri)
            cross[key] = cross.get(key, 0) + 1
            ti, tj = top(ri), top(rj)
            if ti != tj:
                link[max(ti, tj)] = min(ti, tj)
        components: dict[int, list[int]] = {}
        for cluster in {c for key in cross for c in key}:
            components.setdefault(top(cluster), []).append(cluster)
        cross_count: dict[int, int] = {}
        for (a, _), count in cross.items():
            cross_count[top(a)] = cross_count.get(top(a), 0) + count
        for component, clusters in components.items():
            clusters.sort()
            counted = cross_count[component]
            sizes = [len(nodes[c].members) for c in clusters]
            expected = (sum(sizes) ** 2 - sum(s * s for s in sizes)) // 2
            if counted != expected:
                ultrametric = False
            merged = _Node(
                members=[m for c in clusters for m in nodes[c].members],
                children=[nodes[c] for c in clusters],
            )
            head = clusters[0]
            for c in clusters[1:]:
                parent[c] = head
                del nodes[c]
            nodes[head] = merged
    roots = list(nodes.values())
    if len(roots) == 1:
        return roots[0], ultrametric
    return _Node(members=[m for r in roots for m in r.members], children=roots), ultrametric


def _pack_tree(root: _Node, size: int) -> tuple[list[list[int]], list[int], bool]:
    """Group bottom-up: every subtree forms as many full groups as it can and passes the rest up.

    Forming the most groups inside every subtree at once maximizes the number of groups whose slowest
    link is at least L for every L, which on an ultrametric maximizes the worst group and the sum of
    the groups' worst links. `perfect` says every remainder travelled up as one intact block; then the
    total of all links inside groups is optimal too.
    """
    perfect = True
    groups: list[list[int]] = []
    remainder: dict[int, list[int]] = {}
    stack: list[tuple[_Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if not node.children:  # a single GPU
            remainder[id(node)] = list(node.members)
            continue
        if not expanded:
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children))
            continue
        blocks = [remainder.pop(id(child)) for child in node.children]
        blocks = sorted((b for b in blocks if b), key=lambda b: (-len(b), b[0]))
        bins: list[list[int]] = []
        for block in blocks:  # first fit decreasing keeps blocks intact where it can
            for bin_ in bins:
                if len(bin_) + len(block) <= size:
                    bin_.extend(block)
                    break
            else:
                bins.append(list(block))
        partial = []
        for bin_ in bins:
            if len(bin_) == size:
                groups.append(bin_)
            else:
                partial.append(bin_)
        if len(partial) > 1:
            perfect = False
            flat = [m for bin_ in sorted(partial, key=lambda b: (-len(b), b[0])) for m in bin_]
            whole = len(flat) // size * size
            groups.extend(flat[k : k + size] for k in range(0, whole, size))
            remainder[id(node)] = flat[whole:]
        else:
            remainder[id(node)] = partial[0] if partial else []
    return groups, remainder.get(id(root), []), perfect


# -- heuristics ------------------------------------------------------------------------------------------


def _greedy_seed(q: Matrix, size: int) -> tuple[list[list[int]], list[int]]:
    """Most constrained GPU first, then add whichever GPU keeps the group's slowest link best."""
    n = len(q)
    free = set(range(n))
    groups: list[list[int]] = []
    for _ in range(n // size):
        def constraint(i: int) -> tuple[float, int]:
            values = sorted((q[i][j] for j in free if j != i), reverse=True)
            return (values[size - 2], i)

        seed = min(free, key=constraint)
        group = [seed]
        free.discard(seed)
        worst_to = {j: q[seed][j] for j in free}
        sum_to = dict(worst_to)
        while len(group) < size:
            pick = max(free, key=lambda j: (worst_to[j], sum_to[j], -j))
            group.append(pick)
            free.discard(pick)
            for j in free:
                value = q[pick][j]
                if value < worst_to[j]:
                    worst_to[j] = value
                sum_to[j] += value
        groups.append(group)
    return groups, sorted(free)


def _group_cache(group: list[int], q: Matrix) -> tuple[list[float], list[float]]:
    """For each member: the group's slowest link and link sum without that member."""
    rest_min: list[float] = []
    rest_sum: list[float] = []
    _, gsum = group_stats(group, q)
    for x, a in enumerate(group):
        others = group[:x] + group[x + 1 :]
        worst = math.inf
        for y, b in enumerate(others):
            row = q[b]
            for c in others[y + 1 :]:
                if row[c] < worst:
                    worst = row[c]
        rest_min.append(worst)
        rest_sum.append(gsum - sum(q[a][b] for b in others))
    return rest_min, rest_sum


class _LocalSearch:
    """Improves a partition by exchanging GPUs while the partition score rises.

    Two moves: a swap of two GPUs between two groups (or with a left-over GPU), and a rotation of three
    GPUs through a group holding the worst link, which lifts a bottleneck no single swap can. Each
    group keeps, per member, its slowest link and link sum without that member, so a move is priced
    in O(size).
    """

    def __init__(self, q: Matrix, groups: list[list[int]], pool: list[int]) -> None:
        self.q = q
        self.groups = groups
        self.pool = pool  # GPUs in no group; index len(groups) stands for it
        self.stats = [group_stats(g, q) for g in groups]
        self.caches = [_group_cache(g, q) for g in groups]
        self.work = 0  # moves priced, so callers can bound the effort
        self._aggregate()

    def _aggregate(self) -> None:
        self.order = sorted((stat[0], k) for k, stat in enumerate(self.stats))
        worst = self.order[0][0] if self.order else math.inf
        self.current = PartitionScore(
            worst, sum(stat[0] for stat in self.stats), sum(stat[1] for stat in self.stats)
        )

    def _others_min(self, skip: tuple[int, ...]) -> float:
        for value, k in self.order:
            if k not in skip:
                return value
        return math.inf

    def _replaced(self, k: int, index: int, newcomer: int) -> tuple[float, float]:
        """(slowest link, link sum) of group k with its member at `index` replaced by `newcomer`."""
        if k == len(self.groups):
            return math.inf, 0
        rest_min, rest_sum = self.caches[k]
        worst, total = rest_min[index], rest_sum[index]
        row = self.q[newcomer]
        group = self.groups[k]
        for x, member in enumerate(group):
            if x != index:
                value = row[member]
                total += value
                if value < worst:
                    worst = value
        return worst, total

    def _members(self, k: int) -> list[int]:
        return self.pool if k == len(self.groups) else self.groups[k]

    def _improves(self, changed: tuple[int, ...], new: list[tuple[float, float]]) -> bool:
        scored = [(k, stat) for k, stat in zip(changed, new) if k != len(self.groups)]
        worst = min([self._others_min(changed)] + [stat[0] for _, stat in scored])
        sum_worst = self.current.sum_worst + sum(stat[0] - self.stats[k][0] for k, stat in scored)
        total = self.current.total + sum(stat[1] - self.stats[k][1] for k, stat in scored)
        return PartitionScore(worst, sum_worst, total) > self.current

    def _apply(self, moves: list[tuple[int, int, int]]) -> bool:
        """Put each (group, index, newcomer) in place and keep it if the recomputed score is higher.

        The incremental pricing can be off by rounding with float qualities; checking the recomputed
        score makes every kept move a strict improvement of one function of the state, so the search
        cannot cycle.
        """
        before = self.current
        previous = [(k, index, self._members(k)[index]) for k, index, _ in moves]
        self._place(moves)
        if self.current > before:
            return True
        self._place(previous)
        return False

    def _place(self, moves: list[tuple[int, int, int]]) -> None:
        for k, index, newcomer in moves:
            self._members(k)[index] = newcomer
        for k in {k for k, _, _ in moves}:
            if k != len(self.groups):
                self.stats[k] = group_stats(self.groups[k], self.q)
                self.caches[k] = _group_cache(self.groups[k], self.q)
        self._aggregate()

    def swap_sweep(self, start: set[int] | None = None) -> bool:
        """Apply improving swaps until none is left, re-examining only groups that changed since
        they were last examined (all of them whenever the worst link moves)."""
        improved = False
        slots = len(self.groups) + (1 if self.pool else 0)
        dirty = set(range(slots)) if start is None else set(start)
        while dirty:
            g = min(dirty)
            dirty.discard(g)
            for other in range(slots):
                if other == g:
                    continue
                worst_before = self.current.worst
                g1, g2 = (g, other) if g < other else (other, g)
                if self._swap_between(g1, g2, self.q):
                    improved = True
                    dirty.update((g1, g2))
                    if self.current.worst != worst_before:
                        dirty = set(range(slots))
        return improved

    def _swap_between(self, g1: int, g2: int, q: Matrix) -> bool:
        # Priced inline with scalars: this loop is where large instances spend their time.
        into_pool = g2 == len(self.groups)
        first, second = self.groups[g1], self._members(g2)
        current = self.current
        floor = self._others_min((g1, g2))
        m1, s1 = self.stats[g1]
        m2, s2 = (0, 0) if into_pool else self.stats[g2]
        base_s = current.sum_worst - m1 - m2
        base_t = current.total - s1 - s2
        rest_min1, rest_sum1 = self.caches[g1]
        rest_min2, rest_sum2 = ([], []) if into_pool else self.caches[g2]
        self.work += len(first) * len(second)
        for ia, a in enumerate(first):
            row_a = q[a]
            for ib, b in enumerate(second):
                row_b = q[b]
                n1min, n1sum = rest_min1[ia], rest_sum1[ia]
                for x in first:
                    if x != a:
                        value = row_b[x]
                        n1sum += value
                        if value < n1min:
                            n1min = value
                if n1min < current.worst:
                    continue
                if into_pool:
                    n2min, n2sum, n2count = math.inf, 0, 0
                else:
                    n2min, n2sum = rest_min2[ib], rest_sum2[ib]
                    for x in second:
                        if x != b:
                            value = row_a[x]
                            n2sum += value
                            if value < n2min:
                                n2min = value
                    n2count = n2min
                worst = min(floor, n1min, n2min)
                candidate = (worst, base_s + n1min + n2count, base_t + n1sum + n2sum)
                if candidate > (current.worst, current.sum_worst, current.total):
                    if self._apply([(g1, ia, b), (g2, ib, a)]):
                        return True
        return False

    def rotate_pass(self) -> bool:
        """Try a -> g2, b -> g3, c -> g1 for a group g1 holding the worst link; apply the first that
        improves the score. Only a newcomer c that lifts g1 is followed further."""
        count = len(self.groups)
        worst_groups = [k for value, k in self.order if value == self.current.worst]
        for g1 in worst_groups:
            for ia, a in enumerate(self.groups[g1]):
                for g3 in range(count):
                    if g3 == g1:
                        continue
                    for ic, c in enumerate(self.groups[g3]):
                        first = self._replaced(g1, ia, c)
                        if first[0] <= self.current.worst:
                            continue
                        for g2 in range(count):
                            if g2 == g1 or g2 == g3:
                                continue
                            for ib, b in enumerate(self.groups[g2]):
                                new = [first, self._replaced(g2, ib, a), self._replaced(g3, ic, b)]
                                if self._improves((g1, g2, g3), new) and self._apply(
                                    [(g1, ia, c), (g2, ib, a), (g3, ic, b)]
                                ):
                                    return True
        return False

    def run(self, touched: set[int] | None = None, max_rounds: int = 200) -> tuple[list[list[int]], list[int]]:
        """Search to a local optimum; `touched` names the only groups changed since the last one."""
        if not self.groups or (len(self.groups) == 1 and not self.pool):
            return self.groups, self.pool
        for _ in range(max_rounds):
            self.swap_sweep(touched)
            touched = None
            if not self.rotate_pass():
                break
        return self.groups, self.pool


def _local_search(
    q: Matrix, groups: list[list[int]], pool: list[int], touched: set[int] | None = None
) -> tuple[list[list[int]], list[int], int]:
    search = _LocalSearch(q, groups, pool)
    found_groups, found_pool = search.run(touched)
    return found_groups, found_pool, search.work


def _iterated_search(
    q: Matrix, groups: list[list[int]], pool: list[int], kicks: int = KICKS
) -> tuple[list[list[int]], list[int]]:
    """Starting from a local optimum, repeatedly shake the groups holding the worst link and search
    again, keeping the shaken result only when it scores better. Seeded, so answers are reproducible."""
    best_groups, best_pool = groups, pool
    best_score = score_partition(best_groups, q)
    if len(best_groups) < 2:
        return best_groups, best_pool
    rng = random.Random(len(q) * 1009 + len(best_groups[0]))
    idle = work = 0
    for _ in range(kicks):
        if idle >= KICK_PATIENCE or work >= KICK_WORK_BUDGET:
            break
        idle += 1
        trial = [list(g) for g in best_groups]
        trial_pool = list(best_pool)
        worst = [k for k, g in enumerate(trial) if group_stats(g, q)[0] == best_score.worst]
        touched: set[int] = set()
        for k in worst[:3]:
            other = rng.randrange(len(trial) - 1)
            other += other >= k
            a, b = rng.randrange(len(trial[k])), rng.randrange(len(trial[other]))
            trial[k][a], trial[other][b] = trial[other][b], trial[k][a]
            touched.update((k, other))
        trial, trial_pool, spent = _local_search(q, trial, trial_pool, touched)
        work += spent
        score = score_partition(trial, q)
        if score > best_score:
            best_groups, best_pool, best_score = trial, trial_pool, score
            idle = 0
    return best_groups, best_pool


# -- exhaustive search ------------------------------------------------------------------------------------


def _exact_search(q: Matrix, size: int, incumbent: PartitionResult, node_budget: int) -> PartitionResult:
    """Branch and bound over all partitions, starting from the fast answer.

    Symmetry breaking: the lowest unassigned GPU always opens the next group (or, when the size does
    not divide the count, may be left over), so each partition is visited once. Bounds: a GPU's group
    can be no better than its (size-1)-th best link to the GPUs still free.
    """
    n = len(q)
    left_total = n % size
    best_score = incumbent.score
    best: list[Any] = [best_score, incumbent.groups, incumbent.leftover]
    nodes = 0
    k = size - 1

    def dfs(free: list[int], groups: list[list[int]], leftover: list[int], cur_w: float, cur_s: float,
            cur_t: float, left_slots: int) -> None:
        nonlocal nodes
        nodes += 1
        if nodes > node_budget:
            raise _OutOfBudget
        bw, bs, bt = best[0].worst, best[0].sum_worst, best[0].total
        if len(free) == left_slots:
            candidate = PartitionScore(cur_w, cur_s, cur_t)
            if candidate > best[0]:
                best[0] = candidate
                best[1] = [list(g) for g in groups]
                best[2] = leftover + free
            return
        groups_left = (len(free) - left_slots) // size
        limits = []
        tops = []
        floor = math.inf
        for i in free:
            row = q[i]
            values = sorted((row[j] for j in free if j != i), reverse=True)
            limits.append(values[k - 1])
            tops.append(sum(values[:k]))
            floor = min(floor, values[-1])
        limits.sort()
        usable = limits[left_slots:]
        ub_w = min(cur_w, usable[0])
        if ub_w < bw:
            return
        if ub_w == bw:
            ub_s = cur_s + sum(usable[g * size] for g in range(groups_left))
            if ub_s < bs:
                return
            if ub_s == bs:
                tops.sort()
                ub_t = cur_t + sum(tops[left_slots:]) / 2
                if ub_t <= bt:
                    return
        if cur_w <= floor:
            # The worst link is settled whatever follows, so what remains is to maximize the sums:
            # a subset dynamic programme, memoized across branches that leave the same GPUs free.
            sub_s, sub_t, sub_groups, sub_left = completion(tuple(free), left_slots)
            candidate = PartitionScore(cur_w, cur_s + sub_s, cur_t + sub_t)
            if candidate > best[0]:
                best[0] = candidate
                best[1] = [list(g) for g in groups] + [list(g) for g in sub_groups]
                best[2] = leftover + list(sub_left)
            return
        head, rest = free[0], free[1:]
        children = []
        for combo in combinations(rest, k):
            members = (head, *combo)
            gmin, gsum = group_stats(members, q)
            children.append((gmin, gsum, members))
        children.sort(key=lambda c: (c[0], c[1]), reverse=True)
        for gmin, gsum, members in children:
            if min(cur_w, gmin) < best[0].worst:
                break  # children are sorted by their slowest link; the rest are no better
            taken = set(members)
            dfs([x for x in rest if x not in taken], groups + [list(members)], leftover,
                min(cur_w, gmin), cur_s + gmin, cur_t + gsum, left_slots)
        if left_slots > 0:
            dfs(rest, groups, leftover + [head], cur_w, cur_s, cur_t, left_slots - 1)

    memo: dict[tuple[int, int], tuple[float, float, tuple[tuple[int, ...], ...], tuple[int, ...]]] = {}

    def completion(free: tuple[int, ...], left_slots: int) -> tuple[float, float, tuple[tuple[int, ...], ...], tuple[int, ...]]:
        """Best (sum of group minima, total) over the partitions of `free` alone."""
        nonlocal nodes
        key = (sum(1 << x for x in free), left_slots)
        if key in memo:
            return memo[key]
        nodes += 1
        if nodes > node_budget:
            raise _OutOfBudget
        if len(free) == left_slots:
            memo[key] = (0, 0, (), free)
            return memo[key]
        head, rest = free[0], free[1:]
        found: tuple[float, float, tuple[tuple[int, ...], ...], tuple[int, ...]] | None = None
        for combo in combinations(rest, k):
            members = (head, *combo)
            gmin, gsum = group_stats(members, q)
            sub_s, sub_t, sub_groups, sub_left = completion(tuple(x for x in rest if x not in combo), left_slots)
            if found is None or (gmin + sub_s, gsum + sub_t) > found[:2]:
                found = (gmin + sub_s, gsum + sub_t, (members, *sub_groups), sub_left)
        if left_slots > 0:
            sub_s, sub_t, sub_groups, sub_left = completion(rest, left_slots - 1)
            if found is None or (sub_s, sub_t) > found[:2]:
                found = (sub_s, sub_t, sub_groups, (head, *sub_left))
        assert found is not None
        memo[key] = found
        return found

    complete = True
    try:
        dfs(list(range(n)), [], [], math.inf, 0, 0, left_total)
    except _OutOfBudget:
        complete = False
    score, groups, leftover = best
    method = "exhaustive" if complete else f"{incumbent.method} (search budget of {node_budget} nodes exhausted)"
    return PartitionResult(_canonical(groups), sorted(leftover), score, complete, method)


# =====================================================================================================
# From the machine model to pair qualities
# =====================================================================================================

# PCIe bandwidth per lane and direction, GB/s, after line encoding (Gen1/2 8b/10b, Gen3+ 128b/130b).
PCIE_LANE_GBS: dict[int, float] = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# Share of the theoretical figure a peer copy reaches (field notes: Gen4 x16 31.5 GB/s, ~25 achieved).
PCIE_ACHIEVED = 0.8
DEFAULT_PCIE_GEN = 4
DEFAULT_PCIE_WIDTH = 16
# Fraction of the PCIe link a peer copy keeps, by how far apart the GPUs are (legend of `topo -m`).
PCIE_PATH_FACTOR: dict[str, float] = {
    "PIX": 1.0,
    "PSB": 1.0,
    "PXB": 0.9,
    "PHB": 0.8,
    "NODE": 0.7,
    "SYS": 0.5,
}
# No P2P: copies bounce through host memory (NCCL's SHM transport), worse than a P2P SYS path.
NO_P2P_FACTOR = 0.4
# NVLink per link and direction, GB/s: NVLink 1 20; NVLink 2/3/4 25; NVLink 5 (Blackwell) 50.
NVLINK_GBS_DEFAULT = 25.0
NVLINK_GBS_BY_NAME: tuple[tuple[str, float], ...] = (("GB300", 50.0), ("GB200", 50.0), ("B300", 50.0),
                                                       ("B200", 50.0), ("B100", 50.0), ("P100", 20.0))
# AMD Infinity Fabric (xGMI) per link and direction: MI300-class 64 GB/s, MI200-class 50 GB/s.
XGMI_GBS_DEFAULT = 50.0
XGMI_GBS_BY_NAME: tuple[tuple[str, float], ...] = (("MI3", 64.0),)
# A bigger TP size whose slowest link keeps at least this share of the smaller size's is "costs little".
MODEST_SLOWDOWN = 0.8
# Width of one bandwidth tier: 2**(1/8), about 9 %. Pairs within a tier count as equally fast for
# the slowest-link criterion, so measurement noise does not override NUMA or NIC locality.
TIER_STEPS_PER_OCTAVE = 8
_UNKNOWN_TIER = -10_000
_NEAR_NIC_PATHS = {"PIX", "PXB", "PSB"}
_P2P_BAD = {"NS", "CNS", "GNS", "TNS", "DR"}
_P2P_CAPABILITIES = {"read", "write", "unknown"}


@dataclass
class PairQuality:
    """How good the link between two GPUs is, for grouping."""

    path: str | None  # best path code known ("NV18", "PIX", "SYS", "XGMI", "PCIE"), None when unknown
    bandwidth_gbs: float | None  # per direction; measured when present, else estimated from the path
    measured: bool
    p2p_ok: bool | None  # from P2P status (read/write capability OK), None when unknown
    same_numa: bool | None
    near_nic: str | None = None  # a NIC both GPUs reach through PIX/PXB, when NICs are known
    basis: str = ""  # where the bandwidth figure comes from, in words

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "bandwidth_gbs": self.bandwidth_gbs,
            "measured": self.measured,
            "p2p_ok": self.p2p_ok,
            "same_numa": self.same_numa,
            "near_nic": self.near_nic,
            "basis": self.basis,
        }


@dataclass
class _Facts:
    """Everything about the machine the planner reads, indexed once (Machine.link scans every link)."""

    gpus: list[int]
    links: dict[tuple[str, str], Link]
    p2p: dict[tuple[str, str], list[str]]
    measured: dict[tuple[int, int], tuple[float, str]]
    can_access: dict[tuple[int, int], bool]
    nic_paths: dict[int, dict[str, str]]  # GPU index -> NIC name -> path code
    nic_names: dict[str, str]  # endpoint name -> name to show (NIC0 -> mlx5_0)


def known_gpus(machine: Machine) -> list[int]:
    """Every GPU index any source mentions: the GPU table, links, P2P statuses."""
    indices = set(machine.gpus)
    for link in machine.links:
        for name in (link.a, link.b):
            index = gpu_index(name)
            if index is not None:
                indices.add(index)
    for status in machine.p2p:
        for name in (status.src, status.dst):
            index = gpu_index(name)
            if index is not None:
                indices.add(index)
    return sorted(indices)


def _collect_facts(machine: Machine) -> _Facts:
    gpus = known_gpus(machine)
    links: dict[tuple[str, str], Link] = {}
    for link in machine.links:
        key = link.key()
        held = links.get(key)
        if held is None or path_rank(link.path) < path_rank(held.path):
            links[key] = link
    p2p: dict[tuple[str, str], list[str]] = {}
    for status in machine.p2p:
        if status.capability in _P2P_CAPABILITIES and status.status:
            p2p.setdefault(pair_key(status.src, status.dst), []).append(status.status.strip().upper())
    measured, can_access = _measured_bandwidths(machine)
    nic_names: dict[str, str] = {}
    for nic in machine.nics.values():
        nic_names[nic.name] = nic.device or nic.name
    nic_paths: dict[int, dict[str, str]] = {}
    for (a, b), link in links.items():
        ia, ib = gpu_index(a), gpu_index(b)
        if (ia is None) == (ib is None) or link.path is None:
            continue
        gpu, other = (ia, b) if ia is not None else (ib, a)
        nic_paths.setdefault(gpu, {})[other] = link.path  # type: ignore[index]
        nic_names.setdefault(other, other)
    return _Facts(gpus, links, p2p, measured, can_access, nic_paths, nic_names)


# -- measured bandwidth ----------------------------------------------------------------------------------


def _matrix_value(cell: Any) -> float | None:
    if isinstance(cell, bool):
        return None
    if isinstance(cell, (int, float)):
        return float(cell) if cell > 0 and math.isfinite(cell) else None
    if isinstance(cell, str):
        try:
            value = float(cell)
        except ValueError:
            return None
        return value if value > 0 and math.isfinite(value) else None
    return None


def _p2p_matrix_rank(name: str) -> tuple[int, float] | None:
    """Which p2pBandwidthLatencyTest matrix to trust, and the factor to per-direction GB/s."""
    lowered = name.lower()
    if "bandwidth" not in lowered or "p2p=enabled" not in lowered.replace(" ", ""):
        return None
    if lowered.startswith("bidirectional") or "bidirectional" in lowered:
        return (2, 0.5)  # both directions at once: the figure is the sum of the two
    if "read" in lowered:
        return (1, 1.0)
    return (0, 1.0)  # unidirectional writes (the default copy) first


def _nvbandwidth_rank(name: str) -> tuple[int, float] | None:
    lowered = name.lower()
    if not lowered.startswith("device_to_device"):
        return None
    if "bidirectional" in lowered:
        return (3, 0.5) if lowered.endswith("_total") else (2, 1.0)
    return (0 if "_ce" in lowered else 1, 1.0)


def _device_map(record: dict, machine: Machine, size: int) -> dict[int, int]:
    """Matrix index -> GPU index. By PCI bus when the record names each device's bus, else identity.

    CUDA numbers devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so the bus is the only
    safe join; identity is the fallback (docs/planner.md says so).
    """
    devices = record.get("gpus") or record.get("devices")
    if isinstance(devices, list) and len(devices) == size and machine.gpus:
        by_bus: dict[int, int] = {}
        for gpu in machine.gpus.values():
            bus = _bus_number(gpu.bus_id)
            if bus is not None:
                by_bus.setdefault(bus, gpu.index)
        mapping: dict[int, int] = {}
        for position, device in enumerate(devices):
            if not isinstance(device, dict):
                break
            raw = next((device[key] for key in ("bus_id", "pci_bus_id", "pciBusID", "bus") if key in device), None)
            bus = raw if isinstance(raw, int) and not isinstance(raw, bool) else _bus_number(raw)
            if bus is None or bus not in by_bus:
                break
            mapping[position] = by_bus[bus]
        if len(mapping) == size and len(set(mapping.values())) == size:
            return mapping
    return {i: i for i in range(size)}


def _bus_number(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    match = re.search(r"(?:^|:)([0-9a-fA-F]{1,2}):[0-9a-fA-F]{1,2}\.[0-7]$", value.strip())
    if match:
        return int(match.group(1), 16)
    return None


def _measured_bandwidths(
    machine: Machine,
) -> tuple[dict[tuple[int, int], tuple[float, str]], dict[tuple[int, int], bool]]:
    """Per GPU pair (a < b): the slower direction of the most trusted measured matrix."""
    candidates: list[tuple[tuple[int, int, int], dict[int, int], list, float, str]] = []
    can_access: dict[tuple[int, int], bool] = {}
    pair_runs: list[tuple[tuple[int, int], float, str]] = []
    for order, bench in enumerate(machine.benchmarks):
        try:
            record = bench.to_json()
        except Exception:  # a record that cannot serialize simply contributes nothing
            continue
        if not isinstance(record, dict):
            continue
        tool = str(getattr(bench, "tool", record.get("tool", "")))
        tables: list[tuple[str, Any, tuple[int, float] | None, int]] = []
        if "p2p" in tool.lower() and isinstance(record.get("matrices"), dict):
            for name, matrix in record["matrices"].items():
                tables.append((str(name), matrix, _p2p_matrix_rank(str(name)), 0))
            access = record.get("can_access")
            if isinstance(access, list):
                mapping = _device_map(record, machine, len(access))
                for i, row in enumerate(access):
                    for j, cell in enumerate(row if isinstance(row, list) else []):
                        if i != j and isinstance(cell, (bool, int)) and i in mapping and j in mapping:
                            key = tuple(sorted((mapping[i], mapping[j])))
                            can_access[key] = can_access.get(key, True) and bool(cell)  # type: ignore[index]
        elif "nvbandwidth" in tool.lower() and isinstance(record.get("testcases"), dict):
            for name, case in record["testcases"].items():
                matrix = case.get("matrix") if isinstance(case, dict) else None
                tables.append((str(name), matrix, _nvbandwidth_rank(str(name)), 1))
        elif "nccl" in tool.lower():
            pair = _nccl_pair(record, machine)
            value = _matrix_value(record.get("max_busbw"))
            if pair is not None and value is not None:
                pair_runs.append((pair, value, f"nccl-tests {record.get('op') or ''} busbw, 2 ranks".replace("  ", " ")))
        for name, matrix, rank, tool_rank in tables:
            if rank is None or not isinstance(matrix, list) or not matrix:
                continue
            mapping = _device_map(record, machine, len(matrix))
            # nvbandwidth copy-engine figures first, then p2pBandwidthLatencyTest, unidirectional first
            candidates.append(((rank[0], tool_rank, order), mapping, matrix, rank[1], f"{tool}: {name}"))
    measured: dict[tuple[int, int], tuple[float, str]] = {}
    for _, mapping, matrix, factor, label in sorted(candidates, key=lambda c: c[0]):
        values: dict[tuple[int, int], float] = {}
        for i, row in enumerate(matrix):
            if not isinstance(row, list):
                continue
            for j, cell in enumerate(row):
                value = _matrix_value(cell)
                if i == j or value is None or i not in mapping or j not in mapping:
                    continue
                key = tuple(sorted((mapping[i], mapping[j])))
                scaled = value * factor
                values[key] = min(values.get(key, scaled), scaled)  # type: ignore[index]
        for key, value in values.items():
            measured.setdefault(key, (value, label))  # the most trusted matrix that covers a pair wins
    for key, value, label in pair_runs:
        measured.setdefault(key, (value, label))
    return measured, can_access


def _nccl_pair(record: dict, machine: Machine) -> tuple[int, int] | None:
    """A two-rank nccl-tests run on one host tells one pair's speed, when its devices are named."""
    if record.get("nranks") != 2:
        return None
    devices = record.get("devices") or record.get("ranks") or record.get("gpus")
    if not isinstance(devices, list) or len(devices) != 2:
        return None
    found: list[int] = []
    for device in devices:
        if not isinstance(device, dict):
            return None
        gpu = None
        for key in ("bus_id", "busid", "pci_bus_id"):
            if isinstance(device.get(key), str):
                bus = _bus_number(device[key])
                gpu = next((g.index for g in machine.gpus.values() if _bus_number(g.bus_id) == bus), None)
                if gpu is not None:
                    break
        if gpu is None:
            return None
        found.append(gpu)
    if found[0] == found[1]:
        return None
    return (min(found), max(found))


# -- estimated bandwidth ---------------------------------------------------------------------------------


def _pcie_gbs(gpu: Gpu | None) -> tuple[float, str]:
    gen = width = None
    if gpu is not None:
        state = gpu.pcie
        caps = [g for g in (state.gen_device_max, state.gen_host_max) if g]
        gen = min(caps) if caps else state.gen_max
        # a narrower current width is a real fault (idle GPUs drop speed, never width)
        width = state.width_current or state.width_max
    gen = gen if gen in PCIE_LANE_GBS else DEFAULT_PCIE_GEN
    width = width if width and width > 0 else DEFAULT_PCIE_WIDTH
    return PCIE_LANE_GBS[gen] * width * PCIE_ACHIEVED, f"PCIe Gen{gen} x{width}"


def _per_link(name: str | None, table: tuple[tuple[str, float], ...], default: float) -> float:
    upper = (name or "").upper()
    for marker, value in table:
        if marker in upper:
            return value
    return default


def estimate_bandwidth(
    path: str | None, p2p_ok: bool | None, same_numa: bool | None, gpu_a: Gpu | None, gpu_b: Gpu | None
) -> tuple[float | None, str]:
    """Per-direction GB/s a peer copy between two GPUs can expect from the link class alone."""
    pcie_a, basis_a = _pcie_gbs(gpu_a)
    pcie_b, basis_b = _pcie_gbs(gpu_b)
    pcie, pcie_basis = (pcie_a, basis_a) if pcie_a <= pcie_b else (pcie_b, basis_b)
    name = (gpu_a.name if gpu_a else None) or (gpu_b.name if gpu_b else None)
    links = nvlink_count(path)
    estimate: float | None
    if path is None:
        estimate, basis = None, "no path known"
    elif links is not None and links > 0:
        per_link = _per_link(name, NVLINK_GBS_BY_NAME, NVLINK_GBS_DEFAULT)
        estimate, basis = links * per_link, f"{links} NVLink x {per_link:g} GB/s"
    elif path == "XGMI":
        per_link = _per_link(name, XGMI_GBS_BY_NAME, XGMI_GBS_DEFAULT)
        estimate, basis = per_link, f"xGMI link {per_link:g} GB/s"
    elif path in PCIE_PATH_FACTOR:
        factor = PCIE_PATH_FACTOR[path]
        estimate, basis = pcie * factor, f"{pcie_basis} x {factor:g} for {path}"
    elif path == "PCIE" or (links == 0):
        factor = PCIE_PATH_FACTOR["SYS"] if same_numa is False else PCIE_PATH_FACTOR["PHB"]
        estimate, basis = pcie * factor, f"{pcie_basis} x {factor:g} for PCIe{' across NUMA nodes' if same_numa is False else ''}"
    else:
        estimate, basis = None, f"unknown path {path}"
    if p2p_ok is False:
        floor = pcie * NO_P2P_FACTOR
        if estimate is None or estimate > floor:
            estimate, basis = floor, f"{pcie_basis} x {NO_P2P_FACTOR:g}: no P2P, copies go through host memory"
    if estimate is not None:
        estimate = round(estimate, 2)
    return estimate, f"estimated: {basis}"


def _p2p_ok(facts: _Facts, a: int, b: int) -> bool | None:
    codes = facts.p2p.get(pair_key(f"GPU{a}", f"GPU{b}"), [])
    if "OK" in codes:
        return True
    if any(code in _P2P_BAD for code in codes):
        return False
    return facts.can_access.get((min(a, b), max(a, b)))


def _near_nic(facts: _Facts, a: int, b: int) -> str | None:
    near_a = {nic for nic, path in facts.nic_paths.get(a, {}).items() if path in _NEAR_NIC_PATHS}
    near_b = {nic for nic, path in facts.nic_paths.get(b, {}).items() if path in _NEAR_NIC_PATHS}
    shared = sorted(near_a & near_b)
    return facts.nic_names.get(shared[0], shared[0]) if shared else None


def _pair_quality(machine: Machine, facts: _Facts, a: int, b: int) -> PairQuality:
    link = facts.links.get(pair_key(f"GPU{a}", f"GPU{b}"))
    path = link.path if link is not None else None
    gpu_a, gpu_b = machine.gpus.get(a), machine.gpus.get(b)
    numa_a = gpu_a.numa_node if gpu_a else None
    numa_b = gpu_b.numa_node if gpu_b else None
    same_numa = None if numa_a is None or numa_b is None else numa_a == numa_b
    p2p_ok = _p2p_ok(facts, a, b)
    measured = facts.measured.get((min(a, b), max(a, b)))
    if measured is not None:
        bandwidth, basis, is_measured = round(measured[0], 2), f"measured: {measured[1]}", True
    else:
        bandwidth, basis = estimate_bandwidth(path, p2p_ok, same_numa, gpu_a, gpu_b)
        is_measured = False
    return PairQuality(path, bandwidth, is_measured, p2p_ok, same_numa, _near_nic(facts, a, b), basis)


def pair_quality(machine: Machine, a: int, b: int) -> PairQuality:
    """How good the link between GPU a and GPU b is, for grouping."""
    return _pair_quality(machine, _collect_facts(machine), a, b)


def bandwidth_tier(bandwidth: float | None) -> int:
    """Bandwidth on a log scale in ~9 % steps; unknown sorts below everything."""
    if bandwidth is None or bandwidth <= 0:
        return _UNKNOWN_TIER
    return round(TIER_STEPS_PER_OCTAVE * math.log2(bandwidth))


def _pair_level(pq: PairQuality) -> tuple[int, int, int]:
    numa = 1 if pq.same_numa is None else (2 if pq.same_numa else 0)
    return (bandwidth_tier(pq.bandwidth_gbs), numa, 1 if pq.near_nic else 0)


def quality_from_pairs(n: int, pairs: dict[tuple[int, int], PairQuality]) -> list[list[int]]:
    """Integer pair qualities ordering pairs by (bandwidth tier, NUMA, NIC, bandwidth).

    Integers keep sums exact. The level (tier, NUMA, NIC) is scaled above any possible sum of the
    bandwidth parts, so a sum over a partition's pairs still compares levels first.
    """
    levels = sorted({_pair_level(pq) for pq in pairs.values()})
    rank = {level: r for r, level in enumerate(levels)}
    centi = {key: int(round((pq.bandwidth_gbs or 0) * 100)) for key, pq in pairs.items()}
    scale = (n * n + 1) * (max(centi.values(), default=0) + 1)
    q = [[0] * n for _ in range(n)]
    for (i, j), pq in pairs.items():
        q[i][j] = q[j][i] = rank[_pair_level(pq)] * scale + centi[(i, j)]
    return q  # type: ignore[return-value]


# =====================================================================================================
# The recommendation
# =====================================================================================================


@dataclass
class TpRecommendation:
    gpus: list[int]
    groups: dict[int, list[list[int]]]  # tp size -> partition of the GPUs into groups of that size
    worst_link: dict[int, str | None]  # tp size -> path code of the slowest link inside any group
    group_worst: dict[int, list[str | None]]  # tp size -> each group's slowest link
    scores: dict[int, float]  # tp size -> GB/s of the slowest link inside any group (0.0 unknown)
    rationale: dict[int, str]
    comparison: str | None
    cuda_visible_devices: dict[int, list[str]]
    exact: dict[int, bool]
    leftover: dict[int, list[int]] = field(default_factory=dict)
    method: dict[int, str] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)  # asked sizes that cannot be formed, and why
    pairs: dict[tuple[int, int], PairQuality] = field(default_factory=dict)
    worst_pairs: dict[int, tuple[int, int]] = field(default_factory=dict)  # tp size -> its slowest pair

    def to_json(self) -> dict:
        def keyed(mapping: dict) -> dict:
            return {str(size): mapping[size] for size in sorted(mapping)}

        return {
            "tp_groups": keyed(self.groups),
            "rationale": keyed(self.rationale),
            "comparison": self.comparison,
            "gpus": list(self.gpus),
            "worst_link": keyed(self.worst_link),
            "group_worst": keyed(self.group_worst),
            "worst_link_gbs": keyed({size: self.pairs[pair].bandwidth_gbs for size, pair in self.worst_pairs.items()}),
            "cuda_visible_devices": keyed(self.cuda_visible_devices),
            "exact": keyed(self.exact),
            "leftover": keyed(self.leftover),
            "method": keyed(self.method),
            "skipped": keyed(self.skipped),
        }


def machine_quality(machine: Machine) -> tuple[list[int], dict[tuple[int, int], PairQuality], list[list[int]]]:
    """The known GPUs, every pair's quality keyed by GPU indices, and the matrix the partitioner reads
    (row x is gpus[x])."""
    gpus = known_gpus(machine)
    facts = _collect_facts(machine)
    pairs: dict[tuple[int, int], PairQuality] = {}
    local: dict[tuple[int, int], PairQuality] = {}
    for x in range(len(gpus)):
        for y in range(x + 1, len(gpus)):
            pq = _pair_quality(machine, facts, gpus[x], gpus[y])
            pairs[(gpus[x], gpus[y])] = pq
            local[(x, y)] = pq
    return gpus, pairs, quality_from_pairs(len(gpus), local)


def default_sizes(count: int) -> list[int]:
    """Powers of two that divide the GPU count, and the count itself (TP sizes must divide head counts,
    which are powers of two in practically every model)."""
    sizes = set()
    size = 2
    while size <= count:
        if count % size == 0:
            sizes.add(size)
        size *= 2
    if count >= 2:
        sizes.add(count)
    return sorted(sizes)


def recommend_tp_groups(machine: Machine, sizes: list[int] | None = None) -> TpRecommendation | None:
    """The best grouping of all known GPUs at each TP size; None when fewer than two GPUs are known."""
    gpus = known_gpus(machine)
    count = len(gpus)
    if count < 2:
        return None
    gpus, pairs, q = machine_quality(machine)
    wanted = set(default_sizes(count))
    skipped: dict[int, str] = {}
    for size in sizes or []:
        if size < 2:
            skipped[size] = "a TP size below 2 has no groups to form"
        elif size > count:
            skipped[size] = f"only {count} GPUs are known"
        else:
            wanted.add(size)
    vendors = {(machine.gpus[i].vendor or "").upper() for i in gpus if i in machine.gpus}
    amd = "AMD" in vendors and "NVIDIA" not in vendors
    rec = TpRecommendation(
        gpus=gpus, groups={}, worst_link={}, group_worst={}, scores={}, rationale={}, comparison=None,
        cuda_visible_devices={}, exact={}, skipped=skipped, pairs=pairs,
    )
    for size in sorted(wanted):
        result = solve_partition(q, size)
        groups = [[gpus[i] for i in group] for group in result.groups]
        leftover = [gpus[i] for i in result.leftover]
        worst_local = [_worst_pair(group, q) for group in result.groups]
        overall = min(worst_local, key=lambda pair: q[pair[0]][pair[1]])
        worst_pairs = [(gpus[a], gpus[b]) for a, b in worst_local]
        worst_pair = (gpus[overall[0]], gpus[overall[1]])
        worst_pq = pairs[worst_pair]
        rec.groups[size] = groups
        rec.worst_pairs[size] = worst_pair
        rec.leftover[size] = leftover
        rec.group_worst[size] = [pairs[p].path for p in worst_pairs]
        rec.worst_link[size] = worst_pq.path
        rec.scores[size] = worst_pq.bandwidth_gbs or 0.0
        rec.exact[size] = result.exact
        rec.method[size] = result.method
        rec.cuda_visible_devices[size] = [_visible_devices(group, amd) for group in groups]
        rec.rationale[size] = _rationale(size, groups, leftover, worst_pair, worst_pq, result, pairs, machine, count)
    rec.comparison = _comparison(rec)
    return rec


def _worst_pair(group: list[int], q: list[list[int]]) -> tuple[int, int]:
    """The slowest pair of a group (matrix indices, smaller first)."""
    pairs = [(a, b) if a < b else (b, a) for x, a in enumerate(group) for b in group[x + 1 :]]
    return min(pairs, key=lambda pair: (q[pair[0]][pair[1]], pair))


def _visible_devices(group: list[int], amd: bool) -> str:
    ids = ",".join(str(i) for i in group)
    if amd:
        # ROCm also honours CUDA_VISIBLE_DEVICES, but setting both renumbers twice; give one.
        return f"HIP_VISIBLE_DEVICES={ids}"
    # CUDA numbers devices fastest-first by default; nvidia-smi (and these groups) by PCI bus.
    return f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ids}"


def _describe_link(pair: tuple[int, int], pq: PairQuality) -> str:
    path = pq.path or "an unknown path"
    text = f"{path} between GPU{pair[0]} and GPU{pair[1]} ({_speed(pq)})"
    if pq.p2p_ok is False:
        text += "; P2P is not available there, so NCCL stages copies through host memory (SHM)"
    return text


def _groups_text(groups: list[list[int]]) -> str:
    shown = ["{" + ",".join(str(i) for i in g) + "}" for g in groups[:6]]
    if len(groups) > 6:
        shown.append(f"... ({len(groups)} groups)")
    return " ".join(shown)


def _rationale(size: int, groups: list[list[int]], leftover: list[int], worst_pair: tuple[int, int],
               worst_pq: PairQuality, result: PartitionResult, pairs: dict[tuple[int, int], PairQuality],
               machine: Machine, count: int) -> str:
    replicas = f"{len(groups)} replica{'s' if len(groups) != 1 else ''} (DP={len(groups)})"
    text = f"{replicas} of {_groups_text(groups)}; the slowest link inside any group is {_describe_link(worst_pair, worst_pq)}."
    if result.exact and len(groups) > 1:
        text += " No other grouping has a faster slowest link."
    numa = [{machine.gpus[i].numa_node if i in machine.gpus else None for i in g} for g in groups]
    if all(None not in nodes for nodes in numa):
        local = sum(1 for nodes in numa if len(nodes) == 1)
        if len(groups) == 1:
            text += " The group stays on one NUMA node." if local else f" The group spans {len(numa[0])} NUMA nodes."
        elif local == len(groups):
            text += " Every group stays on one NUMA node."
        elif local:
            text += f" {local} of {len(groups)} groups stay on one NUMA node."
        else:
            text += " No group fits on one NUMA node."
    nic_groups = [g for g in groups if all(pairs[(min(a, b), max(a, b))].near_nic for x, a in enumerate(g) for b in g[x + 1 :])]
    if nic_groups and any(pq.near_nic for pq in pairs.values()):
        text += f" {len(nic_groups)} of {len(groups)} groups share a NIC that every member reaches without crossing the CPU (PIX/PXB)."
    if leftover:
        gpus_left = ", ".join(f"GPU{i}" for i in leftover)
        text += f" {count} GPUs do not divide into groups of {size}: {gpus_left} left over."
    if not result.exact:
        text += f" Found by {result.method}; near-optimal, not proven optimal."
    return text


def _comparison(rec: TpRecommendation) -> str | None:
    """The seed article's question: two TP2 groups on near pairs, or one TP4 across a slower boundary?"""
    sizes = sorted(rec.groups)
    doublings = [(s, 2 * s) for s in sizes if 2 * s in rec.groups and rec.groups[s] and rec.groups[2 * s]]
    if not doublings:
        return None
    parts: list[str] = []
    chosen = [d for d in doublings if d[0] == 2][:1]
    # Also the step where groups first cross a socket boundary (SYS, lost P2P, another NUMA node),
    # or failing that the first step that costs link quality at all.
    boundary = next((d for d in doublings if _crosses_boundary(rec, d[1], d[0])), None)
    if boundary is None:
        boundary = next((d for d in doublings if _worse(rec, d[1], d[0])), None)
    if boundary is not None and boundary not in chosen:
        chosen.append(boundary)
    if not chosen:
        chosen = doublings[:1]
    for small, big in chosen:
        parts.append(_compare_sizes(rec, small, big))
    return " ".join(parts)


def _worse(rec: TpRecommendation, big: int, small: int) -> bool:
    """Whether the bigger TP size's slowest link is in a worse class or bandwidth tier."""
    return _slower(rec.pairs[rec.worst_pairs[big]], rec.pairs[rec.worst_pairs[small]])


def _crosses_boundary(rec: TpRecommendation, big: int, small: int) -> bool:
    def crossing(pq: PairQuality) -> bool:
        return pq.path == "SYS" or pq.p2p_ok is False or pq.same_numa is False

    big_pq, small_pq = rec.pairs[rec.worst_pairs[big]], rec.pairs[rec.worst_pairs[small]]
    return crossing(big_pq) and not crossing(small_pq) and _slower(big_pq, small_pq)


def _slower(pq: PairQuality, than: PairQuality) -> bool:
    return bandwidth_tier(pq.bandwidth_gbs) < bandwidth_tier(than.bandwidth_gbs) or path_rank(pq.path) > path_rank(than.path)


def _compare_sizes(rec: TpRecommendation, small: int, big: int) -> str:
    big_pair = rec.worst_pairs[big]
    big_pq = rec.pairs[big_pair]
    big_group = next(g for g in rec.groups[big] if big_pair[0] in g and big_pair[1] in g)
    pieces = [g for g in rec.groups[small] if set(g) <= set(big_group)]
    if len(pieces) < 2:
        pieces = rec.groups[small][:2]
    _, small_pq = _worst_of(rec, pieces)
    small_text = " and ".join("{" + ",".join(str(i) for i in g) + "}" for g in pieces)
    big_text = "{" + ",".join(str(i) for i in big_group) + "}"
    count = "Two" if len(pieces) == 2 else str(len(pieces))
    if not _slower(big_pq, small_pq):
        return (
            f"TP{big} costs no link quality here: one TP{big} group {big_text} has the same slowest link "
            f"({big_pq.path or 'unknown'}, {_speed(big_pq)}) as the TP{small} groups {small_text}, "
            f"so choose between them by memory and throughput."
        )
    if big_pq.bandwidth_gbs and small_pq.bandwidth_gbs and big_pq.p2p_ok is not False:
        ratio = big_pq.bandwidth_gbs / small_pq.bandwidth_gbs
        if ratio >= MODEST_SLOWDOWN:
            return (
                f"TP{big} costs little link quality here: one TP{big} group {big_text} has {big_pq.path or 'an unknown path'} "
                f"between GPU{big_pair[0]} and GPU{big_pair[1]} ({_speed(big_pq)}) as its slowest link, against "
                f"{small_pq.path or 'unknown'} ({_speed(small_pq)}) for the TP{small} groups {small_text}, about "
                f"{round((1 - ratio) * 100)}% slower, so choose between them by memory and throughput."
            )
    reason = (
        f"{count} TP{small} groups {small_text} keep every all-reduce on {small_pq.path or 'unknown'} links "
        f"({_speed(small_pq)}), while one TP{big} group {big_text} must cross {big_pq.path or 'an unknown path'} "
        f"between GPU{big_pair[0]} and GPU{big_pair[1]} ({_speed(big_pq)})"
    )
    if big_pq.p2p_ok is False:
        reason += ", where P2P is not available and copies go through host memory"
    reason += (
        f". A tensor-parallel all-reduce after every layer runs at the pace of its slowest link, so prefer "
        f"TP{small} with {len(rec.groups[small])} data-parallel replicas when the model fits in {small} GPUs' "
        f"memory, and use TP{big} only when it must."
    )
    return reason


def _worst_of(rec: TpRecommendation, groups: list[list[int]]) -> tuple[tuple[int, int], PairQuality]:
    pairs = [_worst_pair_in(rec, g) for g in groups]
    key = min(pairs, key=lambda p: (bandwidth_tier(rec.pairs[p].bandwidth_gbs), rec.pairs[p].bandwidth_gbs or 0))
    return key, rec.pairs[key]


def _worst_pair_in(rec: TpRecommendation, group: list[int]) -> tuple[int, int]:
    candidates = [(min(a, b), max(a, b)) for x, a in enumerate(group) for b in group[x + 1 :]]
    return min(candidates, key=lambda p: (_pair_level(rec.pairs[p]), rec.pairs[p].bandwidth_gbs or 0, p))


def _speed(pq: PairQuality) -> str:
    if pq.bandwidth_gbs is None:
        return "speed unknown"
    return f"{pq.bandwidth_gbs:g} GB/s measured" if pq.measured else f"~{pq.bandwidth_gbs:.3g} GB/s estimated"
