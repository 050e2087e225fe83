"""Counts in prose read as people write them."""

from k3diag.model.words import counted


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "communicator") == "1 communicator"
    assert [counted(n, "GPU") for n in (0, 2, 72)] == ["0 GPUs", "2 GPUs", "72 GPUs"]
    assert counted(3, "more kind of problem", "more kinds of problem") == "3 more kinds of problem"
    assert counted(1, "more kind of problem", "more kinds of problem") == "1 more kind of problem"
