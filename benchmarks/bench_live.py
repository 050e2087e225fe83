"""The live check for a GPU host: everything k3diag says about this machine through NVML, compared fact
by fact with what it reads from nvidia-smi's own texts, the timing of `k3diag topo` against
`nvidia-smi topo -m`, `k3diag probe`'s figures against the link class, and the test suite.

    PYTHONPATH=. python3 benchmarks/bench_live.py [--out DIR] [--repeat 5] [--no-tests] [--no-probe]

Writes into DIR (default ./live-check): the nvidia-smi texts, topo.json (live, through NVML),
saved.json (analyze of the saved texts), probe.json, bundle.tar.gz (collect --redact) and
bench_live.log, a copy of everything printed. Exits 1 on any mismatch, 3 when this host has no
NVIDIA GPU, 0 otherwise. Needs no network and nothing beyond what k3diag itself needs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

REPO = Path(__file__).resolve().parent.parent
NVIDIA_SMI_TEXTS: tuple[tuple[str, list[str]], ...] = (
    ("nvidia-smi-topo-m.txt", ["topo", "-m"]),
    ("nvidia-smi-topo-p2p-r.txt", ["topo", "-p2p", "r"]),
    ("nvidia-smi-topo-p2p-w.txt", ["topo", "-p2p", "w"]),
    ("nvidia-smi-topo-p2p-n.txt", ["topo", "-p2p", "n"]),
    ("nvidia-smi-topo-p2p-a.txt", ["topo", "-p2p", "a"]),
    ("nvidia-smi-topo-p2p-p.txt", ["topo", "-p2p", "p"]),
    ("nvidia-smi-q.txt", ["-q"]),
    ("nvidia-smi-query-gpu.csv", ["--query-gpu=index,name,pci.bus_id,uuid,pstate,memory.total,pcie.link.gen.current,"
                                  "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max", "--format=csv"]),
)
GPU_FACTS = ("name", "bus_id", "uuid", "numa_node", "cpu_affinity")
PCIE_FACTS = ("gen_current", "gen_max", "width_current", "width_max")
# An idle GPU retrains its link to Gen1 to save power and back up under load, so two readings a
# second apart can differ without either being wrong: reported, not counted as a mismatch.
VOLATILE_FACTS = frozenset({"pcie.gen_current"})
PINNED_EFFICIENCY = 0.8
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}


class Log:
    """Print to the terminal and to the log file at once."""

    def __init__(self, handle: TextIO) -> None:
        self.handle = handle

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.handle.write(line + "\n")
        self.handle.flush()


def run(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> tuple[int | None, str, str, float]:
    """(exit code or None on timeout, stdout, stderr, seconds); the whole process group dies on timeout."""
    started = time.perf_counter()
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                   text=True, start_new_session=True, env=env)
    except OSError as exc:
        return None, "", f"{argv[0]} could not start: {exc}", 0.0
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return None, out, err + f"\n(stopped after {timeout_s:g} s)", time.perf_counter() - started
    return process.returncode, out, err, time.perf_counter() - started


def _by_gpu(report: dict) -> dict[int, dict]:
    return {gpu["index"]: gpu for gpu in report.get("topology", {}).get("gpus", [])}


def _links(report: dict) -> dict[tuple[str, str], dict]:
    pairs = {}
    for link in report.get("topology", {}).get("links", []):
        a, b = sorted((link["a"], link["b"]))
        if a.startswith("GPU") and b.startswith("GPU"):
            pairs[(a, b)] = link
    return pairs


def _p2p(report: dict) -> dict[tuple[str, str, str], str | None]:
    return {(p["src"], p["dst"], p["capability"]): p["status"] for p in report.get("topology", {}).get("p2p", [])}


def compare_reports(live: dict, saved: dict) -> tuple[list[str], list[str]]:
    """Every GPU fact and pair fact the two reports hold differently: (mismatches, volatile differences).

    `live` is `k3diag topo --json` (NVML), `saved` is `k3diag analyze` of nvidia-smi's texts from
    the same host. A fact one side does not know (null) while the other does is a mismatch too:
    the live path must give what nvidia-smi prints.
    """
    mismatches: list[str] = []
    volatile: list[str] = []

    def differ(what: str, key: str, live_value: Any, saved_value: Any) -> None:
        if live_value == saved_value:
            return
        line = f"{what} {key}: NVML {json.dumps(live_value)}, nvidia-smi {json.dumps(saved_value)}"
        (volatile if key in VOLATILE_FACTS else mismatches).append(line)

    live_gpus, saved_gpus = _by_gpu(live), _by_gpu(saved)
    for index in sorted(set(live_gpus) | set(saved_gpus)):
        a, b = live_gpus.get(index), saved_gpus.get(index)
        if a is None or b is None:
            mismatches.append(f"GPU{index}: only {'nvidia-smi' if a is None else 'NVML'} reports it")
            continue
        for key in GPU_FACTS:
            differ(f"GPU{index}", key, _normal(key, a.get(key)), _normal(key, b.get(key)))
        for key in PCIE_FACTS:
            differ(f"GPU{index}", f"pcie.{key}", (a.get("pcie") or {}).get(key), (b.get("pcie") or {}).get(key))
    live_links, saved_links = _links(live), _links(saved)
    for pair in sorted(set(live_links) | set(saved_links)):
        a, b = live_links.get(pair), saved_links.get(pair)
        for key in ("path", "nvlinks"):
            differ(f"{pair[0]}-{pair[1]}", key, (a or {}).get(key), (b or {}).get(key))
    live_p2p, saved_p2p = _p2p(live), _p2p(saved)
    for key in sorted(set(live_p2p) | set(saved_p2p)):
        differ(f"{key[0]}->{key[1]}", f"p2p {key[2]}", live_p2p.get(key), saved_p2p.get(key))
    return mismatches, volatile


def _normal(key: str, value: Any) -> Any:
    if key == "bus_id" and isinstance(value, str):
        return value.lower()[-12:]  # 00000000:18:00.0 and 0000:18:00.0 are one address
    return value


def probe_lines(probe: dict, live: dict) -> list[str]:
    """Each probed GPU's pinned bandwidth against what its PCIe link class gives."""
    gpus = _by_gpu(live)
    lines = []
    for bench in (b for b in probe.get("benchmarks", []) if b.get("tool") == "k3diag-probe"):
        for gpu in bench["gpus"]:
            pcie = (gpus.get(gpu["index"]) or {}).get("pcie") or {}
            gen, width = pcie.get("gen_max"), pcie.get("width_max")
            expected = PCIE_LANE_GBPS.get(gen, 0) * (width or 0) * PINNED_EFFICIENCY if gen and width else None
            h2d, d2h = gpu.get("host_to_device_gbps"), gpu.get("device_to_host_gbps")
            share = f" ({h2d / expected:.0%} of it)" if expected and h2d else ""
            link = f"Gen{gen} x{width} ~{expected:.0f} GB/s{share}" if expected else "link class unknown"
            lines.append(f"GPU{gpu['index']}: H2D {h2d} GB/s, D2H {d2h} GB/s, data "
                         f"{'intact' if gpu.get('data_ok') else 'NOT intact' if gpu.get('data_ok') is False else 'unchecked'}"
                         f"; {link}")
        for pair in bench["pairs"]:
            lines.append(f"GPU{pair['src']}->GPU{pair['dst']}: peer {pair['peer_enabled_gbps']} GB/s, staged "
                         f"{pair['peer_disabled_gbps']} GB/s, can access {pair['can_access_peer']}")
    return lines


