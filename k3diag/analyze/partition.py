"""The pure partition algorithm behind the TP planner: split n GPUs into groups of one size.

Given a pairwise link quality (higher is better), choose the partition whose slowest link inside any
group is as fast as possible, then the sum of the groups' slowest links, then the sum of every link
inside the groups. Exhaustive branch and bound up to `EXACT_MAX_GPUS`; a bottom-up tree packing that is
exact on tree-shaped (ultrametric) qualities at any size; local search otherwise. No knowledge of
machines, links or GPUs lives here: `k3diag.analyze.planner` turns the model into qualities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Callable, Sequence, Union

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
    import random  # here: the local search alone uses it, and the module costs ~1 ms of every start-up

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
