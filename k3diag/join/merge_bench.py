"""Put benchmark results into the machine. Generic: any parse result with a `benchmarks` list
(nccl-tests, p2pBandwidthLatencyTest, nvbandwidth, rocm-bandwidth-test) lands in
`machine.benchmarks`; NCCL log lines a benchmark printed (NCCL_DEBUG=INFO) land in
`machine.nccl` like a log given on its own."""

from __future__ import annotations

from k3diag.model.machine import InputRecord, Machine


def merge_benchmark(result, machine: Machine, record: InputRecord | None = None) -> None:
    for bench in getattr(result, "benchmarks", None) or []:
        if record is not None and hasattr(bench, "input"):
            bench.input = record.path
        if _fold_into_previous_header(bench, machine):
            continue
        machine.benchmarks.append(bench)
    nccl = getattr(result, "nccl", None)
    if nccl is not None and getattr(nccl, "runs", None):
        from k3diag.join.merge_nccl import merge_nccl_log

        merge_nccl_log(nccl, machine, record)


def _fold_into_previous_header(bench, machine: Machine) -> bool:
    """A file holding several tests is cut where each begins; a `# Collective test starting: X`
    line then stands alone in front of the test it names. Give its op to that test."""
    if getattr(bench, "tool", None) != "nccl-tests" or not machine.benchmarks:
        return False
    previous = machine.benchmarks[-1]
    if getattr(previous, "tool", None) != "nccl-tests" or previous.input != bench.input:
        return False
    if previous.rows or previous.devices or previous.avg_busbw is not None or previous.out_of_bounds is not None:
        return False
    if previous.op and not bench.op:
        bench.op = previous.op
    bench.version = bench.version or previous.version
    if previous.variant == "rccl-tests":
        bench.variant = "rccl-tests"
    machine.benchmarks[-1] = bench
    return True