def nvml_unavailable() -> str | None:
    """Why NVML gave no GPU in this process, or None when it did (then `k3diag topo` read it too)."""
    sys.path.insert(0, str(REPO))
    from k3diag.collect.nvml import collect_nvml

    evidence = collect_nvml()
    if evidence.error:
        return evidence.error
    if not json.loads(evidence.data or b"{}").get("devices"):
        return "NVML listed no GPU"
    return None


def median_seconds(argv: list[str], repeat: int, env: dict[str, str]) -> float | None:
    times = []
    for _ in range(repeat):
        code, _, _, seconds = run(argv, timeout_s=120, env=env)
        if code is None:
            return None
        times.append(seconds)
    return statistics.median(times)


def main(argv: list[str] | None = None, which: Callable[[str], str | None] = shutil.which) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("live-check"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--no-probe", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
               NO_COLOR="1")
    k3diag = [sys.executable, "-m", "k3diag"]
    with (args.out / "bench_live.log").open("w") as handle:
        log = Log(handle)
        smi = which("nvidia-smi")
        if smi is None:
            log("nvidia-smi is not on PATH: this is not an NVIDIA GPU host, nothing to check.")
            return 3
        log(f"# k3diag live check, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, python {sys.version.split()[0]}")
        saved: list[str] = []
        for name, smi_args in NVIDIA_SMI_TEXTS:
            code, out, err, seconds = run([smi, *smi_args], timeout_s=60)
            (args.out / name).write_text(out)
            saved.append(str(args.out / name))
            log(f"nvidia-smi {' '.join(smi_args)}: exit {code}, {seconds:.2f} s, {len(out.splitlines())} lines"
                + (f"; stderr: {err.strip()[:200]}" if err.strip() else ""))
        code, out, err, seconds = run([*k3diag, "topo", "--json"], timeout_s=120, env=env)
        (args.out / "topo.json").write_text(out)
        log(f"k3diag topo --json: exit {code}, {seconds:.2f} s" + (f"; stderr: {err.strip()[:500]}" if err.strip() else ""))
        try:
            live = json.loads(out)
        except ValueError:
            log("k3diag topo --json printed no JSON report: that is the first thing to fix.")
            live = {}
        code, out, err, seconds = run([*k3diag, "analyze", *saved, "--json"], timeout_s=120, env=env)
        (args.out / "saved.json").write_text(out)
        log(f"k3diag analyze (saved nvidia-smi texts) --json: exit {code}, {seconds:.2f} s")
        try:
            from_texts = json.loads(out)
        except ValueError:
            log("k3diag analyze printed no JSON report.")
            from_texts = {}
        for finding in live.get("findings", []):
            log(f"  live finding {finding['severity']} {finding['id']}: {finding['title']}")
        mismatches, volatile = compare_reports(live, from_texts)
        nvml_problem = nvml_unavailable()
        if nvml_problem:
            mismatches.insert(0, f"the live report did not come from NVML ({nvml_problem}), so this compares "
                                 "nvidia-smi with itself")
        log(f"\n## NVML against nvidia-smi: {len(live.get('topology', {}).get('gpus', []))} GPU(s), "
            f"{len(mismatches)} mismatch(es)")
        for line in mismatches:
            log(f"MISMATCH {line}")
        for line in volatile:
            log(f"differs (volatile, not counted) {line}")
        topo_s = median_seconds([*k3diag, "topo", "--json"], args.repeat, env)
        smi_s = median_seconds([smi, "topo", "-m"], args.repeat, env)
        if topo_s and smi_s:
            log(f"\n## timing, median of {args.repeat}: k3diag topo {topo_s:.3f} s, nvidia-smi topo -m {smi_s:.3f} s, "
                f"ratio {topo_s / smi_s:.2f}")
        code, out, err, seconds = run([*k3diag, "collect", "-o", str(args.out / "bundle.tar.gz"), "--redact"],
                                      timeout_s=300, env=env)
        log(f"\nk3diag collect --redact: exit {code}, {seconds:.1f} s" + (f"; {err.strip()[-300:]}" if err.strip() else ""))
        if not args.no_probe:
            code, out, err, seconds = run([*k3diag, "probe", "--json"], timeout_s=200, env=env)
            (args.out / "probe.json").write_text(out)
            log(f"\n## k3diag probe --json: exit {code}, {seconds:.1f} s" + (f"; {err.strip()[:300]}" if err.strip() else ""))
            try:
                for line in probe_lines(json.loads(out), live):
                    log(f"  {line}")
            except ValueError:
                log("  k3diag probe printed no JSON report")
        if not args.no_tests:
            code, out, err, seconds = run([sys.executable, "-m", "pytest", "tests", "-x", "-q", "-p", "no:cacheprovider"],
                                          timeout_s=900, env=dict(env, PYTHONPATH=env["PYTHONPATH"]))
            log(f"\n## pytest tests -x -q: exit {code}, {seconds:.0f} s")
            for line in (out + err).strip().splitlines()[-15:]:
                log(f"  {line}")
        return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
