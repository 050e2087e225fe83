"""Redaction a security team can sign: `collect --redact` on fake hosts whose every output is seeded with known
identifiers (serials, UUIDs, MACs, IPv4 and IPv6 in every spelling NCCL and the kernel use, hex GIDs, host
names, user names, home paths, cloud instance ids, BMC names, InfiniBand GUIDs), then every byte of the bundle
(the decompressed tar stream: member names, PAX headers, manifest, evidence) is scanned for each of them.

The tools are fake (there is no GPU here); what they print follows the real formats: nvidia-smi -q and
--query-gpu, lspci -vv with a ConnectX VPD block, NCCL INFO lines as NCCL's source prints them
(`GID %ld (%lX/%lX)` from net_ib.cc, `Bootstrap : Using`, `NET/IB : Using`), nccl-tests' rank lines.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import re
import shutil
import stat
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "pcie" / "dual-socket-server" / "nvidia-smi-topo-m.txt"
SYSFS = REPO / "fixtures" / "sysfs" / "dual_socket_switch"

HOST, HOST_SHORT = "gpu-node-17.lab.example.com", "gpu-node-17"
REMOTE_TESTS_HOST = "gpu-node-18"  # only in nccl-tests' "on HOST device" lines
REMOTE_NCCL_HOST = "gpu-node-19"  # only in NCCL's line prefixes
BMC = "rack3-bmc-42"
USER = "alice"
IPV4 = "10.20.30.40"
IPV4_PEER = "10.20.30.41"
GATEWAY = "10.20.30.1"
IPV6 = "fd12:3456:789a::17"
LINK_LOCAL = "fe80::bace:f6ff:fe0a:1b2c"
MAC = "b8:ce:f6:0a:1b:2c"
IPOIB_MAC = "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:0a:1b:2c"
GUID = "0xb8cef603000a1b2c"
GPU_UUID = "GPU-34bf77d1-c686-6821-79a8-32d326c5039c"
PRODUCT_UUID = "4c4c4544-0051-3510-8052-b4c04f4d3832"
VPD_UUID = "3c1d9f4a8b2ee911800098039b123456"
GPU_SERIAL = "1652320012345"
BOARD_SERIAL = "BS77821QX"
NIC_SERIAL = "MT2110X12345"
PCIE_DSN = "b8-ce-f6-03-00-0a-1b-2c"
INSTANCE = "i-0abc123def4567890"


def _gid_iid(ipv4: str) -> str:
    """How NCCL prints the interface id of an IPv4-mapped RoCE v2 GID: the GID's last 8 bytes as a
    little-endian 64-bit number in %lX."""
    raw = bytes([0, 0, 0xFF, 0xFF]) + ipaddress.IPv4Address(ipv4).packed
    return f"{int.from_bytes(raw, 'little'):X}"


def _spellings() -> dict[str, set[str]]:
    """Every way each identifier can be written; none may survive, case-insensitively."""
    def ipv4_forms(ip: str) -> set[str]:
        packed = ipaddress.IPv4Address(ip).packed
        mapped = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + packed)
        return {ip, f"::ffff:{ip}", mapped.compressed, mapped.exploded, packed.hex(), packed[::-1].hex(),
                _gid_iid(ip)}

    def ipv6_forms(ip: str) -> set[str]:
        address = ipaddress.IPv6Address(ip)
        return {address.compressed, address.exploded, address.exploded.replace(":", "")}

    def mac_forms(mac: str) -> set[str]:
        return {mac, mac.replace(":", "-"), mac.replace(":", "")}

    return {
        "host": {HOST, HOST_SHORT, REMOTE_TESTS_HOST, REMOTE_NCCL_HOST, BMC},
        "user": {USER, f"/home/{USER}", f"{USER}@"},
        "ipv4": ipv4_forms(IPV4) | ipv4_forms(IPV4_PEER) | ipv4_forms(GATEWAY),
        "ipv6": ipv6_forms(IPV6) | ipv6_forms(LINK_LOCAL),
        "mac": mac_forms(MAC) | mac_forms(IPOIB_MAC),
        "guid": {GUID, GUID[2:]},
        "uuid": {GPU_UUID, GPU_UUID[4:], PRODUCT_UUID, VPD_UUID},
        "serial": {GPU_SERIAL, BOARD_SERIAL, NIC_SERIAL, PCIE_DSN},
        "instance": {INSTANCE},
    }


NVIDIA_SMI_Q = f"""
==============NVSMI LOG==============

