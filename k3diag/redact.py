"""Replacing what identifies a machine or a site with consistent pseudonyms, before a bundle leaves.

A vendor sending a bundle to a buyer should not have to send serial numbers, GPU UUIDs,
MAC/IP addresses or host names. Each distinct value gets one pseudonym used everywhere
(text evidence, stderr, commands, names, the manifest), so the evidence still joins up:
the same GPU UUID in `nvidia-smi -q` and in the NVML readings stays the same pseudonym.

PCI bus ids are never touched: they carry the topology the audit is about, and they say
nothing about who owns the machine.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from k3diag.evidence import Evidence
from k3diag.model.words import counted

KINDS = ("serial", "gpu_uuid", "uuid", "mac", "guid", "ib_gid", "ipv4", "ipv6", "hostname", "username",
         "instance_id")

# `Serial Number : 1652320000000` (nvidia-smi -q, dmidecode, rocm-smi), `"serial": "..."` (JSON
# readings), `Device Serial Number 98-03-9b-ff-ff-8a-bc-de` (lspci -vv), `SERIAL_NUMBER: ...` (amd-smi).
# `Serial Number : 1652320000000` (nvidia-smi -q, dmidecode, rocm-smi), `"serial": "..."` and any key
# ending in `_serial` (`board_serial`, `product_serial`: JSON readings, DMI), `Device Serial Number
# 98-03-9b-ff-ff-8a-bc-de` (lspci -vv), `SERIAL_NUMBER: ...` (amd-smi), `[SN] Serial number: MT2110X0`.
_SERIAL_RE = re.compile(
    r"""(?ix)
    (?P<key>(?<![A-Za-z0-9])(?:[a-z0-9]+[ _-]){0,2}serial(?:[ _-]?(?:number|no|num))?["']?)
    (?P<sep>\s*[:=]\s*["']?|[ ](?=[0-9a-f]{2}-))
    (?P<value>[^\s"',}\]][^"',}\]\n]*?)
    (?=\s*["',}\]]|\s*$)
    """,
    re.MULTILINE,
)
# Mellanox/NVIDIA NICs put the card's UUID in VPD field V3 (`[V3] Vendor specific: 3c1d9f4a...`), as
# hex without dashes; any vendor-specific VPD field holding a long hex string is treated the same.
_VPD_HEX_RE = re.compile(r"(?m)^(?P<key>[ \t]*\[V[0-9A-Z]\][ \t]*Vendor specific:[ \t]*)(?P<value>[0-9A-Fa-f]{16,})[ \t]*$")
# NCCL's RoCE lines: `GID 3 (0/14000A0AFFFF0000)`, the subnet prefix and interface id as 64-bit hex
# numbers; an IPv4-mapped GID carries the IPv4 address inside the interface id, byte-swapped.
_NCCL_GID_RE = re.compile(r"\bGID[ \t]+-?\d+[ \t]+\((?P<prefix>[0-9A-Fa-f]{1,16})/(?P<iid>[0-9A-Fa-f]{1,16})\)")
# The kernel command line's PXE boot interface: `BOOTIF=01-b8-ce-f6-0a-1b-2c` (ARP type 01, then the MAC).
_BOOTIF_RE = re.compile(r"(?i)(?P<key>\bBOOTIF=[0-9a-f]{2}-)(?P<mac>(?:[0-9a-f]{2}-){5}[0-9a-f]{2})\b")
# Home folders name their user: `/home/alice/...`, `/Users/alice`, `C:\Users\alice`.
_HOME_RE = re.compile(r"(?P<key>(?:/home/|/Users/|[A-Za-z]:\\Users\\|/var/home/))(?P<user>[A-Za-z0-9_][A-Za-z0-9._-]*)")
# Shell prompts name the user and the host: `alice@gpu07:~$`, `[alice@gpu07 ~]$`, `(venv) alice@gpu07:~$`.
_PROMPT_USER_RE = re.compile(
    r"(?m)^[ \t]*(?:\([^)\n]*\)[ \t]*)?\[?(?P<user>[a-z_][a-z0-9_.-]{0,31})@(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*)(?=[:\s\]])")
_USER_FIELD_RE = re.compile(r"""(?i)\b(?:user(?:name)?|login|owner|USER|LOGNAME)["']?\s*[:=]\s*["']?(?P<user>[a-z_][a-z0-9_.-]{0,31})\b""")
# Cloud instance ids: AWS `i-0abc...` (8 or 17 hex), OCI `ocid1.instance....`, and any `instance id` field.
_INSTANCE_RE = re.compile(r"(?<![\w-])(?:i-(?:[0-9a-f]{17}|[0-9a-f]{8})|ocid1\.[a-z0-9]+\.[a-z0-9]+\.[a-z0-9-]*\.[a-z0-9]{20,})(?![\w-])")
_INSTANCE_FIELD_RE = re.compile(r"""(?i)(?P<key>\binstance[ _-]?id["']?\s*[:=]\s*["']?)(?P<value>[A-Za-z0-9][\w.-]{3,})""")
_SERIAL_PLACEHOLDERS = {
    "n/a", "[n/a]", "na", "none", "null", "0", "not specified", "not available", "unknown", "to be filled by o.e.m.",
    "default string", "[not supported]", "not supported", "0000000000000", "",
}
_GPU_UUID_RE = re.compile(
    r"\b(?P<prefix>GPU|MIG|GPU-I|CI)-(?P<hex>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\b"
)
# A UUID field whose value is not a well-formed UUID (pasted half-masked: `GPU-4965xxxx-79e3-...`).
_UUID_FIELD_RE = re.compile(r"""(?im)(?P<key>\b(?:GPU[ _]?)?UUID["']?\s*[:=]\s*["']?)(?P<value>[^\s"',}\]]+)""")
_UUID_RE = re.compile(r"(?<![0-9A-Za-z-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Za-z-])")
# 6-byte Ethernet and 20-byte IPoIB hardware addresses, `:` or `-` separated.
_MAC_RE = re.compile(
    r"(?<![0-9A-Fa-f:-])(?:[0-9A-Fa-f]{2}([:-]))(?:[0-9A-Fa-f]{2}\1){4}[0-9A-Fa-f]{2}"
    r"(?:(?:\1[0-9A-Fa-f]{2}){14})?(?![0-9A-Fa-f:-])"
)
# InfiniBand node/port/system GUIDs (`Node GUID: 0x506b4b0300c9e5b0`, ibstat, ibv_devinfo `node_guid`).
_GUID_RE = re.compile(r"(?i)(?P<key>guid[\"']?\s*[:=]?\s*[\"']?)(?P<value>(?:0x)?[0-9a-f]{16}|(?:[0-9a-f]{4}:){3}[0-9a-f]{4})\b")
_IPV4_RE = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
# A run of hex digits and colons with at least two colons; `ifname:addr` (NCCL's `ib0:fe80::1`)
# glues a name on the front, so validation also tries the run without its first field.
_IPV6_RE = re.compile(r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]*(?::[0-9A-Fa-f]*){2,}(?:%[\w-]+)?(?![\w.:])")
# NCCL's line prefix `host:pid:tid [dev] NCCL`, possibly behind mpirun's `[1,0]<stdout>:` or torchrun's `[rank0]:`.
_NCCL_HOST_RE = re.compile(
    r"^(?:\[\d+,\d+\]<\w+>:\s*)?(?:\[rank\d+\]:\s*)?(?:\S+\s+)?(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):\d+:\d+\s+\[\d+\]\s+(?:NCCL|RCCL)\b",
    re.MULTILINE,
)
# Host names stated as such: `"hostname": "gpu07"`, `Hostname: gpu07`, `Nodename = gpu07`, a BMC's
# `bmc_hostname: gpu07-bmc`.
_HOSTNAME_FIELD_RE = re.compile(
    r"""(?i)\b(?:hostname|host[ _]name|node[ _]?name|fqdn|bmc[ _-]?(?:host[ _]?name|name|address))["']?\s*[:=]\s*["']?(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*)"""
)
# nccl-tests names every rank's host: `#  Rank  0 Group  0 Pid  1234 on    gpu07 device  0 [0x1b] ...`.
_NCCL_TESTS_HOST_RE = re.compile(r"\bPid\s+\d+\s+on\s+(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*)\s+device\b")
# The kernel's `ip=client:server:gateway:netmask:hostname:device:autoconf`.
_KERNEL_IP_RE = re.compile(r"\bip=[^\s:]*:[^\s:]*:[^\s:]*:[^\s:]*:(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*)")
# Names that are not secrets and too common to replace everywhere without breaking the text.
_HOSTNAME_STOPLIST = {"localhost", "localhost.localdomain", "none", "null", "unknown", "n/a", "gpu", "node", "host"}
_MIN_HOSTNAME_LEN = 2  # "vm", "n1": short names are still names; the stop list guards common words
# System and cloud-image accounts: they say nothing about who owns the machine, and replacing them
# as words would break text (`root` is in every path of a container).
_USER_STOPLIST = {
    "root", "nobody", "daemon", "bin", "sys", "admin", "user", "users", "ubuntu", "ec2-user", "centos", "debian",
    "fedora", "rocky", "cloud-user", "opc", "azureuser", "www-data", "git", "shared", "public", "lib", "local",
}


@dataclass
class RedactionReport:
    """What was replaced, as counts: never the values themselves."""

    replaced: dict[str, int] = field(default_factory=lambda: {kind: 0 for kind in KINDS})
    distinct: dict[str, int] = field(default_factory=lambda: {kind: 0 for kind in KINDS})
    unscanned: list[str] = field(default_factory=list)  # binary evidence that could not be searched

    @property
    def total(self) -> int:
        return sum(self.replaced.values())

    def summary(self) -> str:
        parts = [f"{self.distinct[k]} {_KIND_WORDS[k]} ({self.replaced[k]} places)" for k in KINDS if self.replaced[k]]
        text = "redacted " + (", ".join(parts) if parts else "nothing (no identifiers found)")
        if self.unscanned:
            one = len(self.unscanned) == 1
            text += (f"; {counted(len(self.unscanned), 'binary item')} could not be searched and "
                     f"{'was' if one else 'were'} left out")
        return text

    def to_json(self) -> dict:
        return {"replaced": dict(self.replaced), "distinct": dict(self.distinct), "unscanned": list(self.unscanned)}


_KIND_WORDS = {
    "serial": "serial numbers",
    "gpu_uuid": "GPU UUIDs",
    "uuid": "other UUIDs",
    "mac": "MAC addresses",
    "guid": "InfiniBand GUIDs",
    "ipv4": "IPv4 addresses",
    "ipv6": "IPv6 addresses",
    "hostname": "host names",
    "ib_gid": "InfiniBand/RoCE GIDs in hex",
    "username": "user names",
    "instance_id": "cloud instance ids",
}


class Redactor:
    """Holds the pseudonym tables so one value gets one pseudonym across a whole bundle."""

    def __init__(self, hostnames: set[str] | None = None, usernames: set[str] | None = None) -> None:
        self.report = RedactionReport()
        self._tables: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        self._hosts: list[str] = []
        self._host_re: re.Pattern[str] | None = None
        self._users: list[str] = []
        self._user_re: re.Pattern[str] | None = None
        self._issued: set[str] = set()
        for name in sorted(hostnames or ()):
            self.add_hostname(name)
        for name in sorted(usernames or ()):
            self.add_username(name)

    # -- host names -------------------------------------------------------------------
    def add_hostname(self, name: str) -> None:
        name = name.strip().rstrip(".")
        if len(name) < _MIN_HOSTNAME_LEN or name.lower() in _HOSTNAME_STOPLIST or _is_ip(name):
            return
        if name.isdigit() or name in self._issued:
            return
        candidates = [name]
        short = name.split(".", 1)[0]
        if short != name and len(short) >= _MIN_HOSTNAME_LEN and short.lower() not in _HOSTNAME_STOPLIST \
                and not short.isdigit():
            candidates.append(short)
        pseudonym = None
        for candidate in candidates:
            if candidate in self._tables["hostname"]:
                pseudonym = self._tables["hostname"][candidate]
        pseudonym = pseudonym or f"host-{len(set(self._tables['hostname'].values())) + 1}"
        changed = False
        for candidate in candidates:
            if candidate not in self._tables["hostname"]:
                self._tables["hostname"][candidate] = pseudonym
                self._hosts.append(candidate)
                changed = True
        self._issued.add(pseudonym)
        if changed:
            # Longest first so `gpu07.lab.example` is replaced whole before `gpu07`.
            ordered = sorted(self._hosts, key=len, reverse=True)
            # Bounded by letters and digits only: `smi-gpu07.txt` and `gpu07_log` name the host too.
            self._host_re = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(re.escape(h) for h in ordered) + r")(?![A-Za-z0-9])")
            self.report.distinct["hostname"] = len(set(self._tables["hostname"].values()))

    def learn_hostnames(self, text: str) -> None:
        """Host and user names the text states as such, so they are replaced wherever else they appear."""
        for pattern in (_NCCL_HOST_RE, _HOSTNAME_FIELD_RE, _NCCL_TESTS_HOST_RE, _KERNEL_IP_RE, _PROMPT_USER_RE):
            for match in pattern.finditer(text):
                self.add_hostname(match.group("host"))
        for pattern in (_HOME_RE, _PROMPT_USER_RE, _USER_FIELD_RE):
            for match in pattern.finditer(text):
                self.add_username(match.group("user"))

    # -- user names -------------------------------------------------------------------
    def add_username(self, name: str) -> None:
        name = name.strip()
        if len(name) < 2 or name.lower() in _USER_STOPLIST or name in self._issued or name.isdigit():
            return
        if name in self._tables["username"] or name in self._tables["hostname"]:
            return
        pseudonym = f"user-{len(self._tables['username']) + 1}"
        self._tables["username"][name] = pseudonym
        self._issued.add(pseudonym)
        self._users.append(name)
        ordered = sorted(self._users, key=len, reverse=True)
        self._user_re = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(re.escape(u) for u in ordered) + r")(?![A-Za-z0-9])")
        self.report.distinct["username"] = len(self._tables["username"])

    # -- pseudonyms -------------------------------------------------------------------
    def _pseudonym(self, kind: str, original: str, make: Callable[[int], str]) -> str:
        table = self._tables[kind]
        key = original.lower() if kind in ("mac", "gpu_uuid", "uuid", "guid", "ipv6") else original
        if original in self._issued:  # a pseudonym seen a second time (text redacted twice)
            return original
        if key not in table:
            table[key] = make(len(table) + 1)
            self._issued.add(table[key])
            self.report.distinct[kind] = len(table)
        self.report.replaced[kind] += 1
        return table[key]

    def originals(self) -> dict[str, list[str]]:
        """Every value replaced, by kind (for tests that prove none survives)."""
        return {kind: sorted(table) for kind, table in self._tables.items()}

    # -- text -------------------------------------------------------------------------
    def text(self, text: str) -> str:
        if not text:
            return text
        text = _VPD_HEX_RE.sub(lambda m: m.group("key") + self._pseudonym(
            "uuid", m.group("value"), lambda n: f"{n:032x}"), text)
        text = _NCCL_GID_RE.sub(self._nccl_gid, text)
        text = _BOOTIF_RE.sub(lambda m: m.group("key") + self._mac_text(m.group("mac"), "-"), text)
        text = _SERIAL_RE.sub(self._serial, text)
        text = _GPU_UUID_RE.sub(self._gpu_uuid, text)
        text = _UUID_RE.sub(lambda m: self._pseudonym("uuid", m.group(0), _uuid_pseudonym), text)
        text = _UUID_FIELD_RE.sub(self._uuid_field, text)
        text = _GUID_RE.sub(self._guid, text)
        text = _MAC_RE.sub(self._mac, text)
        text = _IPV6_RE.sub(self._ipv6, text)
        text = _IPV4_RE.sub(self._ipv4, text)
        text = _INSTANCE_FIELD_RE.sub(self._instance_field, text)
        text = _INSTANCE_RE.sub(lambda m: self._pseudonym("instance_id", m.group(0), _instance_pseudonym), text)
        if self._host_re is not None:
            text = self._host_re.sub(
                lambda m: self._pseudonym("hostname", m.group(0), lambda n: "host-0"), text)
        text = _HOME_RE.sub(self._home, text)
        if self._user_re is not None:
            text = self._user_re.sub(lambda m: self._pseudonym("username", m.group(0), lambda n: "user-0"), text)
        return text

    def _nccl_gid(self, match: re.Match[str]) -> str:
        prefix, iid = match.group("prefix"), match.group("iid")
        whole = match.group(0)
        head = whole[: match.start("prefix") - match.start()]
        if int(iid, 16) == 0:
            return whole
        new_iid = self._pseudonym("ib_gid", iid, lambda n: f"{0x0200000000000000 + n:016X}")
        # A zero or link-local (fe80::) subnet prefix is the same on every host; any other names a site.
        keep_prefix = int(prefix, 16) in (0, 0xFE80000000000000, 0x80FE)
        new_prefix = prefix if keep_prefix else self._pseudonym("ib_gid", prefix, lambda n: f"{0xFD00000000000000 + n:016X}")
        return f"{head}{new_prefix}/{new_iid})"

    def _home(self, match: re.Match[str]) -> str:
        user = match.group("user")
        if user.lower() in _USER_STOPLIST or user in self._issued:
            return match.group(0)
        self.add_username(user)
        return match.group("key") + self._pseudonym("username", user, lambda n: "user-0")

    def _instance_field(self, match: re.Match[str]) -> str:
        value = match.group("value")
        if value in self._issued or value.lower() in _SERIAL_PLACEHOLDERS:
            return match.group(0)
        return match.group("key") + self._pseudonym("instance_id", value, _instance_pseudonym)

    def _serial(self, match: re.Match[str]) -> str:
        value = match.group("value").strip()
        if value.lower() in _SERIAL_PLACEHOLDERS or value.startswith("SERIAL-REDACTED-"):
            return match.group(0)
        pseudonym = self._pseudonym("serial", value, lambda n: f"SERIAL-REDACTED-{n:04d}")
        return match.group("key") + match.group("sep") + pseudonym

    def _gpu_uuid(self, match: re.Match[str]) -> str:
        prefix = match.group("prefix")
        return self._pseudonym("gpu_uuid", match.group(0), lambda n: f"{prefix}-REDACTED-{n:04d}")

    def _uuid_field(self, match: re.Match[str]) -> str:
        value = match.group("value")
        if value in self._issued or value.lower() in _SERIAL_PLACEHOLDERS:
            return match.group(0)
        prefix = "GPU" if value.upper().startswith("GPU-") else "UUID"
        return match.group("key") + self._pseudonym("gpu_uuid", value, lambda n: f"{prefix}-REDACTED-{n:04d}")

    def _guid(self, match: re.Match[str]) -> str:
        value = match.group("value")
        if int(value.replace(":", "").removeprefix("0x").removeprefix("0X"), 16) == 0:
            return match.group(0)
        colon = ":" in value
        pseudonym = self._pseudonym(
            "guid", value,
            lambda n: (f"0200:0000:0000:{n:04x}" if colon else f"0x02000000{n:08x}"),
        )
        return match.group("key") + pseudonym

    def _mac(self, match: re.Match[str]) -> str:
        return self._mac_text(match.group(0), match.group(1))

    def _mac_text(self, value: str, sep: str) -> str:
        octets = value.replace(sep, "")
        if set(octets) <= {"0"} or octets.lower() == "f" * len(octets):
            return value  # all-zero or broadcast: not an identity
        count = len(octets) // 2

        def make(n: int) -> str:
            body = [0x02] + [0] * (count - 1)
            for i in range(4):
                body[-1 - i] = (n >> (8 * i)) & 0xFF
            return sep.join(f"{b:02x}" for b in body)

        return self._pseudonym("mac", value, make)

    def _ipv4(self, match: re.Match[str]) -> str:
        value = match.group(0)
        try:
            address = ipaddress.IPv4Address(value)
        except ValueError:
            return value  # a version number such as 96.00.89.00 (leading zeros) or 300.1.2.3
        if address.is_loopback or address.is_unspecified or value in ("255.255.255.255",) or _is_netmask(address):
            return value
        return self._pseudonym("ipv4", value, lambda n: f"10.255.{(n >> 8) & 0xFF}.{n & 0xFF}")

    def _ipv6(self, match: re.Match[str]) -> str:
        value = match.group(0)
        address_text, _, scope = value.partition("%")
        lead = ""
        start = match.start()
        glued = start > 0 and (match.string[start - 1].isalnum() or match.string[start - 1] == "_")
        address = None if glued else _ipv6_or_none(address_text)
        if address is None and ":" in address_text:
            # `ib0:fe80::1`: the first field belongs to an interface name, not the address.
            head, _, rest = address_text.partition(":")
            address = _ipv6_or_none(rest)
            lead, address_text = head + ":", rest
        if address is None or address.is_loopback or address.is_unspecified:
            return value
        pseudonym = self._pseudonym("ipv6", address_text, lambda n: f"fdff::{n:x}")
        return lead + pseudonym + (f"%{scope}" if scope else "")

    # -- structures -------------------------------------------------------------------
    def value(self, obj: Any) -> Any:
        """Redact every string inside a JSON-like structure (keys too: readings key by UUID)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.value(v) for v in obj)
        return obj


def _ipv6_or_none(text: str) -> ipaddress.IPv6Address | None:
    if text.count(":") < 2:
        return None
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        return None


def _uuid_pseudonym(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _instance_pseudonym(n: int) -> str:
    return f"instance-redacted-{n:04d}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _is_netmask(address: ipaddress.IPv4Address) -> bool:
    value = int(address)
    if value == 0:
        return False
    inverted = (~value) & 0xFFFFFFFF
    return (inverted & (inverted + 1)) == 0 and value >= 0xFF000000


def _looks_binary(data: bytes) -> bool:
    return b"\x00" in data[:65536]


def _hostnames_from_manifest(manifest: dict) -> set[str]:
    names: set[str] = set()
    host = manifest.get("host")
    if isinstance(host, str):
        names.add(host)
    elif isinstance(host, dict):
        for key in ("hostname", "fqdn", "name", "nodename"):
            value = host.get(key)
            if isinstance(value, str):
                names.add(value)
    for key in ("hostname", "fqdn"):
        value = manifest.get(key)
        if isinstance(value, str):
            names.add(value)
    return names


def redact_evidence(
    evidence: list[Evidence], manifest: dict, extra_hostnames: set[str] | None = None,
    extra_usernames: set[str] | None = None, with_redactor: bool = False,
):
    """Evidence and manifest with identifiers replaced by consistent pseudonyms, and what was replaced.

    Text is decoded with `surrogateescape` so bytes that are not UTF-8 survive unchanged.
    Evidence that is binary (NUL bytes) cannot be searched safely, so it is left out and
    the report names it. The manifest gets a `redaction` entry holding the report.
    """
    redactor = Redactor(_hostnames_from_manifest(manifest) | set(extra_hostnames or ()))
    texts: list[str | None] = []
    kept: list[Evidence] = []
    for item in evidence:
        data = item.data
        if data is None and item.path is not None:
            try:
                data, _ = item.read_bytes()
            except OSError as exc:
                data = None
                item = replace(item, error=item.error or f"could not read {item.path}: {exc.strerror or exc}")
        if data is not None and _looks_binary(data):
            redactor.report.unscanned.append(redactor.text(item.name))
            continue
        text = data.decode("utf-8", errors="surrogateescape") if data is not None else None
        if text is not None:
            redactor.learn_hostnames(text)
        redactor.learn_hostnames(item.stderr)
        texts.append(text)
        kept.append(item)
    redactor.learn_hostnames(_flatten(manifest))

    out: list[Evidence] = []
    for item, text in zip(kept, texts):
        out.append(
            replace(
                item,
                name=redactor.text(item.name),
                data=redactor.text(text).encode("utf-8", errors="surrogateescape") if text is not None else None,
                path=None if text is not None else item.path,
                command=redactor.text(item.command) if item.command else item.command,
                stderr=redactor.text(item.stderr),
                error=redactor.text(item.error) if item.error else item.error,
                meta=redactor.value(dict(item.meta)),
            )
        )
    new_manifest = redactor.value(dict(manifest))
    new_manifest["redaction"] = redactor.report.to_json()
    if with_redactor:
        return out, new_manifest, redactor.report, redactor
    return out, new_manifest, redactor.report


def _flatten(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        return "\n".join(f"{k}: {_flatten(v)}" if isinstance(v, str) else _flatten(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return "\n".join(_flatten(v) for v in obj)
    return ""
