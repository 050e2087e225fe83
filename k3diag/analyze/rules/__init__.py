"""Every rule k3diag knows, declared in one place, in the order they run.

Rules that explain other findings (root causes) run after the rules whose findings they
link, so each domain module exposes `RULES` and the order of modules below matters:
facts first (topology, PCIe, platform, AMD), then NCCL and benchmarks that point back to
them, then cross-source contradictions.
"""

from __future__ import annotations

import importlib
from functools import cache

from k3diag.analyze.finding import Rule

RULE_MODULES: tuple[str, ...] = (
    "k3diag.analyze.rules.inputs",
    "k3diag.analyze.rules.virtual",
    "k3diag.analyze.rules.topology",
    "k3diag.analyze.rules.pcie",
    "k3diag.analyze.rules.platform",
    "k3diag.analyze.rules.amd",
    "k3diag.analyze.rules.fabric",
    "k3diag.analyze.rules.nic",
    "k3diag.analyze.rules.nccl_causes",
    "k3diag.analyze.rules.nccl",
    "k3diag.analyze.rules.nccl_init",
    "k3diag.analyze.rules.benchmarks",
    "k3diag.analyze.rules.probe",
    "k3diag.analyze.rules.contradictions",
)


@cache
def all_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for name in RULE_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a domain whose rules are not written yet
                continue
            raise
        rules.extend(module.RULES)
    ids = [rule.id for rule in rules]
    duplicates = {rule_id for rule_id in ids if ids.count(rule_id) > 1}
    if duplicates:
        raise RuntimeError(f"duplicate rule ids: {sorted(duplicates)}")
    return tuple(rules)
