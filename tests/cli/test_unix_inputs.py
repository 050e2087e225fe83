"""The command line as a Unix tool: `-`, FIFOs, `/dev/stdin`, process substitution, missing paths (exit 64),
and inputs that lose bytes (NUL padding, OSC titles, overlong lines, deep folders) read or explained.

Stdin and FIFO inputs go through a console script like the one pip installs, run as a real subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"


@pytest.fixture
def k3diag(tmp_path: Path) -> list[str]:
    """A console script written the way pip writes one, running this checkout."""
    script = tmp_path / "bin" / "k3diag"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom k3diag.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return [str(script)]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1")


def _run(argv: list[str], stdin: bytes | None = None, timeout: float = 120, cwd: Path | None = None):
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, env=_env(), cwd=cwd)


def _assert_topo(report: dict, path: str, returncode: int | None = None) -> None:
    if returncode is not None:
        assert returncode == report["exit_code"]
    record = next(i for i in report["inputs"] if i["path"] == path)
    assert record["format"] == "nvidia-smi-topo-matrix"
    assert len(report["topology"]["gpus"]) == 8


def test_dash_reads_a_pipe(k3diag: list[str]) -> None:
    done = _run([*k3diag, "analyze", "-", "--json"], stdin=TOPO.read_bytes())
    assert done.stderr == b""
    _assert_topo(json.loads(done.stdout), "<stdin>", done.returncode)


def test_dev_stdin_reads_a_pipe(k3diag: list[str]) -> None:
    done = _run([*k3diag, "analyze", "/dev/stdin", "--json"], stdin=TOPO.read_bytes())
    assert done.stderr == b""
    _assert_topo(json.loads(done.stdout), "/dev/stdin", done.returncode)


@pytest.mark.skipif(shutil.which("bash") is None, reason="process substitution needs bash")
def test_process_substitution(k3diag: list[str]) -> None:
    command = f"{k3diag[0]} analyze <(cat {TOPO}) --json"
    done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=120, env=_env())
    assert done.stderr == b""
    report = json.loads(done.stdout)
    assert report["inputs"][0]["path"].startswith("/dev/fd/")
    _assert_topo(report, report["inputs"][0]["path"], done.returncode)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_named_fifo_waits_for_its_writer(k3diag: list[str], tmp_path: Path) -> None:
    fifo = tmp_path / "topo.fifo"
    os.mkfifo(fifo)

    def write_later() -> None:
        time.sleep(1.0)  # k3diag is already waiting: a FIFO is read as `cat` would, not taken as empty
        with open(fifo, "wb") as handle:
            handle.write(TOPO.read_bytes())

    writer = threading.Thread(target=write_later, daemon=True)
    writer.start()
    done = _run([*k3diag, "analyze", str(fifo), "--json"], timeout=60)
    writer.join(timeout=10)
    assert done.stderr == b""
    _assert_topo(json.loads(done.stdout), str(fifo), done.returncode)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_named_fifo_whose_writer_came_first_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `mkfifo f; nvidia-smi topo -m > f & k3diag analyze f`: the writer waits in open() for a reader. k3diag's
    # first (non-blocking) open lets it through; a fast writer writes and closes before that descriptor is
    # closed, and its bytes went with it, while a second, blocking open waited for a writer that never came.
    # The window is a few microseconds in a real run; a slow fstat on k3diag's side holds it open here.
    import k3diag.evidence as evidence_module
    from k3diag.evidence import open_input, read_stream

    fifo = tmp_path / "topo.fifo"
    os.mkfifo(fifo)
    wrote = threading.Event()
    real_fstat = os.fstat

    def slow_fstat(fd: int):
        if threading.current_thread() is threading.main_thread():
            wrote.wait(timeout=5)
        return real_fstat(fd)

    def write_now() -> None:
        with open(fifo, "wb", buffering=0) as handle:  # blocks until k3diag opens the FIFO, then writes at once
            handle.write(TOPO.read_bytes())
        wrote.set()

    def rescue() -> None:  # before the fix the reader waits for a second writer: give it an empty one
        time.sleep(8)
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waiting any more

    writer = threading.Thread(target=write_now, daemon=True)
    writer.start()
    time.sleep(0.3)  # the writer is blocked in open()
    threading.Thread(target=rescue, daemon=True).start()
    monkeypatch.setattr(evidence_module.os, "fstat", slow_fstat)
    handle, is_stream = open_input(fifo, allow_stream=True)
    monkeypatch.undo()
    with handle:
        data, cut = read_stream(handle)
    writer.join(timeout=10)
    assert is_stream
    assert (data, cut) == (TOPO.read_bytes(), False)


def test_stdin_over_the_limit_is_cut_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    import k3diag.inputs as inputs

    monkeypatch.setattr(inputs, "MAX_TEXT_BYTES", 4096)
    monkeypatch.setattr("k3diag.evidence.MAX_TEXT_BYTES", 4096)
    data = TOPO.read_bytes() + b"x" * 100_000
    evidence, _ = inputs.evidence_from_paths([Path("-")], stdin=io.BytesIO(data))
    assert len(evidence[0].data) == 4096
    assert len(evidence[0].notes) == 1
    assert evidence[0].notes[0].startswith("only the first ")
    assert "of <stdin> were read (the limit for one input)" in evidence[0].notes[0]


def test_missing_path_beside_a_good_one_is_exit_64_naming_the_full_path(k3diag: list[str], tmp_path: Path) -> None:
    (tmp_path / "topo.txt").write_bytes(TOPO.read_bytes())
    done = _run([*k3diag, "analyze", "topo.txt", "tpoo.txt"], cwd=tmp_path)
    assert done.returncode == 64
    assert done.stdout == b""
    assert done.stderr.decode() == f"k3diag analyze: {tmp_path / 'tpoo.txt'} does not exist; check the path\n"


def test_missing_from_path_in_topo_is_exit_64(k3diag: list[str], tmp_path: Path) -> None:
    done = _run([*k3diag, "topo", "--from", str(tmp_path / "gone")])
    assert done.returncode == 64
    assert f"{tmp_path / 'gone'} does not exist" in done.stderr.decode()


def _analyze_json(paths: list[Path]) -> tuple[int, dict]:
    from typer.testing import CliRunner

    from k3diag.cli import app

    result = CliRunner().invoke(app, ["analyze", *map(str, paths), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, json.loads(result.stdout)


def test_nul_padding_is_dropped_and_counted_not_taken_for_binary(tmp_path: Path) -> None:
    text = TOPO.read_bytes()
    header_end = text.index(b"\n") + 1
    path = tmp_path / "crash-console.txt"
    path.write_bytes(text[:header_end] + b"\x00" * 4096 + text[header_end:] + b"\x00" * 512)
    code, report = _analyze_json([path])
    record = report["inputs"][0]
    assert record["format"] == "nvidia-smi-topo-matrix"
    assert (f"4,608 NUL bytes in {path} were dropped (padding from a crash or a serial console?); the text around "
            "them was read") in record["warnings"]
    assert len(report["topology"]["gpus"]) == 8


def test_osc_title_from_a_script_log_is_stripped_whole(tmp_path: Path) -> None:
    path = tmp_path / "typescript"
    prompt = b"\x1b]0;root@gpu07: ~\x07\x1b[01;32mroot@gpu07\x1b[00m:~# nvidia-smi topo -m\r\n"
    path.write_bytes(prompt + TOPO.read_bytes().replace(b"\n", b"\r\n") + b"\x1b]0;root@gpu07: ~\x1b\\root@gpu07:~# ")
    code, report = _analyze_json([path])
    record = report["inputs"][0]
    assert record["format"] == "nvidia-smi-topo-matrix"
    assert record["command"] == "nvidia-smi topo -m"
    assert len(report["topology"]["gpus"]) == 8


def test_topo_followed_by_a_huge_line_stays_bounded(tmp_path: Path) -> None:
    path = tmp_path / "topo-and-junk.txt"
    with path.open("wb") as handle:
        handle.write(TOPO.read_bytes())
        chunk = b"x" * (1 << 20)
        for _ in range(96):  # a 96 MiB line, past the 64 MiB cut
            handle.write(chunk)
        handle.write(b"\n")
    probe = (
        "import json, resource, sys\n"
        "from pathlib import Path\n"
        "from k3diag.inputs import load_machine\n"
        f"machine, _ = load_machine([Path({str(path)!r})])\n"
        "print(json.dumps({'rss_kib': int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]),"
        " 'gpus': len(machine.gpus), 'warnings': [w for i in machine.inputs for w in i.warnings]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["gpus"] == 8
    assert outcome["rss_kib"] < 400 * 1024, outcome["rss_kib"]  # the cut, not the file, sets the memory
    assert any("1 line of " in w and w.endswith("was longer than 1 MiB; only its first 1 MiB was read")
               for w in outcome["warnings"]), outcome["warnings"]
    assert any("only the first 64 MiB" in w for w in outcome["warnings"])


def test_deep_folders_are_read_to_16_levels_and_the_rest_is_named(tmp_path: Path) -> None:
    root = tmp_path / "saved"
    folder = root
    for level in range(20):
        folder = folder / f"d{level}"
    folder.mkdir(parents=True)
    shallow = root.joinpath(*[f"d{level}" for level in range(10)]) / "topo.txt"
    shallow.write_bytes(TOPO.read_bytes())
    (folder / "lost.txt").write_bytes(TOPO.read_bytes())
    code, report = _analyze_json([root])
    _assert_topo(report, str(shallow))
    skipped = root.joinpath(*[f"d{level}" for level in range(17)])
    warnings = [w for i in report["inputs"] for w in i["warnings"]]
    assert (f"1 folder in {root} nests deeper than 16 levels and was not read: {skipped}; give it as a path "
            "of its own") in warnings


def test_an_empty_folder_is_named_as_empty(tmp_path: Path, k3diag: list[str]) -> None:
    empty = tmp_path / "saved"
    empty.mkdir()
    code, report = _analyze_json([empty])
    assert code == 3
    warnings = [w for i in report["inputs"] for w in i["warnings"]]
    assert f"{empty} holds no file to read" in warnings
    terminal = _run(k3diag + ["analyze", str(empty)])
    assert terminal.returncode == 3 and f"{empty} holds no file to read" in (terminal.stdout + terminal.stderr).decode()
    (empty / ".hidden.txt").write_bytes(TOPO.read_bytes())
    _, report = _analyze_json([empty])
    warnings = [w for i in report["inputs"] for w in i["warnings"]]
    assert f"{empty} holds no file to read besides those named above" in warnings


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_file_swapped_for_a_fifo_or_folder_after_listing_is_a_sentence(tmp_path: Path) -> None:
    from k3diag.evidence import Evidence
    from k3diag.join.build import build_machine
    from k3diag.model.machine import Machine

    fifo = tmp_path / "was-a-file.txt"
    os.mkfifo(fifo)
    folder = tmp_path / "now-a-folder.txt"
    folder.mkdir()
    started = time.monotonic()
    machine = build_machine([Evidence(name=str(fifo), path=fifo, follow_links=False),
                             Evidence(name=str(folder), path=folder, follow_links=False)], Machine())
    assert time.monotonic() - started < 10  # it did not block on the FIFO
    warnings = {record.path: record.warnings for record in machine.inputs}
    assert warnings[str(fifo)] == [f"could not read {fifo}: it is a pipe (FIFO), not a regular file; check the path "
                                   "and its permissions"]
    assert warnings[str(folder)] == [f"could not read {folder}: it is a folder, not a file; check the path and its "
                                     "permissions"]


def test_bundle_with_nothing_analyzable_exits_3(tmp_path: Path) -> None:
    bundle = tmp_path / "empty-bundle"
    (bundle / "evidence").mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({
        "schema": "k3diag.bundle/1", "host": "h",
        "evidence": [{"name": "notes.txt", "member": "evidence/notes.txt", "kind": "file"}],
    }))
    (bundle / "evidence" / "notes.txt").write_text("nothing a tool printed\n")
    code, report = _analyze_json([bundle])
    assert code == 3
    assert report["inputs"][0]["format"] == "bundle"


def test_a_bundle_piped_to_dash_is_read_as_a_bundle(k3diag: list[str], tmp_path: Path) -> None:
    from k3diag.bundle import read_bundle, write_bundle

    source = read_bundle(REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket")
    archive = write_bundle(source.evidence, {"host": "node"}, tmp_path / "node.tar.gz")
    done = _run([*k3diag, "analyze", "-", "--json"], stdin=archive.read_bytes())
    report = json.loads(done.stdout)
    assert done.returncode == report["exit_code"], done.stderr
    formats = {i["path"]: i["format"] for i in report["inputs"]}
    assert formats["<stdin>"] == "bundle"
    assert formats["<stdin>:evidence/nvml-readings.json"] == "nvml-readings"
    assert formats["<stdin>:evidence/lspci-vvv.txt"] == "lspci-vv"
    # The same story as the archive read from its path.
    by_path = json.loads(_run([*k3diag, "analyze", str(archive), "--json"]).stdout)
    assert report["verdict"] == by_path["verdict"]
    assert [f["id"] for f in report["findings"]] == [f["id"] for f in by_path["findings"]]
