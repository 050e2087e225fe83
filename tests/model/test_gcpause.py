"""The collector paused around a big parse: what the block built is not rescanned as young objects after it."""

from __future__ import annotations

import gc

import pytest

from k3diag import gcpause
from k3diag.gcpause import collector_paused


@pytest.fixture(autouse=True)
def _nothing_frozen(monkeypatch):
    # commands run in-process by earlier tests freeze what they loaded (`collector_paused(freeze=True)`)
    gc.unfreeze()
    monkeypatch.setattr(gcpause, "_froze", False)
    yield


def test_records_built_while_paused_go_to_the_oldest_generation_unscanned() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        records = [[index] for index in range(20_000)]
    assert gc.isenabled()
    # nothing of the block is left young for the next allocation to scan, and it is still collectable
    assert gc.get_count()[0] < 1000
    oldest = {id(item) for item in gc.get_objects(generation=2)}
    assert id(records[0]) in oldest and id(records[-1]) in oldest
    assert gc.get_freeze_count() == 0


def test_a_cycle_built_while_paused_is_still_collected() -> None:
    with collector_paused():
        cycle: list = []
        cycle.append(cycle)
        marker = id(cycle)
        del cycle
    gc.collect()
    assert marker not in {id(item) for item in gc.get_objects()}


def test_what_a_caller_froze_stays_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            records = [[index] for index in range(100)]
        assert gc.get_freeze_count() == frozen  # not thawed by the pause
        assert len(records) == 100
    finally:
        gc.unfreeze()


def test_nested_pauses_leave_the_collector_as_it_was() -> None:
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_a_command_froze_stays_frozen_and_is_not_counted_again() -> None:
    with collector_paused(freeze=True):
        kept = [[index] for index in range(100)]
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with collector_paused():
            records = [[index] for index in range(100)]
        assert gc.get_freeze_count() == frozen and len(records) == len(kept)
    finally:
        gc.unfreeze()
