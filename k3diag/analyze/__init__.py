"""Analyzer: rules over the normalized model produce findings; the planner recommends TP groups."""
