"""What a demanding user throws at the CLI: files saved on Windows, pipes in folders, links to nowhere,
typos in options, output paths that cannot be written. Each gets one sentence and a documented exit
code (0 ok, 1 warnings, 2 failures/usage, 3 nothing analyzable), never a traceback or a hang.

The Windows inputs are derived at test time from real fixtures: the same bytes re-encoded the way
Windows PowerShell 5.1 saves `>` redirections (UTF-16 LE with a byte order mark, CRLF) and Notepad
saves UTF-8 (with a byte order mark). The `PS C:\\> ` prompt is as PowerShell prints it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"
NCCL_LOG = REPO / "fixtures" / "nccl" / "nccl-2.20.5-l20-8gpu-p2p-disabled-shm.log"
LLAMA_CONFIG = REPO / "fixtures" / "advise" / "llama-3.x-70b-instruct-config.json"
GOOD_BUNDLE = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"


def _report(args: list[str]) -> tuple[int, dict]:
    result = runner.invoke(app, ["analyze", *args, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, json.loads(result.stdout)


def _topo_text() -> str:
    return TOPO.read_text(encoding="utf-8")


def _assert_topo_parsed(report: dict, path: Path) -> None:
    """The 8x RTX 4090 dual-socket matrix: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1, GPU6 PHB to NIC0."""
    record = next(i for i in report["inputs"] if i["path"] == str(path))
    assert record["format"] == "nvidia-smi-topo-matrix"
    assert record["warnings"] == []
    gpus = {g["index"]: g for g in report["topology"]["gpus"]}
    assert sorted(gpus) == list(range(8))
    assert gpus[0]["numa_node"] == 0 and gpus[0]["cpu_affinity"] == "0-55,112-167"
    assert gpus[7]["numa_node"] == 1 and gpus[7]["cpu_affinity"] == "56-111,168-223"
    paths = {(link["a"], link["b"]): link["path"] for link in report["topology"]["links"]}
    assert paths[("GPU6", "NIC0")] == "PHB"
    assert paths[("GPU0", "GPU4")] == "SYS"
    assert paths[("NIC0", "NIC1")] == "PIX"


# -- files saved on Windows ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, encode",
    [
        ("powershell-utf16le-bom.txt", lambda t: b"\xff\xfe" + t.replace("\n", "\r\n").encode("utf-16-le")),
        ("utf16le-no-bom.txt", lambda t: t.replace("\n", "\r\n").encode("utf-16-le")),
        ("utf16be-bom.txt", lambda t: b"\xfe\xff" + t.encode("utf-16-be")),
        ("notepad-utf8-bom.txt", lambda t: b"\xef\xbb\xbf" + t.encode("utf-8")),
    ],
)
def test_utf16_and_bom_files_are_decoded_and_parsed(tmp_path: Path, name: str, encode) -> None:
    path = tmp_path / name
    path.write_bytes(encode(_topo_text()))
    code, report = _report([str(path)])
    assert code == 0  # every GPU pair is SYS: one advisory design finding, as for the UTF-8 original
    _assert_topo_parsed(report, path)


def test_utf16_line_numbers_match_the_file(tmp_path: Path) -> None:
    path = tmp_path / "topo.txt"
    path.write_bytes(b"\xff\xfe" + _topo_text().replace("\n", "\r\n").encode("utf-16-le"))
    _, report = _report([str(path)])
    cited = [
        evidence
        for finding in report["findings"]
        for evidence in finding.get("evidence", [])
        if evidence.get("input") == str(path) and evidence.get("line") == 8
    ]
    assert cited and cited[0]["text"].startswith("GPU6")  # GPU6's row is line 8, as in the original


def test_powershell_paste_with_prompts(tmp_path: Path) -> None:
    text = "PS C:\\> nvidia-smi.exe topo -m\r\n" + _topo_text().replace("\n", "\r\n") + "PS C:\\> \r\n"
    plain = tmp_path / "ps.txt"
    plain.write_bytes(text.encode("utf-8"))
    utf16 = tmp_path / "ps-utf16.txt"
    utf16.write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    for path in (plain, utf16):
        code, report = _report([str(path)])
        assert code == 0  # all SYS: advisory
        _assert_topo_parsed(report, path)  # the trailing `PS C:\>` is not taken for a matrix row
        record = next(i for i in report["inputs"] if i["path"] == str(path))
        assert record["command"] == "nvidia-smi.exe topo -m"


def test_utf16_nccl_log_is_streamed(tmp_path: Path) -> None:
    path = tmp_path / "nccl.log"
    path.write_bytes(b"\xff\xfe" + NCCL_LOG.read_text(encoding="utf-8").encode("utf-16-le"))
    code, report = _report([str(path)])
    assert report["inputs"][0]["format"] == "nccl-log"
    run = report["nccl_runs"][0]
    assert len(run["ranks"]) == 8
    assert run["transport_counts"] == {"P2P": 0, "SHM": 11, "NET": 0}
    assert code in (1, 2)


def test_nul_bytes_are_still_binary_not_utf16(tmp_path: Path) -> None:
    path = tmp_path / "zeros.bin"
    path.write_bytes(bytes(1 << 16))
    code, report = _report([str(path)])
    assert code == 3
    assert report["inputs"][0]["warnings"] == [
        f"{path} looks like binary data, not the text output of a tool; give the saved text output instead"
    ]


@pytest.mark.parametrize(
    "suffix, compress, kind, unpack",
    [
        (".gz", lambda b: __import__("gzip").compress(b), "gzip-compressed", "gunzip -k"),
        (".xz", lambda b: __import__("lzma").compress(b), "xz-compressed", "unxz -k"),
        (".bz2", lambda b: __import__("bz2").compress(b), "bzip2-compressed", "bunzip2 -k"),
    ],
)
def test_compressed_log_says_how_to_unpack_it(tmp_path: Path, suffix: str, compress, kind: str, unpack: str) -> None:
    path = tmp_path / f"nccl.log{suffix}"
    path.write_bytes(compress(NCCL_LOG.read_bytes()))
    code, report = _report([str(path)])
    assert code == 3
    assert report["inputs"][0]["warnings"] == [
        f"{path} is {kind}; unpack it first (`{unpack} {path}`) and give the unpacked files"
    ]


# -- things that are not plain files --------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_inside_a_folder_is_skipped_not_opened(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    os.mkfifo(folder / "pipe")
    (folder / "topo.txt").write_text(_topo_text())
    outcome: dict = {}

    def analyze() -> None:
        outcome["result"] = _report([str(folder)])

    worker = threading.Thread(target=analyze, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "k3diag opened the FIFO and blocked"
    code, report = outcome["result"]
    assert code == 0  # the matrix was read (all SYS: advisory); the pipe is one note
    warnings = {i["path"]: i["warnings"] for i in report["inputs"]}
    assert warnings[str(folder / "pipe")] == [
        f"{folder / 'pipe'} is not a regular file (a device, socket or pipe) and was skipped"
    ]
    _assert_topo_parsed(report, folder / "topo.txt")


def test_dangling_symlink_says_where_it_points(tmp_path: Path) -> None:
    link = tmp_path / "latest.txt"
    link.symlink_to(tmp_path / "gone" / "topo.txt")
    result = runner.invoke(app, ["analyze", str(link), "--json"])
    assert result.exit_code == 64
    assert result.stderr == (f"k3diag analyze: {link} is a symbolic link to {tmp_path / 'gone' / 'topo.txt'}, "
                             "which does not exist; check the path\n")


def test_dash_reads_standard_input() -> None:
    result = runner.invoke(app, ["analyze", "-", "--json"], input=_topo_text().encode("utf-8"))
    report = json.loads(result.stdout)
    assert result.exit_code == report["exit_code"] == 0  # design properties only: advisory
    assert report["inputs"][0]["path"] == "<stdin>"
    assert report["inputs"][0]["format"] == "nvidia-smi-topo-matrix"
    assert len(report["topology"]["gpus"]) == 8


def test_unreadable_file_in_a_folder_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As root every file is readable, so the refusal is simulated where the file is opened.
    folder = tmp_path / "saved"
    folder.mkdir()
    secret = folder / "secret.txt"
    secret.write_text(_topo_text())
    (folder / "topo.txt").write_text(_topo_text())
    real_open = os.open

    def guarded_open(path, *args, **kwargs):
        if str(path) == str(secret):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    code, report = _report([str(folder)])
    assert code == 0  # all SYS: advisory; the unreadable file is one sentence
    warnings = {i["path"]: i["warnings"] for i in report["inputs"]}
    assert warnings[str(secret)] == [
        f"could not read {secret}: permission denied; check the path and its permissions"
    ]
    _assert_topo_parsed(report, folder / "topo.txt")


# -- advise and audit option typos -------------------------------------------------------------------


def test_advise_reads_a_utf16_config_json(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(b"\xff\xfe" + LLAMA_CONFIG.read_text(encoding="utf-8").encode("utf-16-le"))
    result = runner.invoke(app, ["advise", "--config", str(config), "--gpu", "h100", "--count", "8", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["hardware"]["count"] == 8


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p.write_bytes(bytes(range(256)) * 4), "is not text (a config.json is UTF-8 text); check the path."),
        (lambda p: p.mkdir(), "is a folder, not a config.json file; give the file inside it."),
    ],
)
def test_advise_config_that_is_not_a_config_is_one_sentence(tmp_path: Path, make, expected: str) -> None:
    config = tmp_path / "config.json"
    make(config)
    result = runner.invoke(app, ["advise", "--config", str(config), "--gpu", "h100", "--count", "8"])
    assert result.exit_code == 64
    assert result.output.strip() == f"k3diag advise: {config} {expected}"


def test_audit_unknown_model_is_a_usage_error() -> None:
    result = runner.invoke(app, ["audit", str(GOOD_BUNDLE), "--model", "kimi-k9"])
    assert result.exit_code == 64
    assert result.output.startswith("k3diag audit: unknown model 'kimi-k9'.")
    assert "Known models:" in result.output and "--config" not in result.output


def test_audit_reads_a_spec_saved_as_utf16(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_bytes(b"\xff\xfe" + "[gpu]\r\ncount = 8\r\n".encode("utf-16-le"))
    result = runner.invoke(app, ["audit", str(GOOD_BUNDLE), "--expect", str(spec), "--json"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert "purchase spec: 1 of 1 lines met" in json.dumps(report)


# -- collect: refuse a bad output path before collecting ----------------------------------------------


def _no_collection(*args, **kwargs):
    raise AssertionError("collection started although the bundle could not be written")


@pytest.mark.parametrize("kind", ["parent-is-a-file", "non-empty-folder", "archive-name-is-a-folder"])
def test_collect_checks_the_output_before_collecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    import k3diag.inputs

    monkeypatch.setattr(k3diag.inputs, "load_live_machine", _no_collection)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    if kind == "parent-is-a-file":
        output, expected = blocker / "b.tar.gz", f"could not write {blocker / 'b.tar.gz'}: {blocker} is a file, not a folder"
    elif kind == "non-empty-folder":
        output, expected = tmp_path, f"{tmp_path} already exists and is not an empty folder"
    else:
        output = tmp_path / "b.tar.gz"
        output.mkdir()
        expected = f"{output} is a folder; give a file name for the archive"
    result = runner.invoke(app, ["collect", "-o", str(output)])
    assert result.exit_code == 64  # EX_USAGE: the command line names a place it cannot write
    assert result.output.startswith(f"k3diag collect: {expected}")
    assert "could not write could not write" not in result.output


def test_collect_messages_are_not_rich_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from k3diag.commands.collect import _stderr_console

    _stderr_console().print("  note: `pip install k3diag[amd]` with the amdsmi version matching your ROCm " * 3)
    err = capsys.readouterr().err
    assert "k3diag[amd]" in err  # rich took `[amd]` for a style tag and dropped it
    assert err.count("\n") == 1  # one line, not cut at 80 columns in a log file
