"""The pure partition algorithm behind the TP planner: split n GPUs into groups of one size.

Given a pairwise link quality (higher is better), choose the partition whose slowest link inside any
group is as fast as possible, then the sum of the groups' slowest links, then the sum of every link
inside the groups. Exhaustive branch and bound up to `EXACT_MAX_GPUS`; a bottom-up tree packing that is
exact on tree-shaped (ultrametric) qualities at any size; local search otherwise. No knowledge of
machines, links or GPUs lives here: `k3diag.analyze.planner` turns the model into qualities.

The scoring lives in `partition_score`, the local search in `partition_search`; this module holds the
solvers (tree packing, greedy seeds, branch and bound) and the entry points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Sequence

# Re-exported: callers and tests import the scoring from here.
from k3diag.analyze.partition_score import (  # noqa: F401
    Matrix,
    PairCost,
    PartitionResult,
    PartitionScore,
    group_stats,
    quality_matrix,
    score_partition,
)
from k3diag.analyze.partition_search import _iterated_search, _local_search

# Exhaustive search is used up to this many GPUs; beyond it the tree algorithm plus local search.
EXACT_MAX_GPUS = 16
# Branch-and-bound nodes before the exhaustive search gives up and keeps the best partition found.
EXACT_NODE_BUDGET = 300_000


class _OutOfBudget(Exception):
    pass


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
    """A cluster of the single-linkage dendrogram: its GPUs and the clusters merged into it."""

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
