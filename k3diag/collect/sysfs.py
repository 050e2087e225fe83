"""The platform as the kernel shows it: PCI devices from sysfs, IOMMU state, /proc/cmdline, dmesg.

Reads under a configurable root (tests point it at fixture trees) and produces evidence only:
one `sysfs-snapshot` reading (the files it read, as JSON, config space hex-encoded), the
kernel command line and the dmesg lines that matter, so a live run and a saved bundle go
through the same parse -> merge path. Nothing here needs root except the config space
beyond its first 64 bytes; what a non-root run misses is said in the snapshot's notes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from k3diag.evidence import Evidence
from k3diag.model import json_text

SNAPSHOT_SCHEMA = "k3diag.sysfs-snapshot/1"
SNAPSHOT_NAME = "sysfs-snapshot.json"
DMESG_TIMEOUT_S = 10.0
CONFIG_MAX_BYTES = 4096
_SMALL_FILE_BYTES = 4096

# The per-device attributes k3diag uses; everything else under the device stays unread.
DEVICE_FILES = (
    "class",
    "vendor",
    "device",
    "numa_node",
    "local_cpulist",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
)
_BDF_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# dmesg lines worth keeping: GPU driver errors, PCIe AER, IOMMU setup, the command line.
DMESG_KEEP_RE = re.compile(
    r"NVRM|Xid|fallen off the bus|AER|PCIe Bus Error|error status/mask|DMAR|AMD-Vi|IOMMU|iommu|"
    r"Command line:|pcieport|amdgpu.*(?:error|fault|timeout|hang)|mlx5_core.*(?:PCIe|pci|error)|"
    r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]:\s+\[\s?\d+\]\s+\w|Surprise Down|pciehp|"
    r"[Ll]ink (?:down|up)\b",
    re.I,
)
DMESG_MAX_LINES = 20000


def collect_platform(
    root: Path = Path("/"),
    run_dmesg: bool = True,
    dmesg_file: Path | None = None,
    dmesg_timeout_s: float = DMESG_TIMEOUT_S,
) -> list[Evidence]:
    """Evidence of the PCIe tree, IOMMU and kernel settings under `root`; never raises."""
    root = Path(root)
    evidence = [snapshot_evidence(root), cmdline_evidence(root)]
    dmesg = dmesg_evidence(root, run_dmesg=run_dmesg, dmesg_file=dmesg_file, timeout_s=dmesg_timeout_s)
    if dmesg is not None:
        evidence.append(dmesg)
    return evidence


# -- the snapshot -----------------------------------------------------------------------


def snapshot_evidence(root: Path) -> Evidence:
    try:
        snapshot = read_snapshot(root)
    except Exception as exc:  # a collector bug must cost this reading only
        return Evidence(name=SNAPSHOT_NAME, kind="reading", format_hint="sysfs-snapshot",
                        error=f"reading sysfs under {root} failed ({type(exc).__name__}: {exc})")
    data = json_text.dumps(snapshot, indent=1, sort_keys=True).encode("utf-8")
    return Evidence(name=SNAPSHOT_NAME, data=data, kind="reading", format_hint="sysfs-snapshot",
                    command=f"read {root / 'sys/bus/pci/devices'}", meta={"root": str(root)})


def read_snapshot(root: Path) -> dict:
    live = root == Path("/")
    privileged: bool | None = None
    if live and hasattr(os, "geteuid"):
        privileged = os.geteuid() == 0
    snapshot: dict = {
        "schema": SNAPSHOT_SCHEMA,
        "root": str(root),
        "live": live,
        "privileged": privileged,
        "devices": [],
        "iommu": {"class_iommu": None, "groups": None},
        "notes": [],
    }
    devices_dir = root / "sys/bus/pci/devices"
    try:
        entries = sorted(devices_dir.iterdir(), key=lambda path: path.name)
    except FileNotFoundError:
        entries = []
        snapshot["notes"].append(
            f"{_shown(root, devices_dir)} does not exist: no PCI devices are visible (a container or VM without "
            "PCI sysfs); run k3diag on the host, or give it `lspci -vv` output from the host")
    except OSError as exc:
        entries = []
        snapshot["notes"].append(f"{_shown(root, devices_dir)} could not be listed ({exc.strerror or exc}); "
                                 "PCI devices are unknown")
    for entry in entries:
        if _BDF_RE.match(entry.name):
            snapshot["devices"].append(_read_device(root, entry))
    if entries and not snapshot["devices"]:
        snapshot["notes"].append(f"{_shown(root, devices_dir)} holds no PCI devices")
    _note_config_reads(snapshot)
    snapshot["iommu"] = _read_iommu(root)
    # RDMA devices and the peer-memory modules GPUDirect RDMA needs (k3diag.collect.sysfs_infiniband).
    from k3diag.collect.sysfs_infiniband import read_infiniband, read_peer_memory

    infiniband = read_infiniband(root)
    snapshot["infiniband"] = infiniband["devices"]
    snapshot["notes"].extend(infiniband["notes"])
    snapshot["peer_memory"] = read_peer_memory(root)
    return snapshot


def _read_device(root: Path, entry: Path) -> dict:
    record: dict = {"bdf": entry.name.lower(), "files": {}, "missing": [], "errors": {}}
    record["path"] = _device_path(root, entry)
    for name in DEVICE_FILES:
        value, problem = _read_small(entry / name)
        if value is not None:
            record["files"][name] = value
        elif problem == "missing":
            record["missing"].append(name)
        elif problem:
            record["errors"][name] = problem
    for link_name in ("driver", "iommu_group"):
        target = _link_basename(entry / link_name)
        if target is not None:
            record[link_name] = target
    names: list[str] = []
    for sub in ("infiniband", "net"):
        try:
            names.extend(sorted(child.name for child in (entry / sub).iterdir()))
        except OSError:
            pass
    if names:
        record["net"] = names
    try:
        with (entry / "config").open("rb") as handle:
            config = handle.read(CONFIG_MAX_BYTES)
        record["config_hex"] = config.hex()
        record["config_bytes"] = len(config)
    except FileNotFoundError:
        record["missing"].append("config")
    except PermissionError:
        record["errors"]["config"] = "permission denied"
    except OSError as exc:
        record["errors"]["config"] = exc.strerror or str(exc)
    return record


def _device_path(root: Path, entry: Path) -> str | None:
    """The device's place under /sys/devices (`devices/pci0000:00/0000:00:01.0/0000:01:00.0`).

    The symlink is resolved by hand inside `root` so a fixture tree never escapes into the
    host's own /sys."""
    try:
        target = os.readlink(entry)
    except OSError:
        return None
    if os.path.isabs(target):
        resolved = os.path.normpath(os.path.join(str(root), target.lstrip("/")))
    else:
        resolved = os.path.normpath(os.path.join(str(entry.parent), target))
    sys_dir = os.path.normpath(str(root / "sys"))
    if not resolved.startswith(sys_dir + os.sep):
        return None
    return os.path.relpath(resolved, sys_dir).replace(os.sep, "/")


