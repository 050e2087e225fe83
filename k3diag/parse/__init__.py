"""Parsers: pure functions from saved tool output (text) to typed records. No I/O here."""
