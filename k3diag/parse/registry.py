"""Which formats k3diag reads, which module parses each, and where its records go in the model.

Modules are named, not imported, so `k3diag --help` stays fast: a parser is imported the
first time content has to be sniffed. Each parser module provides:

    sniff(text: str) -> float          confidence 0..1 that `text` (a section, or a file's head) is this format
    parse(section: Section, input_name: str) -> result   pure; result has `.warnings: list[str]`
    START_RE (optional)                 compiled regex: a line that begins a new output of this format
                                        (declare the literals such a line contains in `FormatSpec.start`)
    parse_stream(lines, input_name) -> result   (streaming formats only: NCCL logs can be gigabytes)

and the merger `module:function` has the signature merge(result, machine, input_record) -> None.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any, Callable

from k3diag.parse.hints import compiled_hint, fold


@dataclass(frozen=True)
class FormatSpec:
    """One format k3diag reads: its parser and merger modules, and how it is recognized."""

    name: str
    parser: str
    merger: str
    streaming: bool = False
    # A case-insensitive regex that every output of this format contains somewhere (a superset of
    # what `sniff` accepts). Text without it cannot be this format, so its parser is not even
    # imported: most runs read one or two formats, and importing all twenty costs ~80 ms. It is
    # tried through literals first (`k3diag.parse.hints`): the regex runs only where they occur.
    hint: str | None = None
    # Literals every line that begins an output of this format contains (its `START_RE` tried only on
    # those lines): section splitting finds them with `str.find` and imports only the parsers whose
    # literal occurs. Empty for formats without a `START_RE`.
    start: tuple[str, ...] = ()
    # The start line begins every block of an output, not only the output (ibstat's `CA 'mlx5_0'`, one per
    # device): a start line right after a block of this format continues that output. Its `START_RE` is
    # there to cut it from another output pasted above or below it without a prompt (`ibstat; ibstatus`).
    repeats: bool = False

    def may_match(self, text: str, folded: str | None = None) -> bool:
        """Whether the hint occurs in `text` (`folded`: `hints.fold(text)`, when the caller has it)."""
        if self.hint is None:
            return True
        return compiled_hint(self.hint).search(text, fold(text) if folded is None else folded)


# A CSV header is found by the fields the merge needs to place a GPU (one of them is in every query
# k3diag can use); each literal costs one pass over the text, so the list stays short.
_CSV_FIELDS = ("index", "name", "bus_id", "uuid")
_LSPCI_HINT = (r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|LnkCap|LnkSta|ACSC|Capabilities: |Kernel driver in use|Kernel modules"
               r"|Control: I/O|Status: Cap|Bus: primary|NUMA node|Physical Slot|LnkCtl2")
# What `nvidia_query_csv.sniff` scores: a header line (its `START_RE`: a field name it knows, then the rest of
# the line holds a comma), or a row holding an upper-case bus id (`noheader`). `,\s*[a-z_]` alone, the hint
# before, is in most texts: every `lspci -vv` imported and sniffed the CSV parser and `nvidia_topo_matrix`.
# The bus id (`00000000:1B:`) is found from its colon, the 8 hex digits checked behind it: led by the class,
# the regex tried a match at every hex digit of the text (3.3 ms on the 64 KiB an lspci head is sniffed on,
# 0.1 ms so).
_CSV_HINT = (r"(?:index|name|uuid|bus_id|timestamp|driver_version|pstate|memory\.|pcie\.link\.|utilization\.|"
             r"temperature\.)[^\n]*,|:[0-9a-f]{2}:(?<=[0-9a-f]{8}:[0-9a-f]{2}:)")
# What `kernel_cmdline.sniff` scores: `BOOT_IMAGE=` or `root=` on the line, or an IOMMU key among its tokens
# (`IOMMU_KEYS`: `intel_iommu`, `amd_iommu`, `iommu.strict`... all hold `iommu`). `=` alone was in every
# `lspci -vv` (`DEVSEL=fast`).
_CMDLINE_HINT = r"BOOT_IMAGE=|root=|iommu|pcie_acs_override"
_NCCL_TESTS_TYPES = r"int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16|fp8_e4m3|fp8_e5m2|char|int|f8e4m3|f8e5m2"

# Every format has a hint (a case-insensitive regex every output of it contains: a superset of what
# its `sniff` accepts), so a text is sniffed only by the parsers that could read it.
FORMATS: tuple[FormatSpec, ...] = (
    FormatSpec("nvidia-smi-topo-matrix", "k3diag.parse.nvidia_topo_matrix", "k3diag.join.merge_nvidia:merge_topo_matrix",
               hint=r"GPU0", start=("GPU0",)),
    FormatSpec("nvidia-smi-topo-p2p", "k3diag.parse.nvidia_topo_p2p", "k3diag.join.merge_nvidia:merge_topo_p2p",
               hint=r"GPU0", start=("GPU0",)),
    # Before nvidia-smi-query: a `-q -d FABRIC` output (NVSMI LOG header, Fabric blocks only) ties with it.
    FormatSpec("nvidia-smi-query-fabric", "k3diag.parse.nvidia_fabric", "k3diag.join.merge_fabric:merge_query_fabric",
               hint=r"CliqueId|ClusterUUID|Clique ID|Cluster UUID|(?m:^[^\S\n]*Fabric[^\S\n]*$)"),
    FormatSpec("nvidia-smi-query", "k3diag.parse.nvidia_query", "k3diag.join.merge_nvidia:merge_query",
               hint=r"NVSMI LOG|Product Name|GPU Link Info|PCIe Generation|Bus Id|Performance State",
               start=("NVSMI LOG",)),
    FormatSpec("nvidia-smi-query-gpu-csv", "k3diag.parse.nvidia_query_csv", "k3diag.join.merge_nvidia:merge_query_csv",
               hint=_CSV_HINT, start=_CSV_FIELDS),
    FormatSpec("nvidia-smi-nvlink-status", "k3diag.parse.nvidia_nvlink_status", "k3diag.join.merge_fabric:merge_nvlink",
               hint=r"Link\s+\d+\s*:|all links are inactive"),
    FormatSpec("nvidia-smi-nvlink-capabilities", "k3diag.parse.nvidia_nvlink_capabilities",
               "k3diag.join.merge_fabric:merge_nvlink", hint=r"Link\s+\d+\s*,\s*P2P is supported"),
    FormatSpec("nvidia-smi-nvlink-remote", "k3diag.parse.nvidia_nvlink_remote", "k3diag.join.merge_fabric:merge_nvlink",
               hint=r"Remote Device"),
    FormatSpec("nvidia-fabricmanager-log", "k3diag.parse.fabricmanager", "k3diag.join.merge_fabric:merge_fabricmanager",
               hint=r"fabric ?manager|NVSwitch|multicast|Error 802|system not yet initialized|SYSTEM_NOT_READY|"
                    r"SystemNotReady|cuMemCreate"),
    FormatSpec("ibstat", "k3diag.parse.ibstat", "k3diag.join.merge_fabric:merge_rdma", hint=r"CA\s+'",
               start=("CA '",), repeats=True),
    FormatSpec("ibstatus", "k3diag.parse.ibstatus", "k3diag.join.merge_fabric:merge_rdma",
               hint=r"Infiniband device '", start=("Infiniband device '",), repeats=True),
    FormatSpec("ibv-devinfo", "k3diag.parse.ibv_devinfo", "k3diag.join.merge_fabric:merge_rdma", hint=r"hca_id:",
               start=("hca_id:",), repeats=True),
    FormatSpec("nvml-readings", "k3diag.parse.nvml_readings", "k3diag.join.merge_nvidia:merge_nvml", hint=r"k3diag\.nvml-readings/"),
    FormatSpec("host-readings", "k3diag.parse.host_readings", "k3diag.join.merge_host:merge_host", hint=r"k3diag\.host-readings/"),
    FormatSpec("lspci-vv", "k3diag.parse.lspci", "k3diag.join.merge_pci:merge_lspci", hint=_LSPCI_HINT),
    # Two literals (`+-`, `\-`), not the class `[+\\]-`: each is looked for with `str.find`, no regex run.
    FormatSpec("lspci-tv", "k3diag.parse.lspci_tree", "k3diag.join.merge_pci:merge_lspci_tree", hint=r"\+-|\\-"),
    FormatSpec("sysfs-snapshot", "k3diag.parse.sysfs_snapshot", "k3diag.join.merge_pci:merge_sysfs", hint=r"k3diag\.sysfs-snapshot/"),
    FormatSpec("kernel-cmdline", "k3diag.parse.kernel_cmdline", "k3diag.join.merge_pci:merge_cmdline",
               hint=_CMDLINE_HINT),
    FormatSpec("dmesg", "k3diag.parse.dmesg", "k3diag.join.merge_pci:merge_dmesg",
               hint=r"\[\s*\d+\.\d+\]|kernel: |NVRM: |PCIe Bus Error|AER: |DMAR: |AMD-Vi: |iommu: |pcieport |SXid \(PCI:"),
    FormatSpec("nccl-log", "k3diag.parse.nccl_log", "k3diag.join.merge_nccl:merge_nccl_log", streaming=True,
               hint=r"[NR]CCL"),
    FormatSpec("nccl-tests", "k3diag.parse.nccl_tests", "k3diag.join.merge_bench:merge_benchmark",
               # a row's type column is one of `_TYPES` as printed, lower case: `\tINT Msg` of lspci is none
               hint=rf"nThread|Collective test|busbw|bus bandwidth|Out of bounds|_perf|\s(?-i:{_NCCL_TESTS_TYPES})\s",
               start=("nGpus", "Collective test starting:", "_perf")),
    FormatSpec("p2p-bandwidth-latency-test", "k3diag.parse.p2p_bandwidth", "k3diag.join.merge_bench:merge_benchmark",
               hint=r"P2P|Access Peer", start=("P2P (Peer-to-Peer)",)),
    FormatSpec("nvbandwidth", "k3diag.parse.nvbandwidth", "k3diag.join.merge_bench:merge_benchmark",
               hint=r"nvbandwidth|Running |memcpy|SUM ", start=("nvbandwidth Version:",)),
    FormatSpec("rocm-smi-showtopo", "k3diag.parse.rocm_smi", "k3diag.join.merge_amd:merge_rocm_smi",
               # "Numa" as rocm-smi spells it, not the "NUMA Affinity" column of every nvidia-smi topo -m
               hint=r"between two GPUs|(?-i:Numa)", start=("ROCm System Management Interface",)),
    FormatSpec("amd-smi-topology", "k3diag.parse.amd_smi", "k3diag.join.merge_amd:merge_amd_smi",
               hint=r"TABLE:|link_accessibility|link_type|num_hops|link_status|numa_bandwidth", start=("ACCESS TABLE:",)),
    FormatSpec("amd-smi-static-bus", "k3diag.parse.amd_smi_static", "k3diag.join.merge_amd:merge_amd_smi_static",
               hint=r"MAX_PCIE_(?:WIDTH|LANES|SPEED)"),
    FormatSpec("rocm-bandwidth-test", "k3diag.parse.rocm_bandwidth", "k3diag.join.merge_bench:merge_benchmark",
               hint=r"RocmBandwidthTest|bandwidth GB/s", start=("RocmBandwidthTest Version:",)),
    FormatSpec("amdsmi-readings", "k3diag.parse.amdsmi_readings", "k3diag.join.merge_amd:merge_amdsmi",
               hint=r"k3diag\.amdsmi-readings/"),
    FormatSpec("probe-readings", "k3diag.parse.probe_readings", "k3diag.join.merge_bench:merge_benchmark",
               hint=r"k3diag\.probe-readings/"),
    FormatSpec("nccl-topo-xml", "k3diag.parse.nccl_topo_xml", "k3diag.join.merge_nccl:merge_topo_xml",
               hint=r"<system", start=("<system version=",)),
    # Serving benchmarks (docs/serving.md): kept for `k3diag serving --from` and the audit.
    FormatSpec("vllm-bench-serve", "k3diag.parse.serving.vllm_bench", "k3diag.join.merge_serving:merge_serving",
               hint=r'"(?:request|output)_throughput"'),
    FormatSpec("sglang-bench-serving", "k3diag.parse.serving.sglang_bench", "k3diag.join.merge_serving:merge_serving",
               hint=r"retokenized|e2e_latency_ms"),
    FormatSpec("serving-result-text", "k3diag.parse.serving.summary_text", "k3diag.join.merge_serving:merge_serving",
               hint=r"Serving Benchmark Result"),
    FormatSpec("trtllm-bench", "k3diag.parse.serving.trtllm_bench", "k3diag.join.merge_serving:merge_serving",
               hint=r'"world_info"|PERFORMANCE OVERVIEW'),
    FormatSpec("aiperf", "k3diag.parse.serving.aiperf", "k3diag.join.merge_serving:merge_serving",
               hint=r'"(?:request_throughput|time_to_first_token|request_latency|output_token_throughput)"\s*:\s*\{'),
    FormatSpec("llmperf", "k3diag.parse.serving.llmperf", "k3diag.join.merge_serving:merge_serving",
               hint=r'"results_'),
    FormatSpec("vllm-engine-log", "k3diag.parse.serving.vllm_log", "k3diag.join.merge_serving:merge_engine_log",
               hint=r"LLM engine|vLLM|Custom allreduce|custom_all_reduce|gpu_p2p_access_cache"),
    FormatSpec("vllm-p2p-cache", "k3diag.parse.serving.p2p_cache", "k3diag.join.merge_serving:merge_p2p_cache",
               hint=r'"\d+->\d+"'),
)

FORMAT_NAMES: tuple[str, ...] = tuple(spec.name for spec in FORMATS)


@cache
def parser_module(spec: FormatSpec) -> ModuleType | None:
    """The parser module, or None while a format's module is not written yet."""
    try:
        return importlib.import_module(spec.parser)
    except ModuleNotFoundError as exc:
        if exc.name == spec.parser:
            return None
        raise


@cache
def merger(spec: FormatSpec) -> Callable[..., Any] | None:
    module_name, _, func_name = spec.merger.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    return getattr(module, func_name, None)


def available_formats(text: str | None = None) -> list[FormatSpec]:
    """Formats whose parser exists; given `text`, only those whose hint occurs in it."""
    if text is None:
        return [spec for spec in FORMATS if parser_module(spec) is not None]
    folded = fold(text)  # once for every hint
    return [spec for spec in FORMATS if spec.may_match(text, folded) and parser_module(spec) is not None]


def spec_named(name: str) -> FormatSpec | None:
    for spec in FORMATS:
        if spec.name == name:
            return spec
    return None
