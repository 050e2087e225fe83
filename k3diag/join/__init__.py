"""Joining: parsed records from every input merged into `Machine`s (`build`, `merge_*`).

Sits between the parsers (`k3diag.parse`, which know formats) and analysis (`k3diag.analyze`,
which reads only the model). A merger is `merge(result, machine, input_record) -> None`.
"""
