"""The advise side of `k3diag serving`: the model's architecture and advise's link and decode models.

Two functions the serving command hands to the analysis (`k3diag.analyze.serving` sits below advise in the
layers): the estimated TP all-reduce time per decoded token on the GPUs a run used, and advise's predicted
decode time for the measured model and layout.
"""

from __future__ import annotations

from typing import Any

from k3diag.analyze.serving.explain import Fact, representative_runs
from k3diag.analyze.serving.predict import Prediction
from k3diag.model.serving import ServingRun


def estimate_allreduce(run: ServingRun, machine: Any | None, group: list[int] | None, model_name: str | None) -> Fact:
    tp = run.layout.tp or 1
    name = model_name or run.model
    from k3diag.advise.catalog import find_model

    try:
        spec = find_model(name or "")
    except Exception:
        return Fact("allreduce_per_token", "unknown",
                    f"the model {name or '(not named in the result)'} is not in k3diag's catalog, so its hidden size "
                    "and layer count are not known", command="k3diag serving ... --model NAME (see k3diag advise --list)")
    link = _link_for(machine, group, tp)
    if link is None:
        return Fact("allreduce_per_token", "unknown", "the link the group's all-reduce runs on is not known",
                    command="k3diag serving ... --from BUNDLE")
    from k3diag.advise.dtypes import bytes_per_param
    from k3diag.advise.roofline import ring_allreduce_us

    arch = spec.arch
    batch = max(int(round(run.concurrency_per_replica or 1)), 1)
    nbytes = batch * arch.hidden_size * bytes_per_param(spec.activation_dtype)
    count = 2 * arch.num_layers
    each_us = ring_allreduce_us(tp, nbytes, link)
    per_token_ms = count * each_us / 1000.0
    tpot = run.tpot.p50 if run.tpot.p50 is not None else run.tpot.mean
    text = (f"{count} all-reduces of {nbytes / 1024:.0f} KiB per decode step (batch {batch}) on {link.label or link.klass} "
            f"(~{link.bandwidth_gbs:.0f} GB/s, {link.latency_us:g} us per ring step, {link.source}): "
            f"~{per_token_ms:.2f} ms per token")
    value = {"allreduce_ms_per_token": round(per_token_ms, 3), "tpot_ms": tpot, "link_gbs": link.bandwidth_gbs,
             "batch": batch}
    if tpot:
        share = per_token_ms / tpot
        value["share_of_tpot"] = round(share, 3)
        text += f", {share * 100:.0f}% of the measured TPOT ({tpot:.1f} ms)"
        state = "bad" if share >= 0.25 else "good"
    else:
        state = "unknown"
        text += "; the TPOT was not recorded"
    return Fact("allreduce_per_token", state, text, value=value)


def _link_for(machine: Any | None, group: list[int] | None, tp: int):
    if machine is None or not group:
        return None
    try:
        from k3diag.advise.catalog import gpu_catalog
        from k3diag.advise.links import group_link
        from k3diag.advise.hardware import hardware_from_machine

        hardware = hardware_from_machine(machine, "the bundle")
        link, _notes = group_link(hardware.gpu, gpu_catalog(), group, hardware.node_of(), machine=machine)
        return link
    except Exception:  # no GPU names, GPU not in the catalog: the estimate says unknown
        return None




def predict_layouts(runs: list[ServingRun], machine: Any | None, model_name: str | None = None,
                source: str = "the bundle") -> list[Prediction]:
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
    from k3diag.advise.catalog import find_model
    from k3diag.advise.hardware import hardware_from_machine
    from k3diag.advise.plan import advise

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
