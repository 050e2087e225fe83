"""The red-team bundles that used to crash, hang or mislead: undecodable names and manifest strings, a manifest
nested 5,000 deep or holding a 5,000-digit number, duplicate members and manifests, hard links in folders,
members too big for memory, tens of thousands of manifest entries. Each ends in a read, a sentence or a refusal.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.bundle import BundleError, read_bundle
from k3diag.cli import app

REPO = Path(__file__).resolve().parents[2]
TOPO = (REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt").read_bytes()
MiB = 1024 * 1024
runner = CliRunner()


def _tar(path: Path, members: list[tuple[bytes | str, bytes]], fmt: int = tarfile.GNU_FORMAT) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape") as archive:
        for name, data in members:
            info = tarfile.TarInfo(os.fsdecode(name) if isinstance(name, bytes) else name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    return path


def _manifest(**extra) -> bytes:
    return json.dumps({"schema": "k3diag.bundle/1", "evidence": [], **extra}).encode()


def test_undecodable_member_names_and_surrogates_in_the_manifest_are_replaced_and_reported(tmp_path: Path) -> None:
    manifest = b'{"schema": "k3diag.bundle/1", "host": {"hostname": "gpu\\udcff07"}, "created": "2026\\ud800", "evidence": []}'
    bundle = _tar(tmp_path / "names.tar.gz", [("manifest.json", manifest), (b"evidence/topo-\xff\xfe.txt", TOPO)])
    result = read_bundle(bundle)
    assert result.manifest["host"] == {"hostname": "gpu\ufffd07"}
    assert [e.name for e in result.evidence] == ["names.tar.gz:evidence/topo-\ufffd\ufffd.txt"]
    assert ("names.tar.gz: 2 strings in manifest.json held invalid characters (lone surrogates); they are shown "
            "with \ufffd in their place") in result.warnings
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    done = runner.invoke(app, ["audit", str(bundle), "--html", str(html), "--md", str(md), "--json"])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    report = json.loads(done.stdout_bytes.decode("utf-8"))  # strict UTF-8
    assert report["schema"] == "k3diag.audit/1"
    assert html.stat().st_size > 10_000 and "gpu\ufffd07" in html.read_text(encoding="utf-8")
    assert "topo-\ufffd\ufffd.txt" in md.read_text(encoding="utf-8")


@pytest.mark.parametrize("manifest, expected", [
    (b'{"evidence": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     "manifest.json nests 5001 levels deep (a real one nests 4); the limit is 32; it was ignored"),
    (b'{"schema": "k3diag.bundle/1", "gpu_count": ' + b"9" * 5000 + b"}",
     "manifest.json holds a number 5000 characters long; the limit is 40; it was ignored"),
    (b'{"schema": "k3diag.bundle/1", "evidence": [], "evidence": [{"member": "evidence/x"}]}',
     "manifest.json names the key 'evidence' twice in one object, so which value counts is ambiguous; it was ignored"),
])
def test_manifests_built_to_break_the_parser_are_ignored_with_a_sentence(tmp_path: Path, manifest: bytes,
                                                                           expected: str) -> None:
    bundle = _tar(tmp_path / "m.tar.gz", [("manifest.json", manifest), ("evidence/topo.txt", TOPO)])
    result = read_bundle(bundle)
    assert any(expected in warning for warning in result.warnings), result.warnings
    assert [e.data for e in result.evidence] == [TOPO]  # the files are still read, as plain evidence


def test_strings_in_brackets_do_not_count_as_nesting(tmp_path: Path) -> None:
    manifest = json.dumps({"schema": "k3diag.bundle/1", "note": "[" * 1000, "evidence": []}).encode()
    result = read_bundle(_tar(tmp_path / "s.tar.gz", [("manifest.json", manifest)]))
    assert result.manifest["note"] == "[" * 1000


@pytest.mark.parametrize("members, expected", [
    ([("manifest.json", _manifest()), ("evidence/topo.txt", b"first"), ("evidence/topo.txt", b"second")],
     "holds two members named 'evidence/topo.txt'"),
    ([("manifest.json", _manifest()), ("evidence/Topo.txt", b"a"), ("evidence/topo.txt", b"b")],
     "holds two members named 'evidence/topo.txt'"),
    ([("node/manifest.json", _manifest()), ("manifest.json", _manifest(host="other"))],
     "holds two manifests ('node/manifest.json' and 'manifest.json')"),
])
def test_duplicate_members_and_second_manifests_are_refused(tmp_path: Path, members, expected: str) -> None:
    with pytest.raises(BundleError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        read_bundle(_tar(tmp_path / "dup.tar.gz", members))


def test_a_hard_link_in_a_folder_bundle_is_refused_unread(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:$6$hash:19000:0:99999:7:::\n")
    folder = tmp_path / "bundle"
    (folder / "evidence").mkdir(parents=True)
    (folder / "manifest.json").write_bytes(_manifest())
    os.link(secret, folder / "evidence" / "topo.txt")
    with pytest.raises(BundleError) as caught:
        read_bundle(folder)
    assert str(caught.value) == ("bundle: 'evidence/topo.txt' is a hard link (2 names for one file); bundles never "
                                 "hold links, so it was refused without reading it: copy the file itself into the "
                                 "bundle or ask the sender to recreate it")
    assert "$6$" not in str(caught.value)


def test_members_too_big_for_memory_are_refused_at_their_header_in_bounded_memory(tmp_path: Path) -> None:
    # Two 100 MiB members of zeros at gzip -1 (a 200 KB file): refused when the first header declares its size.
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.addfile(tarfile.TarInfo("manifest.json"), io.BytesIO(b""))
        for index in range(2):
            info = tarfile.TarInfo(f"evidence/zeros-{index}.txt")
            info.size = 100 * MiB
            archive.addfile(info, io.BytesIO(bytes(100 * MiB)))
    bomb = tmp_path / "zeros.tar.gz"
    bomb.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=1, mtime=0))
    del buffer
    probe = ("import json, resource, sys\nfrom pathlib import Path\nfrom k3diag.bundle import BundleError, read_bundle\n"
             f"try:\n    read_bundle(Path({str(bomb)!r}))\nexcept BundleError as exc:\n    message = str(exc)\n"
             "print(json.dumps({'rss_kib': int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]), 'message': message}))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    outcome = json.loads(done.stdout)
    assert outcome["message"] == ("zeros.tar.gz: member 'evidence/zeros-0.txt' is 100 MiB, over the 80 MiB limit for "
                                  "one member; reading stopped, ask the sender to leave it out or cut it, or raise "
                                  "the limit")
    assert outcome["rss_kib"] < 100 * 1024, outcome["rss_kib"]  # VmHWM: this process only, not its parent


def test_thirty_thousand_manifest_entries_cost_a_bounded_report(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    (folder / "evidence").mkdir(parents=True)
    entries = [{"name": f"x{i}.txt", "member": f"evidence/x{i}.txt", "kind": "command", "command": f"cmd {i}"}
               for i in range(30_000)]
    (folder / "manifest.json").write_text(json.dumps({"schema": "k3diag.bundle/1", "evidence": entries}))
    result = read_bundle(folder)
    assert len(result.evidence) == 2000  # the member limit bounds the entries too
    assert result.warnings[0] == ("many: manifest lists 30000 entries, more than the 2000 a bundle may hold; only the "
                                  "first 2000 were read")
    missing = [w for w in result.warnings if "does not hold it" in w]
    assert len(missing) == 5
    assert "many: 1995 more manifest entries of the same kind (member missing) were not listed one by one" in \
        result.warnings
