"""Capacity planning: will a model load, generate and serve on given GPUs, and how to lay it out.

Entry point: `k3diag.advise.plan.advise(model, hardware, ...) -> AdvicePlan`; the command is
`k3diag advise` (k3diag/commands/advise.py). See docs/advise.md.
"""
