"""Readers for serving benchmark results and serving-engine logs (see docs/serving.md)."""
