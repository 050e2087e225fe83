"""Nodes of one kind compared with each other: groups, each group's majority shape, and the odd nodes.

No manifest of what a SKU should look like is needed: within a group of nodes with the same GPU model and
count, NIC count and board, the value most nodes share is the expected one, and a node that differs is
named with what differs and the input line that shows it. A feature with no strict majority (half the
nodes one way, half the other) is reported as split, with no node blamed.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter, defaultdict
from typing import Iterable

from k3diag import __version__
from k3diag.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN
from k3diag.fleet.hostlist import fold_hosts
from k3diag.fleet.shape import NOT_IN_EVIDENCE, STATES, sku_label

FLEET_SCHEMA = "k3diag.fleet/1"
ABSENT = "absent"
# Pairs named per outlier when its GPU matrix differs from the majority's (the rest are counted).
MAX_PAIR_DIFFS = 8
MAX_SPLIT_VALUES = 6
# Nodes per group whose evidence lines are all kept; after them a node keeps the line of a feature only
# where its value differs from the group's most common value so far. Outliers keep their lines, and the
# thousands of nodes that match the majority do not each hold forty lines nobody will read.
KEEP_ALL_EVIDENCE = 32


def _missing(feature: str) -> str:
    return ABSENT if feature.startswith("finding ") else NOT_IN_EVIDENCE


def _pair_diffs(mine: str, majority: str) -> list[str]:
    ours = dict(item.rsplit(" ", 1) for item in mine.split(";") if " " in item) if mine else {}
    theirs = dict(item.rsplit(" ", 1) for item in majority.split(";") if " " in item) if majority else {}
    diffs = []
    for pair in sorted(set(ours) | set(theirs), key=lambda p: [int(x[3:]) if x[3:].isdigit() else 0 for x in p.split("-")]):
        a, b = ours.get(pair, NOT_IN_EVIDENCE), theirs.get(pair, NOT_IN_EVIDENCE)
        if a != b:
            diffs.append(f"{pair} {a} (majority {b})")
    if len(diffs) > MAX_PAIR_DIFFS:
        diffs = diffs[:MAX_PAIR_DIFFS] + [f"and {len(diffs) - MAX_PAIR_DIFFS} more pairs"]
    return diffs


def _group(nodes: list[dict]) -> dict:
    count = len(nodes)
    names = sorted({feature for node in nodes for feature in node.get("features", {})})
    majority: dict[str, dict] = {}
    splits: list[dict] = []
    outliers: dict[str, list[dict]] = defaultdict(list)
    pairs_majority = Counter(node.get("pairs") or "" for node in nodes).most_common(1)[0][0] if nodes else ""
    for feature in names:
        values = Counter(node.get("features", {}).get(feature, _missing(feature)) for node in nodes)
        value, seen = values.most_common(1)[0]
        if count < 2:
            majority[feature] = {"value": value, "nodes": seen}
            continue
        if seen * 2 <= count:
            splits.append({
                "feature": feature,
                "values": [{"value": v, "nodes": n, "hosts": fold_hosts([x["node"] for x in nodes
                                                                        if x.get("features", {}).get(feature, _missing(feature)) == v])}
                           for v, n in values.most_common(MAX_SPLIT_VALUES)],
            })
            continue
        if value != _missing(feature):
            majority[feature] = {"value": value, "nodes": seen}
        if seen == count:
            continue
        for node in nodes:
            mine = node.get("features", {}).get(feature, _missing(feature))
            if mine == value:
                continue
            difference = {
                "feature": feature,
                "value": mine,
                "majority": value,
                "majority_nodes": seen,
                "evidence": (node.get("evidence") or {}).get(feature),
            }
            if feature == "topology":
                difference["pairs"] = _pair_diffs(node.get("pairs") or "", pairs_majority)
            outliers[node["node"]].append(difference)
    states = Counter(node.get("state", "unknown") for node in nodes)
    return {
        "sku": dict(nodes[0].get("sku") or {}),
        "label": sku_label(nodes[0].get("sku") or {}),
        "nodes": count,
        "hosts": fold_hosts([node["node"] for node in nodes]),
        "states": {state: states.get(state, 0) for state in STATES},
        "majority": majority,
        "split": splits,
        "outliers": [{"node": name, "differences": diffs} for name, diffs in sorted(outliers.items())],
    }


def _thin_evidence(shape: dict, modes: dict[str, list], position: int) -> None:
    """Track each feature's most common value in this group; drop the evidence of values that match it."""
    features = shape.get("features") or {}
    evidence = shape.get("evidence") or {}
    for feature, value in features.items():
        entry = modes.setdefault(feature, [Counter(), None, 0])  # counts, mode value, mode count
        counts = entry[0]
        is_mode = value == entry[1]
        counts[value] += 1
        if counts[value] > entry[2]:
            entry[1], entry[2] = value, counts[value]
        if position >= KEEP_ALL_EVIDENCE and is_mode and feature in evidence:
            del evidence[feature]


