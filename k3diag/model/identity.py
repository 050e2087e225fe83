"""What one input says about which machine it came from, each fact with the line that said it.

A folder can hold outputs of several machines (a pasted thread, a mixed-up bundle). Before any
judgement, `k3diag.join` groups inputs into machines by these keys and never merges evidence
whose keys conflict. A parser reports what its output prints by setting `identity` on its result
(an `InputIdentity`); `k3diag.join.identity` reads it for formats whose results do not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef


@dataclass(frozen=True)
class IdentityFact:
    """One key as the input printed it (`value` normalized for comparison) and where."""

    value: str
    source: SourceRef | None = None
    shown: str = ""  # as the input printed it (`NVIDIA L40S`), when `value` is normalized (`l40s`)

    @property
    def text(self) -> str:
        return self.shown or self.value

    def cite(self) -> str:
        where = f" ({self.source.input}:{self.source.line})" if self.source and self.source.line else (
            f" ({self.source.input})" if self.source else "")
        return f"{self.text}{where}"

    def to_json(self) -> dict:
        return {"value": self.text, "source": self.source.to_json() if self.source else None}


def normalize_gpu_name(name: str) -> str:
    """`NVIDIA GeForce RTX 4090` and `GeForce RTX 4090` compare equal; case and spacing do not matter."""
    text = name.strip().lower()
    text = re.sub(r"^(nvidia|amd|advanced micro devices,? inc\.?)\s+", "", text)
    text = re.sub(r"[\s_-]+", " ", text)
    return text.strip()


GENERIC_HOSTNAMES = frozenset({"localhost", "hostname", "host", "pod-id", "xxx", "redacted", "node", "(none)"})


# A host name as RFC 1123 allows it (letters, digits and dashes in labels of up to 63, joined by dots), with the
# underscore people use anyway: anything else (a newline, a space, a quote, markup) is no machine's name, and
# a name goes out whole into one-line formats (a Nagios status line, a Slurm host list), where a newline in a
# bundle's manifest forged a second line.
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?")


def is_hostname(name: str) -> bool:
    """Whether `name` (stripped) can be a host name: see `_HOSTNAME_RE`; at most 253 characters."""
    name = name.strip()
    return 0 < len(name) <= 253 and _HOSTNAME_RE.fullmatch(name) is not None


def refused_hostname(name: str) -> str:
    """How a sentence says `name` was refused (`is_hostname`): quoted escaped, so a newline or an escape in it
    is shown, never obeyed, and cut at 80 characters."""
    return f"{ascii(name[:80])} is no host name (letters, digits, dashes and dots only)"


def normalize_hostname(name: str) -> str:
    """Host names compare by their first label, case-insensitively (`node1` is `Node1.cluster`)."""
    return name.strip().lower().split(".", 1)[0]


@dataclass
class InputIdentity:
    """The machine keys one input carries. Every list holds distinct values in first-seen order.

    `gpu_count` is set only by inputs that list every GPU the machine shows (nvidia-smi -q, topo -m,
    NVML, rocm-smi), or say how many are attached (`Attached GPUs : 8` above the one block of
    `nvidia-smi -q -i 0`): a benchmark run on some of the GPUs says nothing about how many there are.
    Bus ids are normalized `dddd:bb:dd.f`; sources that print only the bus number give `dddd:bb:00.0`.
    """

    hostnames: list[IdentityFact] = field(default_factory=list)
    gpu_uuids: list[IdentityFact] = field(default_factory=list)
    gpu_serials: list[IdentityFact] = field(default_factory=list)
    gpu_bus_ids: list[IdentityFact] = field(default_factory=list)
    gpu_names: list[IdentityFact] = field(default_factory=list)
    # Whose GPUs these are (`NVIDIA`, `AMD`), from a tool that runs on one vendor's GPUs only: an
    # `nvidia-smi topo -m` and a `rocm-smi --showtopo` name no model, yet they are never one machine's.
    gpu_vendors: list[IdentityFact] = field(default_factory=list)
    gpu_count: IdentityFact | None = None
    driver_version: IdentityFact | None = None
    cuda_version: IdentityFact | None = None  # the CUDA version the driver supports
    rocm_version: IdentityFact | None = None
    # How many distinct GPUs the input shows at least (0: unknown, or several hosts).
    gpus_seen: int = 0
    # Which CPUs and NUMA node each GPU hangs off (`nvidia-smi topo -m`'s affinity columns), as
    # `GPU0=0-23`: wiring, fixed for a machine, so two inputs that differ in it are two machines.
    gpu_cpu_affinities: list[IdentityFact] = field(default_factory=list)
    gpu_numa_affinities: list[IdentityFact] = field(default_factory=list)

    # -- filling --------------------------------------------------------------------------------
    def add_hostname(self, value: str | None, source: SourceRef | None = None) -> None:
        # `localhost` and the placeholders people redact host names to name no machine in particular.
        if value and is_hostname(value) and normalize_hostname(value) not in GENERIC_HOSTNAMES:
            _add(self.hostnames, normalize_hostname(value), source, value.strip())

    def add_uuid(self, value: str | None, source: SourceRef | None = None) -> None:
        if value and value.strip() and value.strip().upper() not in ("N/A", "[N/A]"):
            _add(self.gpu_uuids, value.strip().lower(), source, value.strip())  # quoted as printed

    def add_serial(self, value: str | None, source: SourceRef | None = None) -> None:
        if value and value.strip() and value.strip().upper() not in ("N/A", "[N/A]", "0"):
            _add(self.gpu_serials, value.strip().lower(), source, value.strip())

    def add_bus_id(self, value: str | None, source: SourceRef | None = None) -> None:
        """A normalized bus id (see `k3diag.model.ids.normalize_bdf`)."""
        if value and value.strip():
            _add(self.gpu_bus_ids, value.strip().lower(), source)

    def add_name(self, value: str | None, source: SourceRef | None = None) -> None:
        if value and value.strip():
            _add(self.gpu_names, normalize_gpu_name(value), source, value.strip())

    def add_vendor(self, value: str | None, source: SourceRef | None = None) -> None:
        if value and value.strip():
            _add(self.gpu_vendors, value.strip().lower(), source, value.strip())

    def set_count(self, count: int, source: SourceRef | None = None) -> None:
        if count > 0 and (self.gpu_count is None or int(self.gpu_count.value) < count):
            self.gpu_count = IdentityFact(str(count), source)

    def set_driver(self, value: str | None, source: SourceRef | None = None) -> None:
        if value and value.strip() and self.driver_version is None:
            self.driver_version = IdentityFact(value.strip(), source)

    def set_cuda(self, value: str | None, source: SourceRef | None = None) -> None:
        if value and value.strip() and self.cuda_version is None:
            self.cuda_version = IdentityFact(value.strip(), source)

    def add_affinity(self, gpu: str, cpus: str | None, numa: int | None, source: SourceRef | None = None) -> None:
        """GPU `gpu`'s CPU affinity (a cpulist) and NUMA node, when the input prints them."""
        listed = "".join((cpus or "").split())
        if listed and listed.upper() != "N/A":
            _add(self.gpu_cpu_affinities, f"{gpu}={listed}", source, f"{gpu} on CPUs {listed}")
        if numa is not None and numa >= 0:
            _add(self.gpu_numa_affinities, f"{gpu}={numa}", source, f"{gpu} on NUMA node {numa}")

    def set_rocm(self, value: str | None, source: SourceRef | None = None) -> None:
        if value and value.strip() and self.rocm_version is None:
            self.rocm_version = IdentityFact(value.strip(), source)

    def update(self, other: "InputIdentity") -> None:
        """Add every key of `other` (the union of two inputs' keys, or a parser's and a reader's)."""
        for name in ("hostnames", "gpu_uuids", "gpu_serials", "gpu_bus_ids", "gpu_names", "gpu_vendors",
                     "gpu_cpu_affinities", "gpu_numa_affinities"):
            mine: list[IdentityFact] = getattr(self, name)
            for fact in getattr(other, name):
                _add(mine, fact.value, fact.source, fact.shown)
        self.gpus_seen = max(self.gpus_seen, other.gpus_seen)
        if other.gpu_count is not None:
            self.set_count(int(other.gpu_count.value), other.gpu_count.source)
        for name in ("driver_version", "cuda_version", "rocm_version"):
            if getattr(self, name) is None and getattr(other, name) is not None:
                setattr(self, name, getattr(other, name))

    # -- reading --------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        return not (
            self.hostnames or self.gpu_uuids or self.gpu_serials or self.gpu_bus_ids or self.gpu_names
            or self.gpu_vendors or self.gpu_count or self.driver_version or self.cuda_version or self.rocm_version
        )

    def values(self, name: str) -> set[str]:
        return {fact.value for fact in getattr(self, name)}

    def to_json(self) -> dict:
        def facts(items: list[IdentityFact]) -> list[str]:
            return [fact.text for fact in items]

        def one(fact: IdentityFact | None) -> str | None:
            return fact.text if fact is not None else None

        return {
            "hostname": self.hostnames[0].text if self.hostnames else None,
            "hostnames": facts(self.hostnames),
            "gpu_uuids": facts(self.gpu_uuids),
            "gpu_serials": facts(self.gpu_serials),
            "gpu_bus_ids": facts(self.gpu_bus_ids),
            "gpu_names": facts(self.gpu_names),
            "gpu_count": int(self.gpu_count.value) if self.gpu_count is not None else None,
            "driver_version": one(self.driver_version),
            "cuda_version": one(self.cuda_version),
            "rocm_version": one(self.rocm_version),
        }


def _add(items: list[IdentityFact], value: str, source: SourceRef | None, shown: str = "") -> None:
    if all(fact.value != value for fact in items):
        items.append(IdentityFact(value, source, shown if shown != value else ""))
