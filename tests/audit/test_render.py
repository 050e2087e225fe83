"""Markdown, JSON, terminal and HTML renderings; everything from the bundle is escaped."""

from __future__ import annotations

import io
import json
import re

from k3diag.analyze.engine import run_rules
from k3diag.audit.checklist import audit_machine
from k3diag.audit.drawing import drawing_data
from k3diag.audit.html import render_html
from k3diag.audit.markdown import render_markdown
from k3diag.audit.spec import parse_spec
from k3diag.audit.svg import render_svg
from k3diag.audit.terminal import render_plain, render_terminal
from k3diag.model.machine import InputRecord, Machine
from k3diag.model.source import SourceRef

HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&|`'


def _report(machine: Machine, **kwargs):
    return audit_machine(machine, run_rules(machine), [], kwargs.pop("source", "quote-4711.tar.gz"), **kwargs)


def _hostile_machine(kit) -> Machine:
    machine = kit.bad()
    machine.gpus[0].name = HOSTILE
    machine.gpus[2].pcie.source = SourceRef(f"evil{HOSTILE}.txt", 1, HOSTILE)
    machine.inputs.append(InputRecord(path="notes.txt", format="unknown", warnings=[HOSTILE]))
    machine.nic("NIC0").device = HOSTILE
    return machine


def test_html_is_self_contained_and_escapes_everything(kit) -> None:
    machine = _hostile_machine(kit)
    report = _report(machine, source=f"q{HOSTILE}.tar.gz", manifest={"host": {"hostname": HOSTILE}},
                     spec=parse_spec('[gpu]\nmodel = "H100"'), spec_path="spec.toml")
    page = render_html(report)
    lowered = page.lower()
    # the tags survive only as text (`&lt;img ... onerror=...&gt;` is harmless), never as markup
    assert "<script" not in lowered and "<img" not in lowered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    # nothing fetched from anywhere: no URLs but the SVG namespace
    urls = set(re.findall(r"(?:https?:)?//[\w.-]+", page))
    assert urls <= {"http://www.w3.org"}
    assert "<svg" in page and "GPU2" in page
    assert page.count('class="q"') == 12


def test_svg_from_numa_groups_and_from_the_pcie_tree(kit) -> None:
    numa = drawing_data(kit.bad())
    assert numa["source"] == "mixed"  # GPU2 and GPU3 are in the lspci tree, the rest come from NUMA nodes
    assert {n["id"] for n in numa["nodes"] if n["kind"] == "gpu"} == {f"GPU{i}" for i in range(8)}
    # NIC0 (eno1) has neither a NUMA node nor a path to a GPU in the evidence
    assert [s["label"] for s in numa["sockets"]] == ["CPU socket 0", "CPU socket 1", "CPU / NUMA node unknown"]
    gpu2 = next(n for n in numa["nodes"] if n["id"] == "GPU2")
    assert gpu2["state"] == "downgraded" and gpu2["sub"] == "x8 Gen4 (of x16)"
    assert numa["crossing"]["pairs"] == 16

    machine = kit.build_machine(count=4, path_of=lambda i, j: "PXB")
    kit.add_bridge(machine, "0000:15:01.0", True, [0, 1], "PLX Technology, Inc. PEX 8747 48-Lane PCI Express Gen 3")
    kit.add_bridge(machine, "0000:95:01.0", False, [2, 3], "PLX Technology, Inc. PEX 8747 48-Lane PCI Express Gen 3")
    tree = drawing_data(machine)
    assert tree["source"] == "pcie-tree"
    edges = {(e["from"], e["to"]): e["state"] for e in tree["edges"]}
    assert edges[("0000:15:01.0", "GPU0")] == "acs" and edges[("0000:95:01.0", "GPU2")] == "ok"
    svg = render_svg(tree)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert 'stroke="#c62828"' in svg  # the ACS edge is drawn red
    assert "drawn from the PCIe tree" in svg


def test_empty_drawing_says_so() -> None:
    assert "No GPU topology" in render_svg(drawing_data(Machine()))


def test_markdown_has_every_question_and_fences_hostile_text(kit) -> None:
    report = _report(_hostile_machine(kit))
    text = render_markdown(report)
    assert text.startswith("# Vendor audit: `quote-4711.tar.gz`")
    assert text.count("\n## ") == 13  # twelve questions and the warnings
    # Rendered by a CommonMark renderer, the hostile text is text: no element comes from it.
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    assert "| 1 | **FAIL** | Does every GPU run at PCIe x16 with all cards installed? |" in text
    # English by default; the seed's Chinese wording only with lang="zh"
    assert "每張" not in text
    assert "> 每張 GPU 實際運行在 PCIe x16 還是 x8" in render_markdown(report, lang="zh")
    # pipes from the bundle cannot break the table
    table_rows = [line for line in text.splitlines() if line.startswith("| ") and "**" in line]
    assert all(row.count(" | ") >= 3 for row in table_rows)


def test_json_report_shape(kit) -> None:
    report = _report(kit.good(), spec=parse_spec("[gpu]\ncount = 8"), spec_path="spec.toml")
    data = json.loads(json.dumps(report.to_json()))
    assert data["schema"] == "k3diag.audit/1"
    assert data["verdict"] == "WARN" and data["exit_code"] == 1
    assert [a["id"] for a in data["answers"]][:3] == ["pcie-x16", "cpu-numa", "path-classes"]
    assert data["counts"] == {"PASS": 9, "WARN": 1, "FAIL": 0, "UNKNOWN": 2}  # tp2-tp4-measured: no results
    assert data["spec"]["checks"][0] == {"item": "gpu.count", "expected": "8", "actual": "8", "verdict": "PASS",
                                         "evidence": data["spec"]["checks"][0]["evidence"], "request": None}
    first = data["answers"][0]
    assert set(first) == {"id", "question", "seed", "verdict", "summary", "details", "evidence", "request", "findings",
                          "data"}


def test_terminal_plain_when_piped_and_no_color(kit, monkeypatch) -> None:
    report = _report(kit.bad())
    stream = io.StringIO()
    render_terminal(report, stream)
    out = stream.getvalue()
    assert "\x1b[" not in out
    assert out.splitlines()[1].startswith("FAIL: 1 pass")
    assert " 1. [FAIL] Does every GPU run at PCIe x16 with all cards installed?" in out

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    monkeypatch.setenv("NO_COLOR", "1")
    render_terminal(report, tty)
    assert "\x1b[" not in tty.getvalue()
    monkeypatch.delenv("NO_COLOR")
    tty = Tty()
    render_terminal(report, tty)
    assert "\x1b[" in tty.getvalue() and "Vendor audit" in tty.getvalue()
    assert render_plain(report, verbose=False).count("\n") < out.count("\n")