def _read_small(path: Path) -> tuple[str | None, str | None]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(_SMALL_FILE_BYTES)
    except FileNotFoundError:
        return None, "missing"
    except PermissionError:
        return None, "permission denied"
    except OSError as exc:  # e.g. EINVAL reading the link speed of a device without a PCIe link
        return None, exc.strerror or str(exc)
    return raw.decode("utf-8", errors="replace").strip(), None


def _link_basename(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def _note_config_reads(snapshot: dict) -> None:
    devices = snapshot["devices"]
    if not devices:
        return
    short = [d for d in devices if d.get("config_bytes") is not None and d["config_bytes"] <= 64]
    unreadable = [d for d in devices if "config" in d["errors"] or "config" in d["missing"]]
    if short:
        who = "k3diag is not running as root" if snapshot.get("privileged") is False else "the reads were unprivileged"
        snapshot["notes"].append(
            f"the config space of {len(short)} of {len(devices)} PCI devices was readable only in its first 64 "
            f"bytes ({who}): link capabilities come from sysfs link files alone and the ACS settings are unknown; "
            "run as root (sudo) to read them")
    if unreadable:
        snapshot["notes"].append(
            f"the config file of {len(unreadable)} PCI devices could not be read: their PCIe capabilities and ACS "
            "settings are unknown")


def _read_iommu(root: Path) -> dict:
    iommu: dict = {"class_iommu": None, "groups": None}
    try:
        iommu["class_iommu"] = sorted(child.name for child in (root / "sys/class/iommu").iterdir())
    except OSError:
        pass
    groups_dir = root / "sys/kernel/iommu_groups"
    try:
        groups = sorted(groups_dir.iterdir(), key=lambda p: (len(p.name), p.name))
    except OSError:
        return iommu
    types: dict[str, str | None] = {}
    for group in groups:
        value, _ = _read_small(group / "type")
        types[group.name] = value
    iommu["groups"] = types
    return iommu


def _shown(root: Path, path: Path) -> str:
    return str(path)


# -- kernel command line ----------------------------------------------------------------


def cmdline_evidence(root: Path) -> Evidence:
    path = root / "proc/cmdline"
    name = "/proc/cmdline" if root == Path("/") else str(path)
    try:
        data = path.read_bytes()[:65536]
    except FileNotFoundError:
        return Evidence(name=name, kind="file", format_hint="kernel-cmdline",
                        error=f"{name} does not exist, so the kernel's IOMMU and ACS options are unknown")
    except OSError as exc:
        return Evidence(name=name, kind="file", format_hint="kernel-cmdline",
                        error=f"{name} could not be read ({exc.strerror or exc}); the kernel's IOMMU options are unknown")
    return Evidence(name=name, data=data, kind="file", format_hint="kernel-cmdline", command="cat /proc/cmdline")


# -- dmesg ------------------------------------------------------------------------------


def dmesg_evidence(
    root: Path,
    run_dmesg: bool = True,
    dmesg_file: Path | None = None,
    timeout_s: float = DMESG_TIMEOUT_S,
) -> Evidence | None:
    """The dmesg lines that matter, from a file or (on the live host only) from `dmesg`."""
    if dmesg_file is None and root != Path("/"):
        candidate = root / "var/log/dmesg"
        dmesg_file = candidate if candidate.exists() else None
    if dmesg_file is not None:
        try:
            text = Path(dmesg_file).read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            return Evidence(name=str(dmesg_file), kind="file", format_hint="dmesg",
                            error=f"{dmesg_file} could not be read ({exc.strerror or exc}); AER and Xid errors were not checked")
        return Evidence(name=str(dmesg_file), data=filter_dmesg(text).encode("utf-8"), kind="file",
                        format_hint="dmesg", meta={"filtered": True})
    if not run_dmesg or root != Path("/"):
        return None
    evidence = _run_dmesg(timeout_s)
    if evidence.data:
        kept = filter_dmesg(evidence.data.decode("utf-8", errors="replace"))
        evidence.data = kept.encode("utf-8")
        evidence.meta["filtered"] = True
    if evidence.error and ("not permitted" in (evidence.stderr + evidence.error).lower()
                           or "permission" in (evidence.stderr + evidence.error).lower()):
        evidence.error = ("the kernel log is readable only by root on this host (kernel.dmesg_restrict=1): PCIe AER "
                          "and GPU Xid errors were not checked; run k3diag with sudo, or save `sudo dmesg` and analyze it")
        evidence.data = None
    return evidence


def _run_dmesg(timeout_s: float) -> Evidence:
    from k3diag.collect.runner import run_command

    return run_command(["dmesg"], name="dmesg.txt", timeout_s=timeout_s, format_hint="dmesg")


def filter_dmesg(text: str) -> str:
    """Only the lines k3diag reads (and the continuation lines of multi-line NVRM messages)."""
    kept = [line for line in text.splitlines() if DMESG_KEEP_RE.search(line)]
    if len(kept) > DMESG_MAX_LINES:
        kept = kept[-DMESG_MAX_LINES:]
    return "\n".join(kept) + ("\n" if kept else "")
