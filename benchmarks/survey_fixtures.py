"""Every fixture through the whole pipeline (read, parse, join, analyze, JSON, terminal) under mutations that
damaged pastes show: what raised, what a parser failed on, what was slow, and prose that says "None".

Not a test (it takes minutes and its cases are random); it is how this session's robustness fixes were found
(docs/performance.md, 2026-12-04). Run it from the repository root:

    python benchmarks/survey_fixtures.py numbers 7777...      # each of the first six numbers of a text fixture
    python benchmarks/survey_fixtures.py tails                # a tail on each line that breaks `$`-anchored patterns
    python benchmarks/survey_fixtures.py junk --seed 4        # also cut, dupline, dropline, swap, twice, wrap80
    python benchmarks/survey_fixtures.py jsontypes --seed 1   # a JSON value replaced by one of another type
    python benchmarks/survey_fixtures.py blanks               # runs of blanks, of `=`, `-` and digits (quadratic patterns)
    python benchmarks/survey_fixtures.py grow --size 250000   # grown 1x and 4x: what grows worse than linearly

Each case runs under a 20-second alarm and the process under a 6 GiB address-space limit, so a case that
backtracks or allocates without bound is reported rather than stalling or killing the machine.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from k3diag.analyze.pipeline import analyze_machine  # noqa: E402
from k3diag.evidence import Evidence  # noqa: E402
from k3diag.join.build import build_machine  # noqa: E402
from k3diag.model.shared import reading  # noqa: E402
from k3diag.render.json_report import build_report, write  # noqa: E402
from k3diag.render.terminal import make_console, render  # noqa: E402

FIXTURES = REPO / "fixtures"
BINARY = (".gz", ".xz", ".bz2", ".tar", ".tgz", ".zst", ".png")
NUMBER = re.compile(r"(?<![\w.])\d+(?![\w])")
TAILS = (" !", "!", " 12.34.56.78.90.12.34.56.78.90.12.34 x",
         "\t\t 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 x")
JUNK = "\x1b[31m\x00\ufffd]]8;;x\x07"
OTHER_TYPES = (None, "x", 1.5, [], {}, True, -1, "", [1, 2], {"a": 1}, 10**30)
SLOW_SECONDS = 0.5


class Stalled(Exception):
    pass


def _stalled(*_: object) -> None:
    raise Stalled


def whole_pipeline(data: bytes, name: str) -> tuple[list[str], str]:
    """The parser failures and the text a user would read (both terminal views and the JSON, checked)."""
    machine = build_machine([Evidence(name=name, data=data)])
    failed = [w for record in machine.inputs for w in record.warnings if "parser failed" in w]
    with reading():
        analysis = analyze_machine(machine)
        out = io.StringIO()
        write(build_report(machine, analysis.findings, analysis.recommendation, analysis.verdict.to_json(), 0),
              out, None)
        json.loads(out.getvalue())
        shown = []
        for details in (False, True):
            view = io.StringIO()
            render(analysis, make_console(view), "k3diag", details=details)
            shown.append(view.getvalue())
    return failed, "\n".join(shown)


def text_mutants(text: str, mode: str, rng: random.Random, token: str) -> Iterator[tuple[str, str]]:
    lines = text.split("\n")
    n = len(lines)
    if mode == "numbers":
        for found in list(NUMBER.finditer(text))[:6]:
            yield f"number@{found.start()}", text[:found.start()] + token + text[found.end():]
    elif mode == "tails":
        for i in range(0, n, max(1, n // 40)):
            for tail in TAILS:
                yield f"line {i + 1}+{tail!r}", "\n".join(lines[:i] + [lines[i] + tail] + lines[i + 1:])
            yield f"line {i + 1}x4", "\n".join(lines[:i] + [lines[i] * 4 + " ~"] + lines[i + 1:])
    elif mode == "cut":
        for k in range(1, 9):
            yield f"cut@{len(text) * k // 9}", text[:len(text) * k // 9]
    elif mode == "dupline":
        for _ in range(6):
            i = rng.randrange(n)
            yield f"dup {i + 1}", "\n".join(lines[:i + 1] + lines[i:])
    elif mode == "dropline":
        for _ in range(6):
            i = rng.randrange(n)
            yield f"drop {i + 1}", "\n".join(lines[:i] + lines[i + 1:])
    elif mode == "swap":
        for _ in range(6):
            i, j = rng.randrange(n), rng.randrange(n)
            swapped = list(lines)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            yield f"swap {i + 1},{j + 1}", "\n".join(swapped)
    elif mode == "junk":
        for _ in range(4):
            at = rng.randrange(len(text) + 1)
            yield f"junk@{at}", text[:at] + JUNK + text[at:]
    elif mode == "twice":
        yield "twice", text + "\n" + text
    elif mode == "wrap80":
        yield "wrap80", "\n".join(line[i:i + 80] for line in lines for i in range(0, max(len(line), 1), 80))
    elif mode == "blanks":
        # runs of whitespace or of one character: a pattern whose repeats can take the same character (or one
        # searched from every character of a run) is quadratic or worse in them
        half = n // 2
        for label, run in (("20,000 blank lines", "\n" * 20_000), ("20,000 lines of blanks", "  \t\n" * 20_000),
                           ("a line of 20,000 blanks", " " * 20_000 + "x\n"),
                           ("a line of 20,000 tabs", "\t" * 20_000 + "x\n"),
                           ("a line of 20,000 `=`", "=" * 20_000 + " x\n"), ("a line of 20,000 `-`", "-" * 20_000 + " x\n"),
                           ("a line of 20,000 digits", "0" * 20_000 + "x y z\n")):
            yield label, "\n".join(lines[:half]) + "\n" + run + "\n".join(lines[half:])
        picks = set(range(0, n, max(1, n // 8)))
        yield "20,000 blanks inside 8 lines", "\n".join(
            line[:len(line) // 2] + " " * 20_000 + line[len(line) // 2:] if i in picks else line
            for i, line in enumerate(lines))


def grown(text: str, size: int, how: str) -> str:
    """`text` grown to about `size` characters: the whole repeated, or its middle third repeated in place."""
    if how == "whole":
        return text * max(1, size // max(1, len(text)))
    lines = text.split("\n")
    first, last = len(lines) // 3, max(len(lines) // 3 + 1, 2 * len(lines) // 3)
    middle = "\n".join(lines[first:last]) + "\n"
    return "\n".join(lines[:first]) + "\n" + middle * max(1, size // max(1, len(middle))) + "\n".join(lines[last:])


def growth(path: Path, text: str, size: int) -> list[str]:
    """Each way of growing `text`, at `size` and 4 x `size`: what grows worse than linearly (7 x the time for
    4 x the text, past 0.3 s), what stalls or raises."""
    problems = []
    for how in ("middle", "whole"):
        seconds = []
        for scale in (1, 4):
            signal.alarm(60)
            started = time.process_time()
            try:
                whole_pipeline(grown(text, size * scale, how).encode(), path.name)
            except Stalled:
                problems.append(f"{how} x{scale}: stalled over 60 s")
                break
            except BaseException as exc:  # noqa: BLE001
                problems.append(f"{how} x{scale}: raised {type(exc).__name__}: {exc}"[:300])
                break
            finally:
                signal.alarm(0)
            seconds.append(time.process_time() - started)
        if len(seconds) == 2 and seconds[1] > 0.3 and seconds[1] > 7 * max(seconds[0], 1e-3):
            problems.append(f"{how}: {seconds[0]:.2f} s at {size:,} characters, {seconds[1]:.2f} s at {4 * size:,}")
    return problems


def json_mutants(text: str, rng: random.Random) -> Iterator[tuple[str, str]]:
    try:
        document = json.loads(text)
    except ValueError:
        return

    def paths(value: object, path: tuple = ()) -> Iterator[tuple]:
        yield path
        if isinstance(value, dict):
            for key, item in value.items():
                yield from paths(item, path + (key,))
        elif isinstance(value, list):
            for index, item in enumerate(value[:3]):
                yield from paths(item, path + (index,))

    def replaced(value: object, path: tuple, new: object) -> object:
        if not path:
            return new
        value[path[0]] = replaced(value[path[0]], path[1:], new)  # type: ignore[index]
        return value

    found = list(paths(document))
    rng.shuffle(found)
    for path in found[:60]:
        new = rng.choice(OTHER_TYPES)
        yield f"{path}={new!r}", json.dumps(replaced(json.loads(text), path, new), indent=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("numbers", "tails", "cut", "dupline", "dropline", "swap", "junk", "twice",
                                         "wrap80", "jsontypes", "blanks", "grow"))
    parser.add_argument("token", nargs="?", default="7" * 400, help="what `numbers` puts in place of a number")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--only", default="", help="only fixtures whose path holds this")
    parser.add_argument("--size", type=int, default=250_000, help="what `grow` grows each fixture to (and 4 x that)")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    signal.signal(signal.SIGALRM, _stalled)
    rng = random.Random(args.seed)
    cases = problems = 0
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.suffix in BINARY or path.stat().st_size > 2_000_000 or args.only not in str(path):
            continue
        if (args.mode == "jsontypes") != (path.suffix == ".json") or (args.mode == "numbers" and path.suffix == ".json"):
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if args.mode == "grow":
            cases += 1
            for problem in growth(path, text, args.size):
                problems += 1
                print(f"{path.relative_to(FIXTURES)}: {problem}", flush=True)
            continue
        mutants = json_mutants(text, rng) if args.mode == "jsontypes" else text_mutants(text, args.mode, rng, args.token)
        for label, damaged in mutants:
            cases += 1
            problem = None
            started = time.perf_counter()
            signal.alarm(20)
            try:
                failed, shown = whole_pipeline(damaged.encode(), path.name)
                if failed:
                    problem = failed[0]
                elif re.search(r"\bNone\b(?! of)", shown) and "None" not in damaged:
                    problem = "None in prose: " + next(line for line in shown.splitlines() if "None" in line)
            except Stalled:
                problem = "stalled over 20 s"
            except BaseException as exc:  # noqa: BLE001 - what a user would have seen as a traceback
                problem = f"raised {type(exc).__name__}: {exc}"
            finally:
                signal.alarm(0)
            took = time.perf_counter() - started
            if problem is None and took > SLOW_SECONDS:
                problem = f"slow: {took:.2f} s"
            if problem:
                problems += 1
                print(f"{path.relative_to(FIXTURES)} {label}: {problem[:300]}", flush=True)
    print(f"{args.mode}: {cases} cases, {problems} with a problem")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
