"""Section splitting finds start lines through literals (`FormatSpec.start`): a literal missing from a
real start line would silently stop that output from being cut out of a pasted file."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3diag.parse.detect import MAX_START_LINE_CHARS, split_sections
from k3diag.parse.registry import FORMATS, parser_module
from k3diag.parse.text import Section, normalize

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TEXT_FIXTURES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".txt", ".log", ".xml", ".csv", ""))


def _start_formats():
    for spec in FORMATS:
        module = parser_module(spec)
        pattern = getattr(module, "START_RE", None) if module is not None else None
        if pattern is not None:
            yield spec, pattern


def test_every_format_with_a_start_pattern_declares_its_literals() -> None:
    missing = [spec.name for spec, _ in _start_formats() if not spec.start]
    assert missing == []


def test_every_format_has_a_hint() -> None:
    assert [spec.name for spec in FORMATS if not spec.hint] == []


def test_start_lines_in_real_outputs_hold_their_literal() -> None:
    specs = list(_start_formats())
    misses: list[str] = []
    for path in TEXT_FIXTURES:
        try:
            text = normalize(path.read_text(errors="replace"))
        except OSError:
            continue
        for number, line in enumerate(text.split("\n"), 1):
            if len(line) > MAX_START_LINE_CHARS:
                continue
            for spec, pattern in specs:
                if pattern.match(line) and not any(literal in line for literal in spec.start):
                    misses.append(f"{path.relative_to(FIXTURES)}:{number} ({spec.name}): {line[:80]}")
    assert misses == []


def test_outputs_pasted_one_after_another_are_cut_apart() -> None:
    topo = (FIXTURES / "nvidia" / "topo-m-4x4090-phb-trailing-prompt.txt").read_text()
    csv = "index, name, pci.bus_id\n0, NVIDIA GeForce RTX 4090, 00000000:01:00.0\n"
    sections = split_sections(normalize(topo.rstrip("\n") + "\n" + csv))
    assert any(section.text.startswith("index, name") for section in sections)
    csv_section = next(section for section in sections if section.text.startswith("index, name"))
    # line numbers count from the top of the whole file
    assert csv_section.first_line == normalize(topo.rstrip("\n")).count("\n") + 2


def test_a_prompt_names_the_host_of_what_follows() -> None:
    text = "user@gpu-node-7:~$ nvidia-smi topo -m\n" + (FIXTURES / "nvidia" / "topo-m-4x4090-phb-trailing-prompt.txt").read_text()
    sections = split_sections(normalize(text))
    assert sections[0].host == "gpu-node-7"
    assert sections[0].command == "nvidia-smi topo -m"


@pytest.mark.parametrize("size", [5_000_000])
def test_a_huge_single_line_is_one_section(size: int) -> None:
    text = ("GPU0 $ # > , name @ " * (size // 20))
    sections = split_sections(text)
    assert len(sections) == 1 and sections[0] == Section(text=text, first_line=1)


@pytest.mark.parametrize("fixture, fmt", [
    ("pcie/dmesg-xid79-pid-unknown-gpu-at-h800-blog.txt", "dmesg"),
    ("nvidia/topo-m-2gpu-nv2-numa-na.txt", "nvidia-smi-topo-matrix"),
])
def test_a_line_longer_than_the_sniff_window_does_not_hide_the_output_after_it(fixture: str, fmt: str) -> None:
    # a launcher's 70 KB environment dump, then the output: the sniffer saw only `xxxx...` and the whole
    # file was "format not recognized" (an Xid 79 lost)
    from k3diag.parse.detect import SNIFF_CHARS, detect

    body = normalize((FIXTURES / fixture).read_text())
    text = "x" * (SNIFF_CHARS + 5000) + "\n" + body
    found = detect(text)
    assert found is not None and found.name == fmt, found
    assert detect("x" * (SNIFF_CHARS + 5000)) is None  # one long line alone is still nothing


def test_once_a_sniffer_is_certain_the_hints_after_it_are_not_searched(monkeypatch) -> None:
    # every format's hint was searched before any sniffer ran: ~4 ms over an `nvidia-smi -q` head, 40% of the
    # time of a file of 1,000 such outputs. The answer is the one the frozen reference gives
    # (test_detect_equivalence); this is what it no longer costs.
    from k3diag.parse import detect as detect_module
    from k3diag.parse.registry import FormatSpec

    text = (FIXTURES / "nvidia" / "smi-q-8xh100-565-multi-gpu-fabric.txt").read_text()
    searched: list[str] = []
    real = FormatSpec.may_match

    def counting(self, text, folded=None):
        searched.append(self.name)
        return real(self, text, folded)

    monkeypatch.setattr(FormatSpec, "may_match", counting)
    detect_module._detect_head.cache_clear()
    assert detect_module.detect(text).name == "nvidia-smi-query"
    names = [spec.name for spec in FORMATS]
    assert searched == names[:names.index("nvidia-smi-query") + 1]
    # a command naming a later format still has it tried: `nvidia-smi -q` output saved by a prompt running lspci
    searched.clear()
    detect_module._detect_head.cache_clear()
    detect_module.detect(text, "lspci -vv")
    assert "lspci-vv" in searched


def test_the_fabric_sniffer_gives_a_whole_nvidia_smi_q_away_before_scanning_its_lines(monkeypatch) -> None:
    # its hint matches every `-q` that has a Fabric block, and it ran three regexes over 3,000 lines before
    # its one search for `Product Name`: ~3 ms of each 8-GPU `-q` in a file of many
    from k3diag.parse import nvidia_fabric

    text = (FIXTURES / "nvidia" / "smi-q-8xh100-565-multi-gpu-fabric.txt").read_text()
    matched: list[str] = []

    class Counting:
        def match(self, line: str):
            matched.append(line)
            return real.match(line)

    real = nvidia_fabric._KEY_VALUE_RE
    monkeypatch.setattr(nvidia_fabric, "_KEY_VALUE_RE", Counting())
    assert nvidia_fabric.sniff(text) == 0.0
    assert matched == []
    # a fabric excerpt (no `Product Name`) is still read as one
    excerpt = "\n".join(line for line in text.split("\n")[:400] if "Product Name" not in line and "Bus Id" not in line
                        and "GPU Link Info" not in line and "FB Memory Usage" not in line)
    assert "Fabric" in excerpt and nvidia_fabric.sniff(excerpt) == 1.0
