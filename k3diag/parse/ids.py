"""PCI bus id spellings: the functions live in `k3diag.model.ids` (the model indexes by bus id);
re-exported here for the parsers that have always imported them from this module."""

from __future__ import annotations

from k3diag.model.ids import bdf_from_nccl_busid, is_bdf, normalize_bdf, parse_cpulist

__all__ = ["bdf_from_nccl_busid", "is_bdf", "normalize_bdf", "parse_cpulist"]
