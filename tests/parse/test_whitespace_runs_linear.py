"""A run of blank lines or of blanks costs what its length does, in every format.

A pattern that can begin with `\\s*` (or `\\s+`, `\\W*`) and is searched, rather than matched at a line's start,
is tried from every position of a run of whitespace and runs to the run's end from each: quadratic in the run's
length. `\\s` also matches a newline, so in `(?m)^\\s*X` a run of blank lines is such a run, and a `\\s*=*\\s*`
makes it cubic. 10,000 blank lines in the middle of a vLLM log stalled `analyze` past a minute; 40,000 in a
Markdown file took 51 s. Terminal captures (`script`, `watch`), logs of a loop that prints empty lines, and
fixed-width records padded with blanks hold such runs.

One subprocess reads the first fixture of every format (and of every kind of file no format reads), each with
such runs added in its middle; each case
has its own alarm, so a stall names its fixture instead of hanging the suite."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs as one process: the whole pipeline (read, split, detect, parse, join, analyze, JSON) on each case.
_SCRIPT = r"""
import json, signal, sys, time
from pathlib import Path
from k3diag.evidence import Evidence
from k3diag.join.build import build_machine
from k3diag.analyze.pipeline import analyze_machine
from k3diag.model.shared import reading
from k3diag.render.json_report import build_report, write
import io

class Stalled(Exception):
    pass

def stalled(*_):
    raise Stalled

signal.signal(signal.SIGALRM, stalled)
runs = json.loads(sys.argv[1])
fixtures = Path(sys.argv[2])
skip = (".gz", ".xz", ".bz2", ".tar", ".tgz", ".zst", ".png")
from k3diag.parse.detect import detect
from k3diag.parse.text import normalize
chosen = {}  # the first fixture (by path) of each format, and of none
for path in sorted(p for p in fixtures.rglob("*") if p.is_file() and not p.name.endswith(skip)):
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        continue
    spec = detect(normalize(text))
    chosen.setdefault(spec.name if spec is not None else path.suffix, (path, text))
