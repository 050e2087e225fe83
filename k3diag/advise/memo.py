"""Results remembered for the length of one planning run (`with memoized(): ...`).

`advise` asks for the same things many times: the tensors of a layer kind, the weight lines of
a stage, the bytes a token reads, for dozens of layouts and GPU counts. Inside `memoized()` each
is computed once; outside, `remembered` just computes. Keys name the object a result belongs to
by identity, and the object is held with the result so that its id cannot be given to another
object while the memo lives. Results are the same either way: callers get the value computed
the first time, and must not change it (lists are handed out as copies).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

_MEMO: ContextVar[dict | None] = ContextVar("k3diag_advise_memo", default=None)


@contextmanager
def memoized() -> Iterator[None]:
    """Remember results until the block ends (nested blocks share the outer memo)."""
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def remembered(what: str, owner: object, key: tuple, compute: Callable[[], T]) -> T:
    """`compute()`, or the value it gave for the same `what`, `owner` (by identity) and `key`."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    slot = (what, id(owner), key)
    hit = memo.get(slot)
    if hit is None or hit[0] is not owner:
        hit = memo[slot] = (owner, compute())
    return hit[1]
