"""Random and mutated archives: reading either works or raises BundleError, never anything else."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3diag.bundle import BundleError, BundleLimits, looks_like_bundle, read_bundle, write_bundle
from k3diag.evidence import Evidence

REPO = Path(__file__).resolve().parents[2]
LIMITS = BundleLimits(max_members=50, max_member_bytes=1 << 20, max_total_bytes=4 << 20,
                      ratio_check_after_bytes=1 << 20)


def _valid_archive() -> bytes:
    buffer = io.BytesIO()
    topo = (REPO / "fixtures" / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt").read_bytes()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in (("b/manifest.json", b'{"schema": "k3diag.bundle/1", "evidence": []}'),
                           ("b/evidence/topo.txt", topo)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


VALID = _valid_archive()


def _read(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.tar.gz"
    path.write_bytes(data)
    looks_like_bundle(path)
    try:
        bundle = read_bundle(path, LIMITS)
    except BundleError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(bundle.warnings, list)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=4096))
def test_random_bytes(tmp_path: Path, data: bytes) -> None:
    _read(tmp_path, data)
    _read(tmp_path, gzip.compress(data, mtime=0))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=12),
       st.booleans(), st.integers(0, len(VALID)))
def test_mutated_archives(tmp_path: Path, flips: list[tuple[int, int]], compress: bool, cut: int) -> None:
    data = bytearray(VALID)
    for position, value in flips:
        data[position] = value
    mutated = bytes(data[: max(cut, 1)])
    _read(tmp_path, gzip.compress(mutated, mtime=0) if compress else mutated)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(min_size=1, max_size=40), st.binary(max_size=200)), max_size=6))
def test_any_evidence_round_trips(tmp_path: Path, items: list[tuple[str, bytes]]) -> None:
    evidence = [Evidence(name=name, data=data) for name, data in items]
    out = tmp_path / "rt.tar.gz"
    if out.exists():
        out.unlink()
    write_bundle(evidence, {"host": "x"}, out)
    bundle = read_bundle(out)
    assert [e.data for e in bundle.evidence] == [data for _, data in items]