out = {}
for path, text in chosen.values():
    lines = text.split("\n")
    half = len(lines) // 2
    for label, (unit, times, tail) in runs.items():
        if unit == "inside":  # the blanks in the middle of eight lines (between a key and its value...)
            picks = set(range(0, len(lines), max(1, len(lines) // 8)))
            data = "\n".join(line[:len(line) // 2] + " " * times + line[len(line) // 2:] if number in picks else line
                             for number, line in enumerate(lines)).encode()
        else:
            data = ("\n".join(lines[:half]) + "\n" + unit * times + tail + "\n".join(lines[half:])).encode()
        signal.alarm(8)
        started = time.process_time()
        try:
            machine = build_machine([Evidence(name=path.name, data=data)])
            with reading():
                analysis = analyze_machine(machine)
                write(build_report(machine, analysis.findings, analysis.recommendation, analysis.verdict.to_json(), 0),
                      io.StringIO(), None)
            seconds = time.process_time() - started
            if seconds > 1:  # each case takes at most 0.1 s here
                out[f"{path.relative_to(fixtures)} + {label}"] = f"{seconds:.1f} s"
        except Stalled:
            out[f"{path.relative_to(fixtures)} + {label}"] = "stalled (8 s)"
        finally:
            signal.alarm(0)
print(json.dumps(out))
"""

RUNS = {  # (what repeats, how many times, what follows)
    "20,000 blank lines": ("\n", 20_000, ""),
    "20,000 lines of blanks": ("  \t\n", 20_000, ""),
    "a line of 20,000 blanks": (" ", 20_000, "x\n"),
    "20,000 blanks inside eight lines": ("inside", 20_000, ""),
    "a line of 20,000 `=` then a word": ("=", 20_000, " x\n"),
    "a line of 20,000 `-` then a word": ("-", 20_000, " x\n"),
    "a line of 20,000 digits then a word": ("0", 20_000, "x y z\n"),
}


def test_runs_of_whitespace_cost_their_length_in_every_fixture() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(RUNS), str(REPO / "fixtures")], cwd=REPO,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    slow = json.loads(done.stdout.strip().splitlines()[-1])
    assert slow == {}


# The patterns rewritten so that no two repeats take the same blank, against what they were: the same lines
# match, with the same groups (random lines over the words each pattern cares about, and every fixture's lines).
# (module, attribute, the pattern it was, its flags, words to build lines from)
_REWRITTEN = [
    ("k3diag.parse.lspci_tree", "_TREE_LINE_RE", r"^\s*(?:[-+|\\ ]*)(?:[-+\\]-|-)(?:\[|[0-9a-fA-F]{2}\.[0-7])", 0,
     [" ", "\t", "|", "+", "-", "\\", "[", "0a", ".7", "x"]),
    ("k3diag.parse.lspci_tree", "_TREE_BRANCH_RE", r"^\s*[| ]+[+\\]-", 0, [" ", "\t", "|", "+", "-", "\\", "x"]),
    ("k3diag.parse.serving.summary_text", "_BANNER_RE", r"^\s*(?P<bar>=*)\s*Serving Benchmark Result\s*=*\s*$", 0,
     [" ", "\t", "=", "x", "Serving Benchmark Result"]),
    ("k3diag.parse.nvidia_query", "_MARKDOWN_BREAK_RE", r"\s+\\$", 0, [" ", "\t", "\\", "x"]),
    ("k3diag.parse.nvidia_query", "_KEY_VALUE_RE", r"^(?P<indent>\s*)(?P<key>[^:]*?\S)\s+:\s*(?P<value>.*?)\s*$", 0,
     [" ", "  ", "\t", ":", " : ", "A", "Bus Id", "x", "N/A"]),
    ("k3diag.parse.nvidia_query", "_SECTION_RE", r"^(?P<indent>\s*)(?P<name>[A-Za-z][^:]*?)\s*$", 0,
     [" ", "\t", ":", "A", "Clocks", "x"]),
    ("k3diag.parse.nvidia_topo_matrix", "_LEGEND_ENTRY_RE", r"^\s*(X|[A-Z][A-Z0-9#]*)\s*=\s*(.*?)\s*$", 0,
     [" ", "\t", "=", "X", "NV#", "PIX", "x y"]),
    ("k3diag.parse.nvidia_nvlink", "LINK_STATUS_RE",
     r"^\s*Link\s+(?P<link>\d+)\s*:\s*(?P<value><inactive>|[\d.]+\s*GB/s|.*?)\s*$", re.I,
     [" ", "\t", "Link", "0", ":", "<inactive>", "25.781", "GB/s", "x"]),
    ("k3diag.parse.rocm_bandwidth", "_DEVICE_RE", r"^\s*Device:\s*(?P<id>\d+)\s*,\s*(?P<rest>.*?)\s*$", 0,
     [" ", "\t", "Device:", "1", ",", "GPU", "x"]),
    ("k3diag.parse.rocm_bandwidth", "_KV_RE", r"^\s*Device\s+(?P<key>Type|Name|BDF|UUID):\s*(?P<value>.*?)\s*$", 0,
     [" ", "\t", "Device", "Name:", "gfx942", "x"]),
    ("k3diag.parse.nvidia_fabric", "_KEY_VALUE_RE",
     r"^(?P<indent>\s*)(?P<key>[A-Za-z][^:]*?)\s*:\s*(?P<value>.*?)\s*$", 0, [" ", "\t", ":", "State", "N/A", "x"]),
    ("k3diag.parse.amd_smi_static", "_KV_RE", r"^\s*(?P<key>[A-Z][A-Z0-9_ ]*?)\s*:\s*(?P<value>.*?)\s*$", 0,
     [" ", "\t", ":", "BDF", "MAX_", "x"]),
    ("k3diag.parse.ibv_devinfo", "_KV_RE", r"^\s*(?P<key>[a-z_]+)\s*:\s*(?P<value>.*?)\s*$", 0,
     [" ", "\t", ":", "state", "PORT_ACTIVE", "x"]),
    ("k3diag.parse.ibstat", "_KV_RE", r"^\s*(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*?)\s*$", 0,
     [" ", "\t", ":", "Rate", "Link layer", "x"]),
    ("k3diag.parse.ibstatus", "_KV_RE",
     r"^\s+(?P<key>default gid|base lid|sm lid|state|phys state|rate|link_layer):\s*(?P<value>.*?)\s*$", 0,
     [" ", "\t", "state:", "rate:", "4: ACTIVE", "x"]),
    ("k3diag.parse.serving.trtllm_text", "_TITLE_RE", r"^\s*=\s*(?P<title>[A-Z][A-Z0-9 +/&()-]*?)\s*$", 0,
     [" ", "\t", "=", "PERFORMANCE", "(X)", "x"]),
    ("k3diag.parse.nccl.patterns", "ENV_RE",
     r"^(?P<name>(?:NCCL|RCCL|HSA)_[A-Z0-9_]+) set (?:by environment )?to (?P<value>.*?)\s*$", 0,
     [" ", "\t", "NCCL_IB_HCA set to ", "mlx5", "x"]),
    ("k3diag.parse.nccl.patterns", "TESTS_RANK_RE",
     r"^\s*#?\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+"
     r"(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$", 0,
     [" ", "#  Rank  0 Pid 1 on h device  0 [0x87]", "A100", "x"]),
    ("k3diag.parse.nccl.patterns", "NET_PLUGIN_LOADED_RE",
     r"NET/Plugin\s*:?\s*(?:Loaded net plugin|Plugin loaded)\s*(?P<name>.*)$", 0,
     [" ", "\t", ":", "NET/Plugin", "Loaded net plugin", "x"]),
    ("k3diag.parse.nccl.patterns", "VERSION_RE",
     r"\b(?P<lib>NCCL|RCCL) version\s*:?\s*(?P<ver>\d+\.\d+\.\d+)(?P<extra>[^\s,]*)", 0,
     [" ", ":", "NCCL version", "2.21.5", "+cuda12", ","]),
    ("k3diag.parse.nvbandwidth", "_DEVICE_RE",
     r"^\s*Device (?P<idx>\d+):\s*(?P<name>.*?)(?:\s*\((?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
     r"(?:\.\d)?)\))?\s*$", 0, [" ", "\t", "Device 0:", "H100", "(00000000:1b:00)", "(x)", "x"]),
    ("k3diag.parse.lspci_header", "_SUFFIX_RE", r"\s*\((?:rev [0-9a-fA-F]+|prog-if [^)]*)\)\s*$", 0,
     [" ", "\t", "(rev a1)", "(prog-if 00 [Normal decode])", "x"]),
    ("k3diag.parse.dmesg", "_AER_ERROR_RE",
     r"(?P<driver>\S+) (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: "
     r"severity=(?P<sev>[^,]+),\s*type=(?P<type>[^,]+)", 0,
     [" ", "pcieport", "0000:00:01.0:", " AER:", " PCIe Bus Error: severity=Corrected, type=Physical Layer", "x", "="]),
    ("k3diag.parse.nccl_tests", "_NUM_RE", r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\*?$", 0,
     ["0", "12", ".", "-", "e", "E+", "5", "*", "x"]),
    ("k3diag.parse.lspci_header", "_IDS_RE", r"\s*\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]", 0,
     [" ", "\t", "[10de:2330]", "NVIDIA", "[", "x"]),
    ("k3diag.parse.amd_smi", "_TABLE_RE", r"^\s*(?P<title>[A-Z][A-Z /-]*?)\s+TABLE:\s*$", 0,
     [" ", "\t", "ACCESS", "LINK TYPE", "TABLE:", "-", "x"]),
    ("k3diag.parse.nvidia_nvlink", "LINK_CAPABILITY_RE",
     r"^\s*Link\s+(?P<link>\d+)\s*,\s*(?P<what>[^:]+?)\s*:\s*(?P<value>true|false)\s*$", re.I,
     [" ", "\t", "Link 0", ",", "P2P is supported", ":", "true", "x"]),
]


def _random_lines(words: list[str], rng, count: int = 4000, longest: int = 12) -> list[str]:
    return ["".join(rng.choice(words) for _ in range(rng.randint(0, longest))) for _ in range(count)]


def _fixture_texts(folder: str = "", pattern: str = "*") -> list[str]:
    """The text fixtures under fixtures/`folder` whose names match `pattern`."""
    return [path.read_text(errors="replace") for path in sorted((REPO / "fixtures" / folder).rglob(pattern))
            if path.is_file() and path.suffix in (".txt", ".log", ".md", "")]


def _fixture_lines(folder: str = "", pattern: str = "*") -> list[str]:
    return [line for text in _fixture_texts(folder, pattern) for line in text.split("\n")]


def _groups(match):
    return None if match is None else (match.span(), match.groups())


def test_rewritten_patterns_match_the_lines_they_matched() -> None:
    import importlib
    import random

    rng = random.Random(5)
    fixture_lines = sorted(set(_fixture_lines()))
    for module_name, name, before, flags, words in _REWRITTEN:
        now = getattr(importlib.import_module(module_name), name)
        was = re.compile(before, flags)
        differ = [line for line in _random_lines(words, rng) + fixture_lines
                  if _groups(now.search(line)) != _groups(was.search(line))
                  # one reading given up: a capability line whose words are blanks alone (`Link 0, : true`)
                  and not (name == "LINK_CAPABILITY_RE" and was.search(line).group("what").isspace())]
        assert differ == [], (name, differ[:5])


def test_sniff_searches_find_what_they_found() -> None:
    # The sniffers' `(?m)^\s*X` became `(?m)^[^\S\n]*X`: the same texts are found, now from X's own line.
    from k3diag.parse.serving.summary_text import _banner

    pairs = [(r"(?m)^\s*=*\s*Serving Benchmark Result\s*=*\s*$", "(?m)" + _banner(r"[^\S\n]")),
             (r"(?m)^\s*hca_id:\s*\S+\s*$", r"(?m)^[^\S\n]*hca_id:\s*\S+\s*$"),
             (r"(?m)^\s*CA\s+'[^']+'\s*$", r"(?m)^[^\S\n]*CA\s+'[^']+'\s*$"),
             (r"(?m)^\s*GPU\s+\d+:", r"(?m)^[^\S\n]*GPU\s+\d+:"),
             (r"(?m)^\W*Running \w+_(?:memcpy|copy|latency)\w*\.", r"(?m)^[^\w\n]*Running \w+_(?:memcpy|copy|latency)\w*\.")]
    texts = _fixture_texts()
    texts += ["x\n\n\n  Serving Benchmark Result\n", "==\n\nServing Benchmark Result", "\n \n\thca_id: mlx5_0\n",
              "-- \nRunning host_to_device_memcpy_ce.\n", "a\n\n\nGPU 0: A100\n"]
    for before, now in pairs:
        was, new = re.compile(before), re.compile(now)
        assert [bool(was.search(t)) for t in texts] == [bool(new.search(t)) for t in texts], before


def test_rocm_smi_titles_read_as_they_were() -> None:
    # The title pattern takes its opening bar whole; a line of bars alone is read as a title with no name by
    # `_is_bar`, as the old pattern read it (its opening bar gave the closing one its last `=`).
    import random

    from k3diag.parse import rocm_smi

    was = re.compile(r"^\s*=+\s*(?P<title>[^=]*?)\s*=+\s*$")

    def now(line: str) -> str | None:
        if rocm_smi._is_bar(line):
            return ""
        match = rocm_smi._TITLE_RE.match(line)
        return match.group("title") if match else None

    rng = random.Random(3)
    words = [" ", "\t", "=", "==", "===", "A", "x y", "Weight between two GPUs"]
    lines = _random_lines(words, rng, 30000, 10) + _fixture_lines("amd", "rocm-smi*")
    for line in lines:
        old = was.match(line)
        assert now(line) == (old.group("title") if old else None), repr(line)


def test_p2p_cells_are_the_cells_they_were() -> None:
    # Every value of a matrix row, glued ones included (`1534.171091.36`), as the old pattern found them.
    import random

    from k3diag.parse import p2p_bandwidth

    was = re.compile(r"-?\d+\.\d\d|N/A|-?nan|-?inf", re.IGNORECASE)
    rng = random.Random(9)
    words = ["0", "15", ".", "-", " ", "1534.17", "N/A", "nan", "-inf", "x", "7.0"]
    lines = _random_lines(words, rng, 30000, 14) + _fixture_lines("bench", "p2p*")
    for line in lines:
        now = [(m.span(), m.group()) for m in p2p_bandwidth._CELL_RE.finditer(line)]
        assert now == [(m.span(), m.group()) for m in was.finditer(line)], repr(line)
