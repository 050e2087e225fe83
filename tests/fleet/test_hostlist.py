"""Folded host lists are what operators paste into scontrol, pdsh and clush: they must round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.fleet.hostlist import HostListError, fold_hosts, unfold_hosts


def test_fold_keeps_padding_and_ranges() -> None:
    names = ["gpu003", "gpu001", "gpu002", "gpu004", "gpu017", "gpu004"]
    assert fold_hosts(names) == "gpu[001-004,017]"


def test_fold_separates_prefixes_and_widths() -> None:
    assert fold_hosts(["n9", "n10", "n11", "login", "a-1-b", "a-2-b"]) == "a-[1-2]-b,login,n[9-11]"
    assert fold_hosts(["node1"]) == "node1"
    assert fold_hosts([]) == ""


def test_unfold_the_slurm_syntax() -> None:
    assert unfold_hosts("gpu[001-003,017],login") == ["gpu001", "gpu002", "gpu003", "gpu017", "login"]


@pytest.mark.parametrize("bad", ["gpu[3-1]", "gpu[a-b]", "gpu[1-2", "n[0-99999999]"])
def test_unfold_refuses_what_is_not_a_host_list(bad: str) -> None:
    with pytest.raises(HostListError):
        unfold_hosts(bad)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(min_value=0, max_value=400), min_size=1, max_size=40), st.sampled_from(["gpu", "rack1-n", "h"]),
       st.integers(min_value=0, max_value=4))
def test_fold_then_unfold_gives_the_same_names(numbers: set[int], prefix: str, width: int) -> None:
    names = {f"{prefix}{str(n).zfill(width)}" for n in numbers}
    assert sorted(unfold_hosts(fold_hosts(sorted(names)))) == sorted(names)
