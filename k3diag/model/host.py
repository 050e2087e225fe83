"""The host itself: CPU packages, NUMA nodes, kernel and IOMMU settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.source import SourceRef


@dataclass
class NumaNode:
    """One NUMA node: its CPUs and memory, as the kernel lists them."""

    id: int
    cpus: str | None = None  # cpulist as the kernel prints it: "0-31,64-95"
    memory_total_kib: int | None = None
    package: int | None = None

    def to_json(self) -> dict:
        return {"id": self.id, "cpus": self.cpus, "memory_total_kib": self.memory_total_kib, "package": self.package}


@dataclass
class CpuPackage:
    """One CPU package (socket): its model and CPUs."""

    id: int
    model: str | None = None
    cpus: str | None = None
    numa_nodes: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"id": self.id, "model": self.model, "cpus": self.cpus, "numa_nodes": list(self.numa_nodes)}


@dataclass
class HostInfo:
    """The host itself: name, kernel, OS, CPUs and memory, driver and CUDA versions, kernel command line,
    IOMMU mode and whether it runs virtualized."""

    hostname: str | None = None
    kernel: str | None = None
    os: str | None = None
    cpu_model: str | None = None
    logical_cpus: int | None = None
    memory_total_bytes: int | None = None
    packages: list[CpuPackage] = field(default_factory=list)
    numa_nodes: list[NumaNode] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    kernel_cmdline: str | None = None
    # "passthrough" | "translated" | "off" | None (unknown)
    iommu_mode: str | None = None
    virtualized: bool | None = None  # the CPU's `hypervisor` flag
    # /sys/class/dmi/id/sys_vendor and product_name ("QEMU", "Amazon EC2", "Microsoft Corporation")
    sys_vendor: str | None = None
    product_name: str | None = None
    # what says the collector ran in a container ("docker", "kubepods", "containerd", "lxc"), None if nothing
    container: str | None = None
    sources: list[SourceRef] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "hostname": self.hostname,
            "kernel": self.kernel,
            "os": self.os,
            "cpu_model": self.cpu_model,
            "logical_cpus": self.logical_cpus,
            "memory_total_bytes": self.memory_total_bytes,
            "packages": [p.to_json() for p in self.packages],
            "numa_nodes": [n.to_json() for n in self.numa_nodes],
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "kernel_cmdline": self.kernel_cmdline,
            "iommu_mode": self.iommu_mode,
            "virtualized": self.virtualized,
            "sys_vendor": self.sys_vendor,
            "product_name": self.product_name,
            "container": self.container,
        }
