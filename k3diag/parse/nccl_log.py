"""The NCCL/RCCL log parser lives in the `k3diag.parse.nccl` package; this name stays for the registry
and for code that imports it."""

from k3diag.parse.nccl import (  # noqa: F401
    DETAIL_RUNS,
    NcclLogResult,
    TESTS_RANK_RE,
    bus_id_from_tests_header,
    parse,
    parse_bytes,
    parse_evidence,
    parse_path,
    parse_stream,
    sniff,
)
from k3diag.parse.nccl.sniff import MIN_LINES_IN_DOCUMENT, count_lines  # noqa: F401  (read by parse.markdown)
