"""What `k3diag advise` predicted for the measured model and layout, next to what was measured.

advise gives a floor for decode time per token (every active weight and the KV cache read once per
step at peak memory bandwidth, plus the TP/PP/EP communication of its link model). A measured TPOT
near the floor says the layout runs as well as the hardware allows; far above it says something the
model does not hold (kernels, scheduling, a slower link than it assumed) costs the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from k3diag.model.serving import ServingRun


@dataclass
class Prediction:
    label: str
    state: str  # good | bad | unknown
    text: str
    predicted_ms: float | None = None
    predicted_comm_ms: float | None = None
    measured_tpot_ms: float | None = None
    fits: bool | None = None
    command: str | None = None

    def to_json(self) -> dict:
        return {"label": self.label, "state": self.state, "text": self.text,
                "predicted_decode_ms": self.predicted_ms, "predicted_comm_ms": self.predicted_comm_ms,
                "measured_tpot_ms": self.measured_tpot_ms, "fits": self.fits, "command": self.command}


def predictions(runs: list[ServingRun], machine: Any | None, model_name: str | None = None,
                source: str = "the bundle") -> list[Prediction]:
    from k3diag.analyze.serving.explain import representative_runs

    out: list[Prediction] = []
    for run in sorted(representative_runs(runs), key=lambda r: (r.layout.tp or 0, r.layout.label())):
        out.append(_predict(run, machine, model_name, source))
    return out


def _predict(run: ServingRun, machine: Any | None, model_name: str | None, source: str) -> Prediction:
    label = run.layout.label()
    name = model_name or run.model
    command = f"k3diag advise --model NAME --from BUNDLE --tp {run.layout.tp or 'N'}"
    if run.layout.tp is None:
        return Prediction(label, "unknown", "the layout is not known, so there is no advise layout to compare with",
                          command=command)
    try:
        from k3diag.advise.catalog import find_model
        from k3diag.advise.plan import advise, hardware_from_machine
    except ImportError:
        return Prediction(label, "unknown", "the advise package is not available")
    try:
        spec = find_model(name or "")
    except Exception:
        return Prediction(label, "unknown", f"{name or 'the model'} is not in the advise catalog; name a catalog model "
                          "with --model (k3diag advise --list)", command=command)
    if machine is None:
        return Prediction(label, "unknown", "no machine evidence was given (--from BUNDLE), so advise has no hardware",
                          command=f"k3diag serving ... --from BUNDLE --model {spec.id}")
    tp, pp = run.layout.tp, run.layout.pp or 1
    batch = max(int(round(run.concurrency_per_replica or 1)), 1)
    context = int((run.input_len or 0) + (run.output_len or 0)) or None
    try:
        hardware = hardware_from_machine(machine, source)
        plan = advise(spec, hardware, context=min(context, spec.arch.max_context) if context else None,
                      tp=tp, pp=pp, batch=batch)
        shape = plan.to_json()
    except Exception as exc:  # AdviceError: no GPU names, GPU not in the catalog, layout impossible
        return Prediction(label, "unknown", f"advise could not plan TP{tp} here ({exc})".rstrip("."),
                          command=f"k3diag advise --model {spec.id} --from BUNDLE --tp {tp}")
    layouts = [item for item in shape.get("layouts") or [] if isinstance(item, dict)
               and item.get("tp") == tp and (item.get("pp") or 1) == pp and (item.get("ep") or 1) == 1]
    if not layouts:
        return Prediction(label, "unknown", f"advise has no TP{tp} PP{pp} layout for {spec.name} on this machine",
                          command=f"k3diag advise --model {spec.id} --from BUNDLE --tp {tp}")
    layout = layouts[0]
    floor = layout.get("decode_ms_floor")
    comm = layout.get("decode_ms_comm")
    estimate = layout.get("decode_ms_estimate")
    tpot = run.tpot.p50 if run.tpot.p50 is not None else run.tpot.mean
    fits = bool(layout.get("fits"))
    text = (f"advise: {spec.name} TP{tp}{f' PP{pp}' if pp > 1 else ''} {'fits' if fits else 'does not fit'}; "
            f"decode >= {floor:.2f} ms/token at batch {batch}" + (f" + {comm:.2f} ms communication" if comm else ""))
    if tpot is None:
        return Prediction(label, "unknown", text + "; the run recorded no TPOT", estimate, comm, None, fits)
    ratio = tpot / estimate if estimate else None
    if ratio is None:
        return Prediction(label, "unknown", text, estimate, comm, tpot, fits)
    text += f"; measured TPOT {tpot:.1f} ms = {ratio:.1f}x the estimate"
    state = "good" if ratio <= 2.0 else "bad"
    if not fits:
        state = "bad"
        text += " (advise says this layout does not fit: check the model's dtype and context)"
    return Prediction(label, state, text, estimate, comm, tpot, fits)
