"""What `k3diag advise` predicted for the measured model and layout, next to what was measured.

advise gives a floor for decode time per token (every active weight and the KV cache read once per
step at peak memory bandwidth, plus the TP/PP/EP communication of its link model). A measured TPOT
near the floor says the layout runs as well as the hardware allows; far above it says something the
model does not hold (kernels, scheduling, a slower link than it assumed) costs the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from k3diag.model.serving import ServingRun

# predictor(runs, machine, model_name, source) -> list[Prediction]; k3diag.advise.serving.predict_layouts is the
# one the command passes in (advise sits above analyze in the layers).
Predictor = Callable[[list[ServingRun], Any, "str | None", str], "list[Prediction]"]


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
