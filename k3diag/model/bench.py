"""Benchmark results (nccl-tests, p2pBandwidthLatencyTest, nvbandwidth, rocm-bandwidth-test).

Each result type lives with its parser's domain; the core only relies on `tool` and `to_json()`.
"""

from __future__ import annotations

from typing import Protocol


class Benchmark(Protocol):
    tool: str

    def to_json(self) -> dict: ...
