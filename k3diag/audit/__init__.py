"""The vendor audit: the seed article's procurement checklist answered from a bundle.

`checklist.audit_bundle(path, model, spec_path)` reads a bundle safely, builds the model, runs
the analyzer and answers each question (`q_*.py`); `terminal`, `markdown`, `html` (+ `svg`,
`drawing`) render the `AuditReport`; `spec` checks a purchase spec. See docs/audit.md.
"""
