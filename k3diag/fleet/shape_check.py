"""A shape stored in a node's report (`check` writes it), taken only as far as it has the types k3diag writes.

The stored shape is read instead of the report's body because it holds the evidence lines the report alone
no longer has; but it comes from a file on a node, and the aggregation and the renderers trust a shape's
types: one finding whose severity was a number (`entry['severity'].upper()`) ended `k3diag fleet` for every
node. Each field is kept when it has the type `shape.shape_from_report` gives it, and what was not is named,
so the node's line in the summary can say its report was damaged.
"""

from __future__ import annotations

from typing import Any

from k3diag.fleet.shape import MAX_EVIDENCE_CHARS, MAX_FINDINGS_PER_NODE, MAX_VALUE_CHARS, SHAPE_SCHEMA, STATES

_SEVERITIES = ("fail", "warn")
_TEXT_LIMIT = 4096  # the verdict, a node name: longer than any k3diag writes


def checked_shape(stored: dict) -> tuple[dict, list[str]]:
    """The stored shape with every field of the type k3diag writes, and the names of the fields (or parts of
    them) that were not and were left out."""
    damaged: list[str] = []
    shape: dict[str, Any] = {"schema": SHAPE_SCHEMA}

    def text(value: Any, name: str, limit: int = _TEXT_LIMIT) -> str | None:
        if value is None or (isinstance(value, str) and len(value) <= limit):
            return value
        damaged.append(name)
        return None

    def count(value: Any, name: str) -> int | None:
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31):
            return value
        damaged.append(name)
        return None

    def strings(value: Any, name: str, limit: int) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            damaged.append(name)
            return {}
        kept = {key: item for key, item in value.items()
                if isinstance(key, str) and isinstance(item, str) and len(key) <= limit and len(item) <= limit}
        if len(kept) < len(value):
            damaged.append(name)
        return kept

    node = text(stored.get("node"), "node")
    if node is not None and not node.isprintable():
        # a newline or a control character: the node would print a line of the file's choosing in the drain
        # list; named after its file instead (the caller's fallback)
        damaged.append("node")
        node = None
    shape["node"] = node
    shape["findings"] = _findings(stored.get("findings"), damaged)
    state = stored.get("state")
    if state not in STATES:
        damaged.insert(0, "state")
        # what the findings kept say, as `shape.state_of` does; never "ok" for a node whose state is not known
        severities = {finding["severity"] for finding in shape["findings"]}
        state = "fail" if "fail" in severities else "warn" if "warn" in severities else "unknown"
    shape["state"] = state
    shape["exit_code"] = count(stored.get("exit_code"), "exit_code")
    shape["verdict"] = text(stored.get("verdict"), "verdict")
    sku = stored.get("sku") if isinstance(stored.get("sku"), dict) else {}
    if not isinstance(stored.get("sku"), dict):
        damaged.append("sku")
    shape["sku"] = {"gpu_model": text(sku.get("gpu_model"), "sku.gpu_model", MAX_VALUE_CHARS),
                    "gpu_count": count(sku.get("gpu_count"), "sku.gpu_count") or 0,
                    "nic_count": count(sku.get("nic_count"), "sku.nic_count") or 0,
                    "board": text(sku.get("board"), "sku.board", MAX_VALUE_CHARS)}
    shape["features"] = strings(stored.get("features"), "features", MAX_VALUE_CHARS * 2)
    shape["evidence"] = strings(stored.get("evidence"), "evidence", MAX_EVIDENCE_CHARS * 2)
    shape["pairs"] = text(stored.get("pairs"), "pairs", 1 << 20) or ""
    worst = stored.get("worst")
    if worst is not None and not (isinstance(worst, dict) and all(
            isinstance(worst.get(key), str) for key in ("id", "subject", "title"))):
        damaged.append("worst")
        worst = None
    shape["worst"] = {key: worst[key] for key in ("id", "subject", "title")} if worst else None
    counts = stored.get("counts") if isinstance(stored.get("counts"), dict) else {}
    shape["counts"] = {severity: count(counts.get(severity), f"counts.{severity}") or 0
                       for severity in ("fail", "warn", "info")}
    if isinstance(stored.get("node_from"), str):
        shape["node_from"] = stored["node_from"]
    return shape, list(dict.fromkeys(damaged))


def _findings(value: Any, damaged: list[str]) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        damaged.append("findings")
        return []
    kept = []
    for finding in value[:MAX_FINDINGS_PER_NODE]:
        if (isinstance(finding, dict) and finding.get("severity") in _SEVERITIES
                and all(isinstance(finding.get(key), str) for key in ("id", "subject", "title"))
                and isinstance(finding.get("evidence"), (str, type(None)))):
            kept.append({key: finding.get(key) for key in ("id", "severity", "subject", "title", "evidence")})
    if len(kept) < min(len(value), MAX_FINDINGS_PER_NODE):
        damaged.append("findings")
    return kept
