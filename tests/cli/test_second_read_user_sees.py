"""What a second read of the review round's change found: the same situation worded the same way by every
command, and no `None` in quoted evidence."""

from __future__ import annotations

import bz2
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3diag.parse import nvml_readings
from k3diag.parse.text import Section
from tests.cli.test_unsearchable_folder import _without_override

REPO = Path(__file__).resolve().parents[2]
NVML = REPO / "fixtures" / "nvml" / "h100-sxm-8x-nvswitch-gpu3-link-down.json"


def _k3diag(*args: str, prefix: list[str] = ()) -> subprocess.CompletedProcess:
    """The CLI run as a process, after `prefix` (`_without_override()`: root without its right to read any file)."""
    return subprocess.run([*prefix, sys.executable, "-m", "k3diag", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.mark.parametrize("suffix, compress, tool", [(".bz2", bz2.compress, "bzip2"), (".xz", lzma.compress, "xz")])
def test_a_cut_bzip2_or_xz_file_is_called_cut_like_a_gzip_one(tmp_path: Path, suffix: str, compress, tool: str) -> None:
    # Only gzip was tested for a cut stream: a cut .bz2 or .xz was told to be unpacked with a tool that fails.
    whole = compress(os.urandom(20_000))
    cut = tmp_path / f"topo.txt{suffix}"
    cut.write_bytes(whole[:len(whole) // 2])
    out = _k3diag("analyze", str(cut)).stdout
    assert f"{cut} is {tool}-compressed but ends early or is corrupt ({len(whole) // 2} bytes; a cut download " \
        f"or copy?); copy it again, `{tool} -t` checks it" in out, out
    assert "unpack it first" not in out


def test_serving_names_each_unreadable_result_path_on_its_own_line(tmp_path: Path) -> None:
    # serving joined the sentences with "; " on one line, unescaped; analyze gives one line per path
    prefix = _without_override()
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for path in (first, second):
        path.write_text("{}")
        path.chmod(0)
    try:
        result = _k3diag("serving", str(first), str(second), prefix=prefix)
    finally:
        for path in (first, second):
            path.chmod(0o644)
    assert result.returncode == 64, result.stderr
    assert result.stderr.splitlines() == [
        f"k3diag serving: permission denied reading {first}; check its permissions or run as its owner",
        f"k3diag serving: permission denied reading {second}; check its permissions or run as its owner",
    ]


def test_audit_words_an_unreadable_bundle_as_every_command_does(tmp_path: Path) -> None:
    prefix = _without_override()
    bundle = tmp_path / "node.tar.gz"
    bundle.write_bytes(b"")
    bundle.chmod(0)
    try:
        audit = _k3diag("audit", str(bundle), "--model", "k3", prefix=prefix)
        analyze = _k3diag("analyze", str(bundle), prefix=prefix)
    finally:
        bundle.chmod(0o644)
    assert (audit.returncode, analyze.returncode) == (64, 64)
    reason = f"permission denied reading {bundle}; check its permissions or run as its owner"
    assert audit.stderr.strip() == f"k3diag audit: {reason}"
    assert analyze.stderr.strip() == f"k3diag analyze: {reason}"


def test_npd_usage_errors_name_the_command_like_every_other_unknown() -> None:
    # check's own usage errors printed "UNKNOWN --fail-on must be ..." under npd; click's, "UNKNOWN k3diag check: ..."
    own = _k3diag("check", "--format", "npd", "--fail-on", "x")
    refused = _k3diag("check", "--format", "npd", "--bogus")
    assert (own.returncode, refused.returncode) == (2, 2)
    assert own.stdout == "UNKNOWN k3diag check: --fail-on must be one of fail, warn, never, not 'x'\n"
    assert refused.stdout == "UNKNOWN k3diag check: wrong command line (its standard error says why)\n"


def test_nvml_evidence_quotes_the_files_values_not_none() -> None:
    # A damaged width was quoted as "nvmlDeviceGetCurrPcieLinkWidth=None"; a device with no name as "None at None".
    document = json.loads(NVML.read_text())
    document["devices"][2]["pcie"]["width_current"] = -16
    document["devices"][3].pop("name", None)
    document["devices"][3].pop("bus_id", None)
    document["devices"][3].pop("performance_state", None)
    result = nvml_readings.parse(Section(json.dumps(document), 1), "r.json")
    texts = [device.pcie_source.text for device in result.devices] + [device.source.text for device in result.devices]
    assert not [text for text in texts if "None" in text], texts
    assert "nvmlDeviceGetCurrPcieLinkWidth=-16" in result.devices[2].pcie_source.text
    assert result.devices[3].source.text == "NVML device 3"


def test_a_path_that_is_not_there_is_worded_alike_by_every_command(tmp_path: Path) -> None:
    # serving said "... does not exist; check the path." and advise "... does not exist." from checks of their
    # own, before the reading that names such a path anyway
    gone = tmp_path / "gone.txt"
    expected = f"{gone} does not exist; check the path"
    for args, command in ((["analyze", str(gone)], "analyze"), (["serving", str(gone)], "serving"),
                          (["advise", "--model", "k3", "--from", str(gone)], "advise")):
        result = _k3diag(*args)
        assert (result.returncode, result.stderr) == (64, f"k3diag {command}: {expected}\n"), (args, result.stderr)
