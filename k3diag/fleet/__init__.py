"""Fleet work: `k3diag check` on one node of many, and `k3diag fleet` over the reports of all of them.

This package sits above `render/` and below `commands/`: it reads reports (or builds them from bundles
through the analyzer), compares nodes of one kind with each other, and renders what differs.
"""
