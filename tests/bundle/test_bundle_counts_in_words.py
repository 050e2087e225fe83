"""What a bundle's reader says about damaged names counts in words: '1 file name ... it is shown', '2 file
names ... they are shown', never 'name(s)'."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from k3diag.bundle import read_bundle
from k3diag.evidence import Evidence
from k3diag.redact import RedactionReport
from tests.bundle.test_hostile_bundles_names import TOPO, _manifest, _tar

ONE = "held bytes that are not UTF-8; it is shown with \ufffd in its place"
TWO = "held bytes that are not UTF-8; they are shown with \ufffd in their place"


def _said(warnings: list[str], text: str) -> bool:
    return any(text in warning for warning in warnings)


def test_undecodable_member_names_one_and_several(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile already replaces bytes that are not UTF-8 in the names it decodes; a reader that hands back
    surrogates (another encoding setting, a PAX header) is what this sentence is for, so the safe_str the
    reader uses is made to flag the U+FFFD tarfile left."""
    import k3diag.bundle.archive as archive

    monkeypatch.setattr(archive, "safe_str", lambda text: (text, "\ufffd" in text))
    one = read_bundle(_tar(tmp_path / "one.tar.gz", [("manifest.json", _manifest()), (b"evidence/a-\xff.txt", TOPO)]))
    two = read_bundle(_tar(tmp_path / "two.tar.gz", [("manifest.json", _manifest()), (b"evidence/a-\xff.txt", TOPO),
                                                      (b"evidence/b-\xfe.txt", TOPO)]))
    assert _said(one.warnings, f"one.tar.gz: 1 member name {ONE}"), one.warnings
    assert _said(two.warnings, f"two.tar.gz: 2 member names {TWO}"), two.warnings


@pytest.mark.skipif(os.uname().sysname == "Darwin", reason="macOS refuses file names that are not UTF-8")
def test_undecodable_file_names_in_a_folder_one_and_several(tmp_path: Path) -> None:
    for count, said in ((1, f"1 file name {ONE}"), (2, f"2 file names {TWO}")):
        folder = tmp_path / f"bundle{count}"
        (folder / "evidence").mkdir(parents=True)
        (folder / "manifest.json").write_bytes(_manifest())
        for index in range(count):
            with open(os.path.join(os.fsencode(folder / "evidence"), f"topo-{index}-".encode() + b"\xff.txt"),
                      "wb") as handle:
                handle.write(TOPO)
        result = read_bundle(folder)
        assert _said(result.warnings, said), result.warnings


def test_manifest_strings_and_unlisted_files_one_and_several(tmp_path: Path) -> None:
    manifest = b'{"schema": "k3diag.bundle/1", "host": {"hostname": "gpu\\udcff07"}, "evidence": []}'
    one = read_bundle(_tar(tmp_path / "one.tar.gz", [("manifest.json", manifest), ("evidence/topo.txt", TOPO)]))
    assert ("one.tar.gz: 1 string in manifest.json held invalid characters (lone surrogates); it is shown with "
            "\ufffd in its place") in one.warnings
    assert _said(one.warnings, "one.tar.gz: 1 file not listed in the manifest was read as plain evidence (added by "
                               "hand?): evidence/topo.txt")
    two = read_bundle(_tar(tmp_path / "two.tar.gz", [("manifest.json", _manifest(note="x")),
                                                      ("evidence/topo.txt", TOPO), ("evidence/topo2.txt", TOPO)]))
    assert _said(two.warnings, "two.tar.gz: 2 files not listed in the manifest were read as plain evidence"), two.warnings


def test_redaction_summary_counts_binary_items_in_words() -> None:
    assert RedactionReport(unscanned=["a.bin"]).summary().endswith(
        "; 1 binary item could not be searched and was left out")
    assert RedactionReport(unscanned=["a.bin", "b.bin"]).summary().endswith(
        "; 2 binary items could not be searched and were left out")


def test_dropped_bytes_and_long_lines_one_and_several() -> None:
    def notes(nuls: int, controls: int, long_lines: int) -> list[str]:
        evidence = Evidence(name="console.txt", data=b"")
        evidence._note_reading(nuls, controls, long_lines, 1 << 20)
        return evidence.notes

    assert notes(1, 0, 0) == ["1 NUL byte in console.txt was dropped (padding from a crash or a serial console?); "
                              "the text around it was read"]
    assert notes(0, 1, 0)[0].startswith("1 other control byte in console.txt was dropped")
    assert notes(2, 1, 0)[0].startswith("2 NUL bytes and 1 other control byte in console.txt were dropped")
    assert notes(0, 0, 1) == ["1 line of console.txt was longer than 1 MiB; only its first 1 MiB was read"]
    assert notes(0, 0, 3) == ["3 lines of console.txt were longer than 1 MiB; only the first 1 MiB of each was read"]
