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


@contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
    """Within the block the cyclic collector does not run; afterwards it is as it was (nesting is fine).
    `freeze`: what exists when the block ends is moved out of the collector's view (`gc.freeze`) before it
    runs again, for records that live until the process exits (a command's inputs, start-up's objects)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        elif was_enabled and gc.get_freeze_count() == 0:
            # What the block built would be scanned as young objects at the first allocation after it (a
            # 5,000-device parse: ~130,000 of them, ~12 ms) only to survive: they go to the oldest generation
            # unscanned instead (`freeze` then `unfreeze` moves every tracked object there), where the next
            # full collection still finds any cycle. Not when something is frozen: `unfreeze` would thaw it.
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()
