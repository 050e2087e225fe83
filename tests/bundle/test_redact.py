"""Redaction: no serial, UUID, MAC, IP or host name survives anywhere in the written bundle."""

from __future__ import annotations

import gzip
import ipaddress
import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.bundle import read_bundle, write_bundle
from k3diag.evidence import Evidence
from k3diag.redact import Redactor, redact_evidence

REPO = Path(__file__).resolve().parents[2]
SMI_Q = REPO / "fixtures" / "nvidia" / "smi-q-h800-525-new-layout.txt"
NCCL_LOG = REPO / "fixtures" / "nccl" / "nccl-2.18.5-2nodes-roce-ib-hca.log"

# Generated (no real `ip` or `ibstat` output is in the fixtures): the shapes these tools print.
IP_LINK = """\
$ ip -br link
lo               UNKNOWN        00:00:00:00:00:00 <LOOPBACK,UP,LOWER_UP>
enp24s0np0       UP             b8:ce:f6:0a:1b:2c <BROADCAST,MULTICAST,UP,LOWER_UP>
ib0              UP             00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:0a:1b:2c <BROADCAST,MULTICAST,UP,LOWER_UP>
$ ip -br addr
enp24s0np0       UP             10.10.10.1/24 fe80::bace:f6ff:fe0a:1b2c/64
$ ibstat mlx5_0 | grep GUID
\tNode GUID: 0xb8cef603000a1b2c
\tSystem image GUID: 0xb8cef603000a1b2c
\t\tPort GUID: 0xbacef6fffe0a1b2c
$ sudo lspci -vv -s 3b:00.0 | grep Serial
\tCapabilities: [1c0 v1] Device Serial Number b8-ce-f6-03-00-0a-1b-2c
"""
HOST_READINGS = json.dumps({"hostname": "gpu-node-17.lab.example.com", "kernel": "5.15.0-91-generic",
                            "gpus": [{"uuid": "GPU-34bf77d1-c686-6821-79a8-32d326c5039c", "serial": "1651323018291",
                                      "bus_id": "00000000:18:00.0"}]})


def _originals() -> dict[str, set[str]]:
    text = "\n".join([SMI_Q.read_text(), NCCL_LOG.read_text(), IP_LINK, HOST_READINGS])
    found: dict[str, set[str]] = {
        "serial": set(re.findall(r"Serial Number\s*:\s*(\S+)", text)) | {"1651323018291", "b8-ce-f6-03-00-0a-1b-2c"},
        "uuid": set(re.findall(r"GPU-[0-9a-f]{8}-[0-9a-f-]{27}", text)),
        "mac": {"b8:ce:f6:0a:1b:2c", "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:0a:1b:2c"},
        "guid": {"0xb8cef603000a1b2c", "0xbacef6fffe0a1b2c"},
        "ipv6": {"fe80::bace:f6ff:fe0a:1b2c"},
        "host": set(re.findall(r"^(\w[\w.-]*):\d+:\d+ \[", text, re.M)) | {"gpu-node-17.lab.example.com",
                                                                             "gpu-node-17"},
    }
    ipv4 = set()
    for candidate in re.findall(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])", text):
        try:
            address = ipaddress.IPv4Address(candidate)
        except ValueError:
            continue
        if not address.is_loopback:
            ipv4.add(candidate)
    found["ipv4"] = ipv4
    return found


def _evidence() -> list[Evidence]:
    return [
        Evidence(name="nvidia-smi-q.txt", data=SMI_Q.read_bytes(), kind="command", command="nvidia-smi -q"),
        Evidence(name="nccl-gpu-node-17.log", data=NCCL_LOG.read_bytes(), kind="file",
                 stderr="ssh: connect to host gpu-node-17 port 22 from 10.10.10.1"),
        Evidence(name="ip.txt", data=IP_LINK.encode(), kind="command", command="ip -br link"),
        Evidence(name="host.json", data=HOST_READINGS.encode(), kind="reading", format_hint="host-readings",
                 meta={"hostname": "gpu-node-17.lab.example.com"}),
    ]


