"""`/proc/cmdline`: the kernel options that decide IOMMU translation and ACS.

Options are read as the kernel reads them (space separated, `key=value`, the last
occurrence of a key wins; quoted values keep their spaces). Only the options that matter
for peer-to-peer DMA are interpreted: `intel_iommu`, `amd_iommu`, `iommu`,
`iommu.passthrough`, `iommu.strict`, `pci=noacs` and `pcie_acs_override`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef
from k3diag.parse.text import Section, is_shell_prompt, normalize, prompt_command

FORMAT = "kernel-cmdline"
IOMMU_KEYS = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict", "pcie_acs_override")
# What `amd_iommu=` accepts (Documentation/admin-guide/kernel-parameters.txt); `on` is not one.
AMD_IOMMU_VALUES = ("fullflush", "off", "force_isolation", "force_enable", "pgtbl_v1", "pgtbl_v2", "irtcachedis",
                    "nohugepages", "v2_pgsizes_only")


@dataclass
class KernelCmdline:
    raw: str = ""
    params: dict[str, str | None] = field(default_factory=dict)  # last occurrence wins
    iommu: dict[str, str | None] = field(default_factory=dict)  # the IOMMU/ACS options given
    mode: str | None = None  # "passthrough" | "off" | None (the kernel's default: not knowable from here)
    pci_noacs: bool = False
    source: SourceRef | None = None
    warnings: list[str] = field(default_factory=list)


def _output_lines(text: str) -> list[str]:
    """The non-blank lines, without the shell prompts a paste holds (`$ cat /proc/cmdline` above the line)."""
    return [line for line in text.split("\n")
            if line.strip() and prompt_command(line) is None and not is_shell_prompt(line)]


def sniff(text: str) -> float:
    lines = _output_lines(normalize(text))
    if not lines or len(lines) > 3:
        return 0.0
    first = lines[0].strip()
    if ": " in first.split("=", 1)[0] or first.startswith(("[", "#")):
        return 0.0
    tokens = first.split()
    keyed = sum(1 for token in tokens if re.match(r"^[\w.\-]+=\S*$", token))
    if "BOOT_IMAGE=" in first or re.search(r"(?:^|\s)root=\S", first):
        if keyed * 2 >= len(tokens) or any(t in ("ro", "rw", "quiet", "splash") for t in tokens):
            return 0.9
    if keyed >= 2 and any(token.split("=")[0] in IOMMU_KEYS for token in tokens) and keyed * 3 >= len(tokens) * 2:
        return 0.6
    return 0.0


def parse(section: Section, input_name: str) -> KernelCmdline:
    text = normalize(section.text)
    lines = _output_lines(text)
    result = KernelCmdline()
    if not lines:
        result.warnings.append(f"{input_name}: the kernel command line is empty")
        return result
    offset = text.split("\n").index(lines[0])
    raw = lines[0].strip()
    result.raw = raw
    result.source = SourceRef(input_name, section.first_line + offset, raw)
    if len(lines) > 1:
        result.warnings.append(f"{input_name}: {len(lines)} lines; only the first is the command line")
    interpret(raw, result)
    return result


def split_params(raw: str) -> list[str]:
    try:
        return shlex.split(raw, posix=True)
    except ValueError:  # an unbalanced quote: fall back to plain splitting
        return raw.split()


def interpret(raw: str, result: KernelCmdline) -> KernelCmdline:
    for token in split_params(raw):
        key, sep, value = token.partition("=")
        result.params[key] = value if sep else None
        if key in IOMMU_KEYS:
            result.iommu[key] = value if sep else None
        if key == "pci" and sep:
            if "noacs" in value.split(","):
                result.pci_noacs = True
                result.iommu["pci"] = value
    result.mode = _mode(result)
    amd = result.iommu.get("amd_iommu")
    if amd is not None and amd not in AMD_IOMMU_VALUES:
        result.warnings.append(
            f"amd_iommu={amd} is not an option the kernel knows (it logs `Unknown option` and ignores it); the AMD "
            "IOMMU is on by default when AMD-Vi is enabled in the firmware")
    passthrough = [token for token in split_params(raw) if token.startswith("iommu.passthrough=")]
    if len({token.split("=", 1)[1] for token in passthrough}) > 1:
        result.warnings.append(f"iommu.passthrough is given {len(passthrough)} times with different values; the last "
                               f"one ({passthrough[-1]}) wins")
    return result


def _mode(result: KernelCmdline) -> str | None:
    """What the options force; None when the kernel's built-in default decides."""
    opts = result.iommu
    if opts.get("intel_iommu") == "off" or opts.get("amd_iommu") == "off" or opts.get("iommu") in ("off", "0"):
        return "off"
    passthrough = opts.get("iommu.passthrough")
    if opts.get("iommu") == "pt" or passthrough in ("1", "y", "Y", "on"):
        # `iommu=pt` and `iommu.passthrough=0` both given: the later one on the line wins.
        order = [token.split("=")[0] + "=" + token.partition("=")[2] for token in split_params(result.raw)
                 if token.startswith(("iommu=", "iommu.passthrough="))]
        last = order[-1] if order else ""
        if last in ("iommu.passthrough=0", "iommu.passthrough=n", "iommu.passthrough=off", "iommu=nopt"):
            return "translated"
        return "passthrough"
    if passthrough in ("0", "n", "N", "off") or opts.get("iommu") == "nopt":
        return "translated"
    return None