Timestamp                                 : Mon Dec  1 10:00:00 2026
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Serial Number                         : {GPU_SERIAL}
    GPU UUID                              : {GPU_UUID}
    Board Part Number                     : 692-2G520-0200-000
    PCI
        Bus Id                            : 00000000:18:00.0
"""
QUERY_CSV = ("index, name, pci.bus_id, uuid, pstate, memory.total [MiB], pcie.link.gen.current, pcie.link.gen.max, "
             f"pcie.link.width.current, pcie.link.width.max\n0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, {GPU_UUID}, "
             "P0, 81559 MiB, 5, 5, 16, 16\n")
LSPCI_VV = f"""18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
\tCapabilities: [1c0 v1] Device Serial Number {PCIE_DSN}

3b:00.0 Ethernet controller: Mellanox Technologies MT28908 Family [ConnectX-6]
\tSubsystem: Mellanox Technologies Device 0007
\tCapabilities: [48] Vital Product Data
\t\tProduct Name: ConnectX-6 VPI adapter card, HDR IB (200Gb/s) and 200GbE, single-port QSFP56
\t\tRead-only fields:
\t\t\t[PN] Part number: MCX653105A-HDAT
\t\t\t[EC] Engineering changes: A9
\t\t\t[SN] Serial number: {NIC_SERIAL}
\t\t\t[V3] Vendor specific: {VPD_UUID}
\t\t\t[VA] Vendor specific: MLX:MODL=CX653105A:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0
\t\t\t[RV] Reserved: checksum good, 1 byte(s) reserved
\t\tEnd
\tCapabilities: [1c0 v1] Device Serial Number {GUID[2:4]}-{GUID[4:6]}-{GUID[6:8]}-{GUID[8:10]}-{GUID[10:12]}-{GUID[12:14]}-{GUID[14:16]}-{GUID[16:18]}
"""
NCCL_TESTS = f"""# nThread 1 nGpus 2 minBytes 1048576 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  12345 on {REMOTE_TESTS_HOST} device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  12345 on {REMOTE_TESTS_HOST} device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    20.10   52.17   52.17      0    19.90   52.69   52.69      0
    67108864      16777216     float     sum      -1    400.1  167.73  167.73      0    399.8  167.86  167.86      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 110.11
"""
NCCL_LOG = f"""{REMOTE_NCCL_HOST}:4242:4242 [0] NCCL INFO Bootstrap : Using enp24s0np0:{IPV4}<0>
{REMOTE_NCCL_HOST}:4242:4242 [0] NCCL INFO NET/Socket : Using [0]enp24s0np0:{IPV4}<0> [1]ib0:{LINK_LOCAL}%ib0<0>
{REMOTE_NCCL_HOST}:4242:4242 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB enp24s0np0:{IPV4}<0>
{REMOTE_NCCL_HOST}:4242:4251 [0] NCCL INFO NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 1234 mtu 5 GID 3 (0/{_gid_iid(IPV4)}) fifoRkey=0x1d1ee fifoLkey=0x1d1ee
{REMOTE_NCCL_HOST}:4242:4251 [0] NCCL INFO NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 1235 mtu 5 GID 3 (0/{_gid_iid(IPV4_PEER).lower()}) fifoRkey=0x1d1ef fifoLkey=0x1d1ef
{REMOTE_NCCL_HOST}:4242:4251 [0] NCCL INFO Connected to {IPV4_PEER}<45678> from [{IPV6}]:5000
{REMOTE_NCCL_HOST}:4242:4251 [0] NCCL INFO cudaDriverVersion 12040 on {HOST}, user {USER}, cwd /home/{USER}/runs
{REMOTE_NCCL_HOST}:4242:4251 [0] NCCL INFO ip link: ib0 {IPOIB_MAC} enp24s0np0 {MAC} node GUID {GUID}
{REMOTE_NCCL_HOST}:4242:4251 [0] NCCL INFO instance-id: {INSTANCE}; bmc_hostname: {BMC}
{REMOTE_NCCL_HOST}:4242:4251 [0] NCCL INFO dmi {{"board_serial": "{BOARD_SERIAL}", "product_uuid": "{PRODUCT_UUID}"}}
"""


def _tool(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def seeded_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "topo.txt").write_text(TOPO.read_text())
    (data / "q.txt").write_text(f"{USER}@{HOST_SHORT}:~$ nvidia-smi -q\n" + NVIDIA_SMI_Q)
    (data / "q.csv").write_text(QUERY_CSV)
    (data / "lspci.txt").write_text(LSPCI_VV)
    (data / "tests.txt").write_text(NCCL_TESTS)
    (data / "nccl.log").write_text(NCCL_LOG)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "nvidia-smi", f"""case "$*" in
  "topo -m") /bin/cat {data}/topo.txt;;
  "-q") /bin/cat {data}/q.txt;;
  --query-gpu*) /bin/cat {data}/q.csv;;
  *) echo "NVIDIA-SMI on {HOST} for {USER}: option not supported by this fake" >&2; exit 6;;
