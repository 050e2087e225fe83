"""The `k3diag serving` report: runs, the matched-load check, the verdict and its explanation.

Schema `k3diag.serving/1`, documented in docs/serving.md and shipped as
`k3diag/data/schema/serving.schema.json`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3diag.analyze.serving.compare import Comparison, Slo, compare, load_key, load_text
from k3diag.analyze.serving.explain import Estimator, LayoutExplanation, explain
from k3diag.analyze.serving.predict import Prediction, Predictor
from k3diag.exit_codes import EXIT_OK, EXIT_UNKNOWN
from k3diag.model.serving import ServingRun

SCHEMA = "k3diag.serving/1"


@dataclass
class ServingReport:
    runs: list[ServingRun]
    comparison: Comparison
    explanations: list[LayoutExplanation] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    machine_source: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.comparison.comparable else EXIT_UNKNOWN

    def sorted_runs(self) -> list[ServingRun]:
        def key(run: ServingRun) -> tuple:
            load = load_key(run)
            return (run.layout.gpu_count or 0, run.layout.tp or 0, run.layout.label(),
                    load[1] if load else 0.0, load[0] if load else "")

        return sorted(self.runs, key=key)

    def to_json(self) -> dict:
        layouts = []
        for run in self.sorted_runs():
            data = run.to_json()
            data["load"] = load_text(load_key(run))
            check = self.comparison.check_of(run)
            data["slo"] = check.to_json() if check else None
            excluded = next((why for r, why in self.comparison.excluded if r is run), None)
            data["excluded"] = excluded
            layouts.append(data)
        return {
            "schema": SCHEMA,
            "inputs": list(self.inputs),
            "machine": self.machine_source,
            "slo": self.comparison.slo.to_json(),
            "layouts": layouts,
            "comparable": self.comparison.comparable,
            "reasons": list(self.comparison.reasons),
            "ranked_at": self.comparison.load,
            "ranking": [r.to_json() for r in self.comparison.ranking] if self.comparison.comparable else [],
            "best": self.comparison.best_json(),
            "verdict": self.comparison.verdict,
            "explanation": [e.to_json() for e in self.explanations],
            "predictions": [p.to_json() for p in self.predictions],
            "notes": list(self.comparison.notes),
            "warnings": list(self.warnings),
            "exit_code": self.exit_code,
        }


def build_report(runs: list[ServingRun], machine: Any | None = None, slo: Slo | None = None,
                 model_name: str | None = None, inputs: list[dict] | None = None,
                 warnings: list[str] | None = None, machine_source: str | None = None,
                 estimate: Estimator | None = None, predictor: Predictor | None = None) -> ServingReport:
    """`estimate` and `predictor` come from k3diag.advise.serving (see the command); without them the
    all-reduce estimate is unknown and no advise comparison is made."""
    comparison = compare(runs, slo)
    explanations: list[LayoutExplanation] = []
    preds: list[Prediction] = []
    extra_warnings = list(warnings or [])
    known = [run for run in runs if run.layout.gpu_count]
    try:
        explanations = explain(known, machine, model_name, estimate)
    except Exception as exc:  # the explanation is the evidence's; the ranking stands without it
        extra_warnings.append(f"the explanation could not be built ({type(exc).__name__}: {exc})")
    try:
        preds = predictor(known, machine, model_name, machine_source or "the bundle") if predictor else []
    except Exception as exc:
        extra_warnings.append(f"the advise comparison could not be built ({type(exc).__name__}: {exc})")
    for run in runs:
        extra_warnings.extend(run.warnings)
    because = _because(comparison, explanations)
    if because:
        comparison.verdict = comparison.verdict.rstrip(".") + "; " + because + "."
    return ServingReport(runs=list(runs), comparison=comparison, explanations=explanations, predictions=preds,
                         inputs=list(inputs or []), warnings=_unique(extra_warnings), machine_source=machine_source)


def _because(comparison: Comparison, explanations: list[LayoutExplanation]) -> str | None:
    """The machine's evidence against the layouts that lost: why they serve less per GPU."""
    if not comparison.comparable or len(comparison.ranking) < 2:
        return None
    by_label = {item.label: item for item in explanations}
    parts = []
    for ranked in comparison.ranking[1:]:
        for run in ranked.runs:
            item = by_label.get(run.layout.label())
            if item is None:
                continue
            bad = [fact.text for fact in item.facts if fact.state == "bad"]
            if bad:
                parts.append(f"{item.label}: " + "; ".join(bad[:3]))
    if not parts:
        return None
    return "against it, " + " | ".join(parts[:2])


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