def aggregate(shapes: Iterable[dict], problems: list[str] | None = None) -> dict:
    """The fleet report (`k3diag.fleet/1`) from node shapes and the sentences about unreadable paths."""
    unreadable = [{"source": p, "node": None, "problem": p} for p in (problems or [])]
    by_sku: dict[str, list[dict]] = defaultdict(list)
    seen_names: Counter = Counter()
    modes: dict[str, dict[str, list]] = defaultdict(dict)
    nodes: list[dict] = []
    for shape in shapes:
        if shape.get("problem"):
            unreadable.append({"source": shape.get("source"), "node": shape.get("node"), "problem": shape["problem"]})
            continue
        name = str(shape.get("node") or shape.get("source"))
        seen_names[name] += 1
        if seen_names[name] > 1:
            unreadable.append({"source": shape.get("source"), "node": name,
                               "problem": f"{shape.get('source')} is a second report for {name}; it was compared as "
                                          f"{name}#{seen_names[name]}"})
            shape["host"] = name  # the real name: what a drain list must carry (`gpu001#2` is no Slurm node)
            name = f"{name}#{seen_names[name]}"
        shape["node"] = name
        label = sku_label(shape.get("sku") or {})
        _thin_evidence(shape, modes[label], len(by_sku[label]))
        nodes.append(shape)
        by_sku[label].append(shape)
    groups = [_group(members) for _, members in sorted(by_sku.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    outlier_names = {o["node"] for g in groups for o in g["outliers"]}
    finding_nodes: dict[str, dict] = {}
    for node in nodes:
        for finding in node.get("findings") or []:
            entry = finding_nodes.setdefault(finding["id"], {"id": finding["id"], "severity": finding["severity"],
                                                             "title": finding.get("title") or "", "names": set()})
            if finding["severity"] == "fail":
                entry["severity"] = "fail"
            entry["names"].add(node["node"])
    finding_counts = sorted(
        ({"id": e["id"], "severity": e["severity"], "title": e["title"], "nodes": len(e["names"]),
          "hosts": fold_hosts(sorted(e["names"]))} for e in finding_nodes.values()),
        key=lambda e: (0 if e["severity"] == "fail" else 1, -e["nodes"], e["id"]),
    )
    drain = sorted({node.get("host") or node["node"] for node in nodes if node.get("state") == "fail"})
    # nodes whose report held a stored shape with fields of the wrong type (`shape_check`): read in part
    damaged = [{"node": node["node"], "source": node.get("source"), "fields": list(node["damaged"])}
               for node in sorted(nodes, key=lambda n: n["node"]) if node.get("damaged")]
    states = Counter(node.get("state", "unknown") for node in nodes)
    if not nodes:
        code = EXIT_UNKNOWN
    elif states.get("fail"):
        code = EXIT_FAIL
    # An input that could not be read is a node nobody judged: the fleet cannot pass on its account.
    elif states.get("warn") or states.get("unknown") or outlier_names or unreadable or damaged:
        code = EXIT_WARN
    else:
        code = EXIT_OK
    return {
        "schema": FLEET_SCHEMA,
        "tool": {"name": "k3diag", "version": __version__},
        "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "exit_code": code,
        "totals": {"nodes": len(nodes), "groups": len(groups), "outliers": len(outlier_names),
                   "unreadable": len(unreadable), "damaged": len(damaged), **{state: states.get(state, 0) for state in STATES}},
        "drain": {"hosts": fold_hosts(drain), "nodes": len(drain)},
        "outlier_hosts": fold_hosts(sorted(outlier_names)),
        "finding_counts": finding_counts,
        "groups": groups,
        "nodes": [
            {"node": node["node"], "state": node.get("state", "unknown"), "group": sku_label(node.get("sku") or {}),
             "source": node.get("source"), "outlier": node["node"] in outlier_names,
             "worst": node.get("worst"), "counts": node.get("counts") or {}}
            for node in sorted(nodes, key=lambda n: n["node"])
        ],
        "unreadable": unreadable,
        "damaged": damaged,
    }
