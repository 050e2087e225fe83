"""Serving benchmarks compared across layouts (`k3diag serving`): matching, ranking, explanation."""
