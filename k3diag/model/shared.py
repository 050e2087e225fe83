"""What a run derives once from records it reads many times: a machine's PCIe tree and GPUDirect pairs,
a model's layer tensors and per-stage weight lines.

Inside `reading()` the records are read, not changed: rules, planners and renderers ask for the same
derived structure of one machine again and again (each PCIe rule builds the tree of 5,000 devices; four
rules share one GPU x NIC table of 144 x 36 pairs), and `advise` for the same stage ledgers across dozens
of layouts and GPU counts, so the first answer is kept for the rest of the block. Code that adds or changes
records must run outside it. Outside a `reading()` block nothing is kept. Callers get the value computed
the first time and must not change it (hand out copies of lists).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Hashable, Iterator, TypeVar

Derived = TypeVar("Derived")

# (id of the owner, kind) -> (the owner, the guard it was computed under, the value). The owner is held
# so that its id cannot be reused by another object while the block lasts.
_SCOPE: ContextVar[dict | None] = ContextVar("k3diag_shared_reading", default=None)


@contextmanager
def reading() -> Iterator[None]:
    """Within the block, `shared` returns what it computed first for the same machine, kind and guard."""
    if _SCOPE.get() is not None:
        yield
        return
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def shared(owner: object, kind: Hashable, compute: Callable[[], Derived], guard: Hashable = None) -> Derived:
    """`compute()`, or inside `reading()` the value it gave for this owner (by identity) and kind while
    `guard` (a cheap fingerprint of the records it reads) was the same."""
    scope = _SCOPE.get()
    if scope is None:
        return compute()
    hit = scope.get((id(owner), kind))
    if hit is None or hit[0] is not owner or hit[1] != guard:
        hit = scope[(id(owner), kind)] = (owner, guard, compute())
    return hit[2]
