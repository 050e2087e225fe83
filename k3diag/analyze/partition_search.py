"""Local search for the partition solver: GPU swaps and rotations between groups while the score rises,
then seeded random shakes of the worst groups (`k3diag.analyze.partition` uses it beyond what the tree
packing proves optimal)."""

from __future__ import annotations

import math

from k3diag.analyze.partition_score import Matrix, PartitionScore, group_stats, score_partition

# Random shakes of the worst groups the local search tries after settling (beyond the exact range).
KICKS = 30
KICK_PATIENCE = 8  # ... stopping after this many in a row that found nothing better
KICK_WORK_BUDGET = 150_000  # ... or once this many swaps have been priced (about 0.3 s)


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
