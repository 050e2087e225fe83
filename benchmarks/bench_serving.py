"""Time of the vLLM serving-result reader against plain `json.loads`, on generated result files.

    python benchmarks/bench_serving.py                    # 10,000 --append-result lines (the reader keeps at most 10,000)
    python benchmarks/bench_serving.py --lines 2000
    python benchmarks/bench_serving.py --detailed 200000  # one --save-detailed result with that many requests

The lines are the real result of `fixtures/serving/vllm-bench-serve-qwen3vl-8b-1qps.json`, repeated as
`--append-result` writes them (one object per line). Reported in one run, on the same text: the best of
`--repeat` runs of `json.loads` on every line (the floor: decoding alone), of
`k3diag.parse.serving.vllm_bench.parse` (finding the objects, decoding, records), and their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from k3diag.parse.serving import vllm_bench  # noqa: E402
from k3diag.parse.text import Section  # noqa: E402

TEMPLATE = REPO / "fixtures" / "serving" / "vllm-bench-serve-qwen3vl-8b-1qps.json"


def generate(lines: int, detailed: int) -> str:
    doc = json.loads(TEMPLATE.read_text())
    if detailed:
        doc.update({"ttfts": [0.095] * detailed, "latencies": [3.6] * detailed, "output_lens": [128] * detailed,
                    "itls": [[0.027] * 8] * detailed})
        return json.dumps(doc)
    return "\n".join(json.dumps(doc) for _ in range(lines))


def best_of(repeat: int, work) -> tuple[float, int]:
    best, result = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--detailed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    text = generate(args.lines, args.detailed)
    floor, count = best_of(args.repeat, lambda: sum(1 for line in text.split("\n") if json.loads(line)))
    if args.detailed:
        # the floor for one detailed result: decoding it and sorting its per-request values once
        floor, count = best_of(args.repeat, lambda: len([sorted(json.loads(text)["ttfts"])]))
    section = Section(text=text, first_line=1, command=None)
    parse, runs = best_of(args.repeat, lambda: len(vllm_bench.parse(section, "bench.jsonl").runs))
    assert runs == count, (runs, count)
    print(f"{len(text) / 1e6:.1f} MB, {count} results")
    print(f"json.loads per line: {floor * 1000:.1f} ms")
    print(f"vllm_bench.parse:    {parse * 1000:.1f} ms ({parse / count * 1e6:.1f} us per result)")
    print(f"ratio: {parse / floor:.2f}x")


if __name__ == "__main__":
    main()
