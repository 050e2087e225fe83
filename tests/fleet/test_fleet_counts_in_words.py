"""The fleet summary counts in words: '1 node in 1 group', '7 nodes in 2 groups', never 'node(s)'."""

from __future__ import annotations

from k3diag.fleet.render_html import render_html
from k3diag.fleet.render_text import MAX_OUTLIERS_SHOWN, render_markdown, render_text


def _outlier(name: str) -> dict:
    return {"node": name, "differences": [{"feature": "gpu_count", "value": "7", "majority": "8",
                                           "majority_nodes": 1, "evidence": "topo.txt:2: GPU0"}]}


def _report(nodes: int, groups: int, outliers: int, unreadable: int) -> dict:
    hosts = ",".join(f"n{i}" for i in range(nodes))
    group = {"label": "8x H100", "nodes": nodes, "states": {"ok": nodes}, "hosts": hosts, "split": [],
             "majority": {}, "outliers": [_outlier(f"n{i}") for i in range(outliers)]}
    return {
        "totals": {"nodes": nodes, "groups": groups, "outliers": outliers, "unreadable": unreadable, "ok": nodes},
        "drain": {"nodes": 0, "hosts": ""},
        "nodes": [{"node": f"n{i}", "state": "ok"} for i in range(nodes)],
        "finding_counts": [{"severity": "warn", "id": "pcie-width-below-max", "nodes": nodes, "hosts": hosts}],
        "groups": [group] * groups,
        "unreadable": [{"problem": f"bad{i}.json: not a report"} for i in range(unreadable)],
    }


def test_one_of_each_is_singular_in_text_markdown_and_html() -> None:
    report = _report(nodes=1, groups=1, outliers=1, unreadable=1)
    text = render_text(report)
    assert text.splitlines()[0] == "k3diag fleet: 1 node in 1 group: 1 ok; 1 outlier; 1 input not read"
    assert "  WARN pcie-width-below-max: 1 node: n0" in text
    assert "group 8x H100: 1 node (1 ok): n0" in text
    assert "1 node in 1 group: 1 ok; 1 outlier." in render_markdown(report)
    assert "1 node (1 ok): `n0`" in render_markdown(report)
    html = render_html(report)
    assert '<p class="totals">1 node in 1 group: 1 ok; 1 outlier.</p>' in html
    assert "<p>1 node: <code>n0</code></p>" in html
    assert "(s)" not in text + render_markdown(report) + html


def test_several_are_plural_in_text_markdown_and_html() -> None:
    report = _report(nodes=3, groups=2, outliers=2, unreadable=2)
    text = render_text(report)
    assert text.splitlines()[0] == "k3diag fleet: 3 nodes in 2 groups: 3 ok; 2 outliers; 2 inputs not read"
    assert "  WARN pcie-width-below-max: 3 nodes: n0,n1,n2" in text
    assert "group 8x H100: 3 nodes (3 ok): n0,n1,n2" in text
    assert "3 nodes in 2 groups: 3 ok; 2 outliers." in render_markdown(report)
    assert '<p class="totals">3 nodes in 2 groups: 3 ok; 2 outliers.</p>' in render_html(report)
    assert "<p>3 nodes: <code>n0,n1,n2</code></p>" in render_html(report)


def test_outliers_past_the_terminal_limit_are_counted_in_words() -> None:
    one_more = _report(nodes=MAX_OUTLIERS_SHOWN + 2, groups=1, outliers=MAX_OUTLIERS_SHOWN + 1, unreadable=0)
    assert "  and 1 more outlier: see --json or --html" in render_text(one_more)
    two_more = _report(nodes=MAX_OUTLIERS_SHOWN + 3, groups=1, outliers=MAX_OUTLIERS_SHOWN + 2, unreadable=0)
    assert "  and 2 more outliers: see --json or --html" in render_text(two_more)
