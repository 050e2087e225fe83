"""Signs that the machine is a virtual machine or a container, kept where they were read.

A hypervisor shows the guest a PCIe tree and NUMA layout it made up (often flat), so the facts the
topology rules reason from (which socket, which switch) are not the physical ones. The signs live in
`machine.extras["virtual_signs"]`; `k3diag.analyze.rules.virtual` turns them into one finding.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3diag.model.source import SourceRef

VM = "vm"
CONTAINER = "container"

# `/sys/class/dmi/id/sys_vendor` (and product_name) values of hypervisors and clouds.
HYPERVISOR_VENDORS = ("qemu", "kvm", "vmware", "xen", "microsoft corporation", "innotek", "virtualbox", "parallels",
                      "amazon ec2", "google", "openstack", "bochs", "red hat", "nutanix", "alibaba cloud", "oracle cloud")


@dataclass(frozen=True)
class VirtualSign:
    """One sign that the machine is a VM or a container, with where it was seen."""

    kind: str  # VM | CONTAINER
    what: str  # a sentence fragment: "NUMA affinity 0-1 on every GPU (nvidia-smi topo -m)"
    source: SourceRef | None = None


def virtual_signs(machine) -> list[VirtualSign]:
    signs = machine.extras.get("virtual_signs")
    return list(signs) if isinstance(signs, list) else []


def add_virtual_sign(machine, kind: str, what: str, source: SourceRef | None = None) -> None:
    signs = machine.extras.setdefault("virtual_signs", [])
    if all(sign.what != what for sign in signs):
        signs.append(VirtualSign(kind, what, source))


def is_virtualized(machine) -> bool:
    """Whether anything says the topology the guest sees is not the physical one."""
    return any(sign.kind == VM for sign in virtual_signs(machine))


def hypervisor_vendor(text: str | None) -> bool:
    lowered = (text or "").strip().lower()
    return bool(lowered) and any(lowered.startswith(vendor) or vendor in lowered for vendor in HYPERVISOR_VENDORS)