esac
""")
    _tool(bin_dir, "lspci", f'case "$*" in *-t*) echo "-[0000:00]-+-00.0"; echo "  \\-01.0-[18]----00.0  {HOST}";; '
                            f'*) /bin/cat {data}/lspci.txt;; esac\n')
    # nccl-tests under the user's home folder, writing NCCL's debug log where NCCL_DEBUG_FILE says.
    tests_dir = tmp_path / "home" / USER / "nccl-tests" / "build"
    tests_dir.mkdir(parents=True)
    _tool(tests_dir, "all_reduce_perf", f"""/bin/cat {data}/tests.txt
log=$(echo "$NCCL_DEBUG_FILE" | /bin/sed "s/%p/$$/")
/bin/cat {data}/nccl.log > "$log"
""")
    root = tmp_path / "root"
    shutil.copytree(SYSFS, root, symlinks=True)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc" / "cmdline").write_text(
        f"BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID={PRODUCT_UUID} ro BOOTIF=01-{MAC.replace(':', '-')} "
        f"ip={IPV4}::{GATEWAY}:255.255.255.0:{HOST}:enp24s0np0:off iommu=pt\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("HOME", str(tmp_path / "home" / USER))
    return root, tests_dir.parent


def _all_bytes(bundle: Path) -> bytes:
    """The decompressed tar stream: every header (member names, PAX records) and every member's bytes."""
    raw = gzip.decompress(bundle.read_bytes())
    with tarfile.open(bundle) as archive:
        names = "\n".join(archive.getnames()).encode()
    return raw + b"\n" + names


def test_no_seeded_identifier_survives_redaction(seeded_host: tuple[Path, Path], tmp_path: Path) -> None:
    root, nccl_tests = seeded_host
    out = tmp_path / f"{HOST_SHORT}.tar.gz"
    result = CliRunner().invoke(app, ["collect", "-o", str(out), "--root", str(root), "--redact",
                                      "--nccl-tests", str(nccl_tests), "--bench-timeout", "30"])
    assert result.exit_code == 0, result.output
    everything = _all_bytes(out).lower()
    survivors = {kind: sorted(s for s in spellings if s.lower().encode() in everything)
                 for kind, spellings in _spellings().items()}
    assert {kind: found for kind, found in survivors.items() if found} == {}
    # Redaction kept what the analysis needs: PCI bus ids, the GPU, the benchmark.
    with tarfile.open(out) as archive:
        names = archive.getnames()
        manifest = json.loads(archive.extractfile(next(n for n in names if n.endswith("manifest.json"))).read())
    assert all(name.split("/", 1)[0] == names[0] for name in names)
    assert HOST_SHORT not in names[0]
    assert b"0000:18:00.0" in everything or b"00000000:18:00.0" in everything
    counts = manifest["redaction"]["replaced"]
    for kind in ("serial", "gpu_uuid", "uuid", "mac", "guid", "ib_gid", "ipv4", "ipv6", "hostname", "username",
                 "instance_id"):
        assert counts[kind] > 0, kind
    assert re.search(rb"GID 3 \(0/0200000000000\d{3}\)", _all_bytes(out))
