"""Findings about the evidence itself: no GPU found, and why; commands that timed out."""

from __future__ import annotations

from typing import Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.model.machine import InputRecord, Machine

_GPU_VENDORS = {"10de": "NVIDIA", "1002": "AMD"}
_GPU_CLASS_WORDS = ("vga", "3d", "display", "processing accelerator")


def _gpu_like_pci_devices(machine: Machine) -> list:
    found = []
    for device in machine.pci:
        vendor = (device.vendor_id or "").lower().removeprefix("0x")
        text = f"{device.class_name or ''} {device.description or ''}".lower()
        is_gpu_class = any(word in text for word in _GPU_CLASS_WORDS) or (device.class_name or "").startswith(("0x03", "03", "0x12", "12"))
        named_vendor = "nvidia" in text or "advanced micro devices" in text or "amd/ati" in text
        if is_gpu_class and (vendor in _GPU_VENDORS or named_vendor):
            found.append(device)
    return found


# What looks for GPUs: the GPU tools a collector runs, and the library readings it records.
_GPU_TOOLS = frozenset({"nvidia-smi", "amd-smi", "rocm-smi"})
_GPU_READINGS = frozenset({"nvml-readings.json", "amdsmi-readings.json"})


def _program(command: str | None) -> str | None:
    """The program a command line runs: `sudo`, `env` and `NAME=value` before it skipped, its directory dropped."""
    for word in (command or "").split():
        if word in ("sudo", "env") or ("=" in word and not word.startswith(("/", "."))):
            continue
        return word.rsplit("/", 1)[-1]
    return None


def _tried_gpu_tool(record: InputRecord) -> bool:
    """A collection that looked for GPUs and failed: a GPU tool that was missing, exited with an error, timed
    out or printed nothing, or an NVML/amdsmi reading that raised (the evidence's own record of it, not the
    words of a warning: a file named `nvidia-smi-....txt`, or a list of readable formats, names the tools too)."""
    if not record.collection_failed or record.format != "unknown":
        return False
    return record.path.rsplit("/", 1)[-1] in _GPU_READINGS or _program(record.command) in _GPU_TOOLS


def check_no_gpu(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    if machine.gpus:
        return
    # Only meaningful when something tried to find GPUs: a live run, or GPU-bearing inputs.
    gpu_sources = [n for n in machine.notes if n.subject.startswith(("nvml", "amdsmi", "nvidia-smi", "amd-smi", "rocm-smi"))]
    # A bundle collected on a host: its NVML/amdsmi readings, or the GPU tools it tried, looked for GPUs.
    collected = [record for record in machine.inputs
                 if record.format in ("nvml-readings", "amdsmi-readings") or _tried_gpu_tool(record)]
    if not machine.live and not gpu_sources and not collected:
        return
    said = [note.message for note in gpu_sources]
    reasons = [f"{note.subject}: {note.message}" for note in gpu_sources]
    if not gpu_sources:  # the bundle's own records say why (nvidia-smi absent, no NVML driver)
        said = [warning for record in collected for warning in record.warnings]
        reasons = [f"{record.path}: {warning}" for record in collected for warning in record.warnings]
    on_bus = _gpu_like_pci_devices(machine)
    if on_bus:
        names = ", ".join(f"{d.bdf} ({d.description or d.class_name})" for d in on_bus[:4])
        explanation = (
            f"No NVIDIA or AMD GPU could be queried, yet the PCI bus shows GPU-like devices: {names}. "
            "The driver or its management library is missing or not loaded."
        )
        remedy = ("Install and load the GPU driver (NVIDIA: `nvidia-smi` should list the GPUs; AMD: ROCm and "
                  "`amd-smi list`), then run `k3diag topo` again.")
    else:
        explanation = "No NVIDIA or AMD GPU was found on this host"
        if reasons:
            explanation += ": " + "; ".join(said) + "."
        else:
            explanation += ": no GPU management library answered and no GPU appears on the PCI bus."
        remedy = ("If this host should have GPUs: check `lspci | grep -iE 'nvidia|amd'` for the devices and that the "
                  "driver is installed (NVIDIA: libnvidia-ml.so and `nvidia-smi`; AMD: ROCm's libamd_smi.so and `amd-smi`). "
                  "On a laptop, analyze saved outputs instead: `k3diag analyze FILE...`.")
    yield Finding(
        id="no-gpu-found",
        severity="info",
        subjects=["host"],
        title="No GPU found",
        explanation=explanation,
        remedy=remedy,
        confirm_with="nvidia-smi -L; lspci -nn | grep -iE 'vga|3d controller|display|processing accelerator'",
        data={"reasons": reasons, "pci_gpu_like": [d.bdf for d in on_bus]},
    )


def check_timeouts(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for note in machine.notes:
        if note.timed_out:
            yield Finding(
                id="command-timed-out",
                severity="fail",
                subjects=[note.subject],
                title="A collection command hung and was stopped",
                explanation=note.message,
                remedy="Look for a GPU that fell off the bus (`dmesg | grep -i xid`, Xid 79) or a hung driver; "
                       "a reboot or a reseat of the GPU is often needed.",
            )


RULES = (
    Rule("no-gpu-found", "info", "No GPU found", check_no_gpu, kind="missing-evidence"),
    Rule("command-timed-out", "fail", "A collection command hung and was stopped", check_timeouts, kind="fault"),
)