def test_no_identifier_survives_in_the_written_bundle(tmp_path: Path) -> None:
    originals = _originals()
    assert originals["host"] >= {"node2", "node4"} and len(originals["ipv4"]) >= 2 and originals["uuid"]
    manifest = {"host": {"hostname": "gpu-node-17.lab.example.com"}, "tools": {"nvidia-smi": "525.105.17"}}
    evidence, new_manifest, report = redact_evidence(_evidence(), manifest)
    out = write_bundle(evidence, new_manifest, tmp_path / "quote-4711.tar.gz")
    blob = gzip.decompress(out.read_bytes()).decode("utf-8", errors="replace")
    for kind, values in originals.items():
        for value in values:
            assert value not in blob, f"{kind} {value!r} survived redaction"
            assert value.lower() not in blob.lower() or kind == "host", f"{kind} {value!r} survived (case)"
    # PCI bus ids carry the topology and stay.
    assert "00000000:18:00.0" in blob
    assert "0000:1b:00.0" not in report.summary()
    assert report.replaced["serial"] >= 3 and report.replaced["gpu_uuid"] >= 2
    assert report.distinct["hostname"] >= 3 and report.distinct["ipv4"] >= 2
    assert report.replaced["mac"] >= 2 and report.replaced["guid"] >= 2 and report.replaced["ipv6"] >= 1
    summary = report.summary()
    for values in originals.values():
        for value in values:
            assert value not in summary
    assert new_manifest["redaction"]["replaced"] == report.replaced


def test_pseudonyms_are_consistent_across_the_bundle(tmp_path: Path) -> None:
    evidence, manifest, _ = redact_evidence(_evidence(), {"host": "gpu-node-17.lab.example.com"})
    texts = {e.name: e.data.decode() for e in evidence}
    smi = texts["nvidia-smi-q.txt"]
    host_json = json.loads(texts["host.json"])
    uuid = re.search(r"GPU UUID\s*:\s*(\S+)", smi).group(1)
    assert uuid == "GPU-REDACTED-0001"
    assert host_json["gpus"][0]["uuid"] == uuid  # the same GPU keeps the same pseudonym
    assert host_json["hostname"] == manifest["host"] == "host-1"
    assert "nccl-host-1.log" in texts
    log = texts["nccl-host-1.log"]
    assert re.search(r"^host-\d+:14159:14159 \[0\] NCCL INFO Bootstrap : Using enp24s0np0:10\.255\.0\.\d+<0>", log, re.M)
    # The log still parses the same way: prefixes keep their shape.
    assert log.count(" NCCL INFO ") == NCCL_LOG.read_text().count(" NCCL INFO ")


def test_redacted_bundle_reads_back_and_says_it_was_redacted(tmp_path: Path) -> None:
    evidence, manifest, report = redact_evidence(_evidence(), {"host": "gpu-node-17"})
    out = write_bundle(evidence, manifest, tmp_path / "r")
    bundle = read_bundle(out)
    assert bundle.manifest["redaction"]["replaced"]["hostname"] == report.replaced["hostname"] > 0
    assert {e.meta["collected_as"] for e in bundle.evidence} == {"nvidia-smi-q.txt", "nccl-host-1.log", "ip.txt",
                                                                 "host.json"}


def test_values_that_are_not_identities_stay() -> None:
    redactor = Redactor({"gpu07"})
    text = ("Serial Number : N/A\nVBIOS Version : 96.00.51.00.0E\nDriver Version : 535.154.05\n"
            "Bus Id : 00000000:1B:00.0\nnetmask 255.255.255.0 lo 127.0.0.1 ::1\n"
            "NCCL version 2.18.5+cuda12.2\nbroadcast ff:ff:ff:ff:ff:ff\nGPU0 X NV18 0-51 0\n")
    assert redactor.text(text) == text
    assert redactor.report.total == 0


def test_binary_evidence_is_left_out_and_reported() -> None:
    evidence = [Evidence(name="config-0000:1b:00.0", data=b"\x00\x01serial\x00"), Evidence(name="ok.txt", data=b"fine")]
    kept, _, report = redact_evidence(evidence, {})
    assert [e.name for e in kept] == ["ok.txt"]
    assert report.unscanned == ["config-0000:1b:00.0"]
    assert "could not be searched" in report.summary()


def test_common_words_are_not_taken_for_host_names() -> None:
    redactor = Redactor({"localhost", "gpu", "node", "12", "x"})
    assert redactor.text("GPU0 on node 12 localhost") == "GPU0 on node 12 localhost"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_redaction_never_raises_and_is_idempotent(text: str) -> None:
    redactor = Redactor({"gpu07.example"})
    once = redactor.text(text)
    assert redactor.text(once) == once
