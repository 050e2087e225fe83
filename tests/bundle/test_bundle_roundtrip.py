"""Writing and reading bundles: layout, manifest, metadata, determinism, tolerance of hand edits."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from k3diag.bundle import MANIFEST_NAME, SCHEMA, BundleError, looks_like_bundle, read_bundle, write_bundle
from k3diag.evidence import Evidence

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"


def _evidence() -> list[Evidence]:
    return [
        Evidence(name="nvidia-smi-topo-m.txt", data=TOPO.read_bytes(), kind="command", command="nvidia-smi topo -m",
                 exit_code=0, duration_s=0.41, stderr="", format_hint=None),
        Evidence(name="lspci-vv.txt", kind="command", command="lspci -vv",
                 error="`lspci` is not installed or not on PATH, so `lspci -vv` could not run"),
        Evidence(name="nvml.json", data=b'{"schema": "x"}', kind="reading", format_hint="nvml-readings",
                 meta={"library": "pynvml"}),
        Evidence(name="timeout.txt", kind="command", command="nvidia-smi -q", timed_out=True, exit_code=None,
                 data=b"partial", stderr="hung", duration_s=20.0, error="did not finish"),
    ]


MANIFEST = {"host": {"hostname": "gpu07"}, "created": "2024-05-01T10:00:00+00:00",
            "tools": {"nvidia-smi": "535.154.05"}, "driver_version": "535.154.05"}


@pytest.mark.parametrize("name", ["node.tar.gz", "node.tgz", "node-folder"])
def test_roundtrip_keeps_data_and_metadata(tmp_path: Path, name: str) -> None:
    out = write_bundle(_evidence(), dict(MANIFEST), tmp_path / name)
    assert looks_like_bundle(out)
    bundle = read_bundle(out)
    assert bundle.warnings == []
    assert bundle.manifest["schema"] == SCHEMA
    assert bundle.manifest["host"] == {"hostname": "gpu07"}
    assert bundle.manifest["tools"] == {"nvidia-smi": "535.154.05"}
    assert bundle.manifest["k3diag_version"]
    by_name = {e.meta["collected_as"]: e for e in bundle.evidence}
    topo = by_name["nvidia-smi-topo-m.txt"]
    assert topo.name == f"{name}:evidence/nvidia-smi-topo-m.txt"
    assert topo.data == TOPO.read_bytes()
    assert (topo.kind, topo.command, topo.exit_code, topo.duration_s) == ("command", "nvidia-smi topo -m", 0, 0.41)
    missing = by_name["lspci-vv.txt"]
    assert missing.data is None and "not installed" in missing.error
    reading = by_name["nvml.json"]
    assert reading.format_hint == "nvml-readings" and reading.kind == "reading"
    assert reading.meta["library"] == "pynvml"
    hung = by_name["timeout.txt"]
    assert hung.timed_out is True and hung.stderr == "hung" and hung.data == b"partial"


def test_archive_is_deterministic_and_has_one_top_folder(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_bundle(_evidence(), dict(MANIFEST), tmp_path / "a" / "node.tar.gz")
    second = write_bundle(_evidence(), dict(MANIFEST), tmp_path / "b" / "node.tar.gz")
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as archive:
        names = archive.getnames()
    assert names[0] == "node" and names[1] == "node/manifest.json"
    assert all(n == "node" or n.startswith("node/") for n in names)
    assert names[2:] == ["node/evidence", "node/evidence/nvidia-smi-topo-m.txt", "node/evidence/nvml.json",
                         "node/evidence/timeout.txt"]


def test_manifest_entries_follow_evidence_order(tmp_path: Path) -> None:
    out = write_bundle(_evidence(), dict(MANIFEST), tmp_path / "f")
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert [e["name"] for e in manifest["evidence"]] == ["nvidia-smi-topo-m.txt", "lspci-vv.txt", "nvml.json",
                                                        "timeout.txt"]
    assert manifest["evidence"][1]["member"] is None
    assert manifest["evidence"][0]["member"] == "evidence/nvidia-smi-topo-m.txt"


def test_duplicate_and_odd_names_get_safe_unique_members(tmp_path: Path) -> None:
    evidence = [Evidence(name="../../etc/passwd", data=b"a"), Evidence(name="passwd", data=b"b"),
                Evidence(name="nvidia-smi topo -m", data=b"c")]
    out = write_bundle(evidence, {}, tmp_path / "f")
    members = sorted(p.name for p in (out / "evidence").iterdir())
    assert members == ["nvidia-smi_topo_-m.txt", "passwd-2.txt", "passwd.txt"]
    assert not (tmp_path / "etc").exists()


def test_folder_output_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("mine")
    with pytest.raises(BundleError, match="already exists and is not an empty folder"):
        write_bundle(_evidence(), {}, tmp_path / "busy")


def test_files_added_by_hand_are_read_with_a_warning(tmp_path: Path) -> None:
    out = write_bundle(_evidence(), dict(MANIFEST), tmp_path / "f")
    (out / "evidence" / "vendor-notes.txt").write_text("added later")
    (out / ".DS_Store").write_bytes(b"\x00junk")
    bundle = read_bundle(out)
    extra = [e for e in bundle.evidence if e.name.endswith("vendor-notes.txt")]
    assert extra and extra[0].data == b"added later" and extra[0].meta["in_manifest"] is False
    assert any("not listed in the manifest" in w and "vendor-notes.txt" in w for w in bundle.warnings)
    assert not any(e.name.endswith(".DS_Store") for e in bundle.evidence)


@pytest.mark.parametrize("content, expected", [
    (None, "has no manifest.json"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({"schema": "k3diag.bundle/9", "evidence": "nope"}).encode(), "schema is 'k3diag.bundle/9'"),
])
def test_missing_or_broken_manifest_reads_every_file(tmp_path: Path, content: bytes | None, expected: str) -> None:
    folder = tmp_path / "b"
    (folder / "evidence").mkdir(parents=True)
    (folder / "evidence" / "topo.txt").write_bytes(TOPO.read_bytes())
    if content is not None:
        (folder / "manifest.json").write_bytes(content)
    bundle = read_bundle(folder)
    assert any(expected in w for w in bundle.warnings), bundle.warnings
    assert [e.name for e in bundle.evidence] == ["b:evidence/topo.txt"]


def test_manifest_entry_for_a_missing_member_becomes_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    manifest = {"schema": SCHEMA, "evidence": [
        {"name": "x", "member": "evidence/gone.txt", "kind": "command", "command": "lspci -vv", "exit_code": "0"},
        {"name": "y", "member": "../../etc/passwd"},
        "not an object",
    ]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    bundle = read_bundle(folder)
    gone = bundle.evidence[0]
    assert gone.data is None and "missing from the bundle" in gone.error
    assert gone.exit_code is None  # a string exit code is not trusted
    assert any("outside the bundle" in w for w in bundle.warnings)
    assert any("entry 2 is not an object" in w for w in bundle.warnings)


def test_looks_like_bundle_checks_content_not_names(tmp_path: Path) -> None:
    fake = tmp_path / "fake.tar.gz"
    fake.write_text("not an archive")
    assert not looks_like_bundle(fake)
    log = tmp_path / "nccl.log.gz"
    log.write_bytes(gzip.compress(b"host:1:1 [0] NCCL INFO hello\n" * 50))
    assert not looks_like_bundle(log)  # a gzipped log is evidence, not a bundle
    plain = tmp_path / "no-suffix"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("manifest.json")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"{}"))
    plain.write_bytes(buffer.getvalue())
    assert looks_like_bundle(plain)
    assert read_bundle(plain).manifest == {}
    assert not looks_like_bundle(tmp_path / "absent")
    assert not looks_like_bundle(tmp_path)  # a folder without manifest.json


def test_not_a_bundle_says_so(tmp_path: Path) -> None:
    text = tmp_path / "topo.txt"
    text.write_bytes(TOPO.read_bytes())
    with pytest.raises(BundleError, match="is not a bundle"):
        read_bundle(text)
    with pytest.raises(BundleError, match="does not exist"):
        read_bundle(tmp_path / "nope.tar.gz")


def test_truncated_archive_is_a_clear_error(tmp_path: Path) -> None:
    out = write_bundle(_evidence(), dict(MANIFEST), tmp_path / "node.tar.gz")
    data = out.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(BundleError, match="ends early or is corrupt|damaged"):
        read_bundle(cut)
