"""The cyclic garbage collector paused around work that builds many acyclic records.

A parse or an analysis of a big input creates hundreds of thousands of small records (devices, links,
evidence references, connections) and no reference cycle; the collector would rescan the growing heap
again and again for nothing (a 5,000-device `lspci -vv`: ~190 passes, ~45 ms of its parse; a 1 GiB NCCL
log: more than the parsing itself). Reference counting still frees everything as usual; only cycles wait
until the collector runs again. A leaf module: it imports nothing from k3diag, so every layer may use it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


# Whether a block here froze objects (`freeze=True`): then nothing may be thawed. Known without asking
# `gc.get_freeze_count()`, which walks every frozen object (2 ms a call after a command froze its records:
# a test suite that parsed 2,700 times after one took 5.7 s more).
_froze = False


@contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
    """Within the block the cyclic collector does not run; afterwards it is as it was (nesting is fine).
    `freeze`: what exists when the block ends is moved out of the collector's view (`gc.freeze`) before it
    runs again, for records that live until the process exits (a command's inputs, start-up's objects)."""
    global _froze
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
            _froze = True
        elif was_enabled and not _froze and gc.get_freeze_count() == 0:
            # What the block built would be scanned as young objects at the first allocation after it (a
            # 5,000-device parse: ~130,000 of them, ~12 ms) only to survive: they go to the oldest generation
            # unscanned instead (`freeze` then `unfreeze` moves every tracked object there), where the next
            # full collection still finds any cycle. Not when something is frozen: `unfreeze` would thaw it
            # (`get_freeze_count` is quick when nothing is: it counts the frozen objects one by one).
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()
