"""The bytes fast path and the process-pool split give exactly what the per-line path gives: on every
real log, on generated logs with whole rank blocks and with ranks interleaved, and on real logs
repeated and interleaved so that the fast path's blocks and the cuts between parts fall inside them."""

from __future__ import annotations

import importlib.util
import random
import re
from pathlib import Path

import pytest
from nccl_equivalence import canon as _canon
from nccl_equivalence import exact as exact_of_text
from nccl_fixtures import FIXTURES as FIXTURE_DIR
from nccl_fixtures import fixture_path

from k3diag.parse.nccl import parse_bytes, pool

REPO = FIXTURE_DIR.parent
FIXTURES = sorted((FIXTURE_DIR / "nccl").glob("*.log"))


def _exact(path: Path, facts_once: bool = True) -> str:
    return exact_of_text(path.read_text(encoding="utf-8", errors="replace"), str(path), every_line=not facts_once)


def _assert_same(path: Path, workers=(1, 2, 3)) -> None:
    exact = _exact(path)
    # a log-wide fact read once per host and text gives what reading each such line gives
    assert _exact(path, facts_once=False) == exact, path.name
    for count in workers:
        assert _canon(pool.parse_file(path, str(path), workers=count)) == exact, (path.name, count)
    assert _canon(parse_bytes(path.read_bytes(), str(path))) == exact


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_real_log_reads_the_same_on_every_path(path: Path) -> None:
    _assert_same(path)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_nccl_log", REPO / "benchmarks" / "bench_nccl_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("interleave", [False, True], ids=["rank-blocks", "interleaved"])
def test_generated_logs_read_the_same(tmp_path: Path, interleave: bool) -> None:
    path = tmp_path / "g.log"
    info = _bench().generate(path, 1.5, nodes=4, coll_per_rank=3, interleave=interleave)
    _assert_same(path, workers=(1, 2, 4))
    result = pool.parse_file(path, "g.log", workers=2)
    # bounded by design: K runs in full, the rest counted, every connection line accounted for
    counted = sum(sum(r.transport_counts().values()) for r in result.runs) + \
        sum(result.summary.to_json()["summarized_transport_counts"].values())
    assert counted == info["via_lines"]


def test_real_logs_repeated_and_interleaved(tmp_path: Path) -> None:
    """Real lines, shuffled between ranks the way a merged stdout mixes them, and whole blocks."""
    rng = random.Random(5)
    names = ["nccl-2.2x-2nodes-init-start.log", "nccl-2.19-64ranks-init-complete.log",
             "nccl-2.2x-h20-2nodes-cumem-ib-gdrdma.log", "rccl-mi50-comm-nranks-trees-busid.log",
             "nccl-2.7-busid-direct-shared-memory.log"]
    pieces: list[str] = []
    for name in names:
        lines = fixture_path("nccl", name).read_text(encoding="utf-8").splitlines()
        pieces.extend(lines)  # whole, in order
        mixed = list(lines)
        for _ in range(len(mixed) // 3):  # then neighbouring lines swapped
            i = rng.randrange(len(mixed) - 1)
            mixed[i], mixed[i + 1] = mixed[i + 1], mixed[i]
        pieces.extend(mixed)
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(pieces * 3) + "\n", encoding="utf-8")
    _assert_same(path, workers=(1, 2, 3, 5))


@pytest.mark.parametrize("interleave", [False, True], ids=["rank-blocks", "interleaved"])
def test_threads_forgotten_under_the_bound_change_nothing(tmp_path: Path, monkeypatch, interleave: bool) -> None:
    """Past MAX_THREADS, idle threads are dropped (a cut part keeps what the merge needs of them); a
    forgotten thread's prefix leads to a new thread, never back to the forgotten one."""
    from k3diag.parse.nccl import patterns

    path = tmp_path / "many-threads.log"
    _bench().generate(path, 2, nodes=4, coll_per_rank=2, interleave=interleave)
    reference = _exact(path)
    monkeypatch.setattr(patterns, "MAX_THREADS", 48)
    assert _exact(path) == reference
    for count in (1, 2, 3):
        assert _canon(pool.parse_file(path, str(path), workers=count)) == reference, count


def test_a_cut_part_keeps_no_thread_per_process_it_saw(tmp_path: Path) -> None:
    """A thread that never prints a comm line (each process's main thread: `cudaDriverVersion`,
    `Bootstrap`) leaves an empty open head in a cut part; those are let go, so the state a part sends
    to the merge does not grow with the number of jobs in the log (it did: 17,000 threads at 300 MiB)."""
    path = tmp_path / "jobs.log"
    info = _bench().generate(path, 6, nodes=4, coll_per_rank=2, interleave=False)
    size = path.stat().st_size
    cut = pool._cut_points(path, size, 2)[1]
    part = pool._parse_part(str(path), "jobs.log", cut, size, True)
    processes = info["jobs"] * info["ranks_per_job"] // 2  # the processes that ran in the second half
    assert processes > 300 and len(part.threads) < 64, (processes, len(part.threads))
    assert _canon(pool.parse_file(path, str(path), workers=2)) == _exact(path)


_COLOURED_WORDS = re.compile(r"(GPU/[0-9A-Fa-f-]+|NET/[0-9A-Fa-f-]+|\bvia\b|NCCL INFO|NCCL WARN|P2P/\S+|Init COMPLETE)")


@pytest.mark.parametrize("name", ["nccl-2.2x-8x4090-graph-gpu-paths-two-sockets.log", "nccl-2.12-2nodes-ipc-read-ib-gdrdma.log",
                                  "nccl-2.2x-h100-graph-net-paths-new-format.log"])
def test_colour_codes_around_single_words_change_nothing(tmp_path: Path, name: str) -> None:
    """A real log saved from a coloured terminal (`grep --color=always`, a launcher colouring words):
    the codes around single words hid them from every pattern (8 GPUs and 22 paths read as none). Both
    paths read it as the plain log, and the evidence quotes the lines without the codes."""
    clean_path = fixture_path("nccl", name)
    clean = clean_path.read_text(encoding="utf-8")
    coloured = "\x1b]0;user@host: ~\x07" + _COLOURED_WORDS.sub("\x1b[01;31m\x1b[K\\1\x1b[m\x1b[K", clean)
    assert coloured.count("\x1b[01;31m") > 20
    path = tmp_path / name
    path.write_text(coloured, encoding="utf-8")
    expected = _exact(clean_path)
    assert exact_of_text(coloured, str(clean_path)) == expected
    assert _canon(parse_bytes(coloured.encode("utf-8"), str(clean_path))) == expected
    for workers in (1, 2):
        assert _canon(pool.parse_file(path, str(clean_path), workers=workers)) == expected
    assert "\x1b" not in expected
