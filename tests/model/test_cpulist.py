"""CPU lists as the kernel and nvidia-smi print them, and as pastes and hostile bundles garble them."""

from __future__ import annotations

from k3diag.model.ids import MAX_CPUS, fold_ranges, parse_cpulist, strict_cpulist


def test_kernel_and_nvidia_smi_lists_expand() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert strict_cpulist("0-15,56-71") == list(range(16)) + list(range(56, 72))
    assert fold_ranges(parse_cpulist("0-15,56-71")) == "0-15,56-71"
    assert parse_cpulist("") == [] and strict_cpulist("") == []


def test_a_garbled_part_is_skipped_or_the_strict_list_is_unknown() -> None:
    # a cell cut in the paste (`0-1`), glued to the next (`0-150`), a superscript digit (`str.isdigit`
    # takes it, `int` does not), a reversed range
    for text in ("0-15,5x", "0-15,", "²", "0-²", "7-3"):
        assert strict_cpulist(text) is None, text
    assert parse_cpulist("0-3,x,²,7-3,9") == [0, 1, 2, 3, 9]


def test_a_list_wider_than_any_machine_is_not_expanded() -> None:
    # four billion numbers would take minutes and gigabytes: a hostile bundle must not stall the report
    assert parse_cpulist("0-4294967295") == []
    assert parse_cpulist("0-3,0-4294967295,8") == [0, 1, 2, 3, 8]
    assert strict_cpulist("0-4294967295") is None
    assert len(strict_cpulist(f"0-{MAX_CPUS - 1}") or []) == MAX_CPUS
