"""From a bundle's members to evidence: the manifest parsed under limits, each entry checked.

The manifest comes from whoever sent the bundle. Its nesting depth and the length of its numbers
are checked on the raw text before it is parsed (a 5,000-deep array or a 5,000-digit integer would
otherwise raise inside the JSON parser), duplicate keys make it ambiguous, every string in it is
made encodable (lone surrogates from `\\udcff` escapes replaced), and the work per entry is constant,
so 30,000 entries cost a fraction of a second; warnings of one kind are counted, not repeated.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

from k3diag.bundle.common import (
    JUNK_NAMES,
    MANIFEST_NAME,
    SCHEMA,
    Bundle,
    BundleError,
    BundleLimits,
    Member,
    MiB,
    check_member_name,
    safe_str,
)
from k3diag.evidence import Evidence
from k3diag.model.words import counted

_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_NUMBER_RE = re.compile(rb"-?\d[\d.eE+-]*")
# The same warning about many entries is said once with a count beyond this many.
_WARNINGS_PER_KIND = 5


class _ManifestProblem(ValueError):
    pass


def load_manifest(data: bytes, display: str, limits: BundleLimits) -> tuple[dict, list[str]]:
    """The manifest as a dict (empty when unusable) and the sentences about what was wrong with it."""
    if len(data) > limits.max_manifest_bytes:
        return {}, [f"{display}: manifest.json is over {limits.max_manifest_bytes // MiB} MiB and was ignored; "
                    "every file was read as plain evidence"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return {}, [f"{display}: manifest.json is not UTF-8 (byte {exc.start}); every file was read as plain evidence"]
    try:
        _check_shape(data, limits)
        loaded = json.loads(text, object_pairs_hook=_unique_keys, parse_int=_bounded_int(limits),
                            parse_float=_finite_float, parse_constant=lambda name: None)
    except _ManifestProblem as exc:
        return {}, [f"{display}: manifest.json {exc}; it was ignored and every file was read as plain evidence"]
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        reason = safe_str(str(exc))[0][:200]
        return {}, [f"{display}: manifest.json is not valid JSON ({reason}); every file was read as plain evidence"]
    if not isinstance(loaded, dict):
        return {}, [f"{display}: manifest.json is not a JSON object; every file was read as plain evidence"]
    replaced = [0]
    manifest = _safe_strings(loaded, replaced)
    warnings: list[str] = []
    if replaced[0]:
        one = replaced[0] == 1
        warnings.append(f"{display}: {counted(replaced[0], 'string')} in manifest.json held invalid characters "
                        f"(lone surrogates); {'it is' if one else 'they are'} shown with \ufffd in "
                        f"{'its' if one else 'their'} place")
    schema = manifest.get("schema")
    if schema is None:
        warnings.append(f"{display}: manifest.json names no schema (expected {SCHEMA!r}); read as far as it matches")
    elif schema != SCHEMA:
        warnings.append(f"{display}: manifest schema is {_short(schema)!r}, not {SCHEMA!r}; read as far as it matches")
    return manifest, warnings


def _check_shape(data: bytes, limits: BundleLimits) -> None:
    """Nesting depth and number length from the raw bytes, strings left out, before any parsing."""
    bare = _STRING_RE.sub(b'""', data)
    brackets = bare.translate(None, _NOT_BRACKET)
    if brackets:
        depth = max(itertools.accumulate(1 if b in (0x5B, 0x7B) else -1 for b in brackets))
        if depth > limits.max_manifest_depth:
            raise _ManifestProblem(f"nests {depth} levels deep (a real one nests 4); the limit is "
                                   f"{limits.max_manifest_depth}")
    longest = max((len(m) for m in _NUMBER_RE.findall(bare)), default=0)
    if longest > limits.max_number_chars:
        raise _ManifestProblem(f"holds a number {longest} characters long; the limit is {limits.max_number_chars}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise _ManifestProblem(f"names the key {_short(key)!r} twice in one object, so which value counts is "
                                   "ambiguous")
        result[key] = value
    return result


def _bounded_int(limits: BundleLimits):
    def parse(text: str) -> int:
        if len(text) > limits.max_number_chars:
            raise _ManifestProblem(f"holds a number {len(text)} digits long")
        return int(text)

    return parse


def _finite_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _safe_strings(obj: Any, replaced: list[int]) -> Any:
    if isinstance(obj, str):
        text, bad = safe_str(obj)
        replaced[0] += bad
        return text
    if isinstance(obj, dict):
        return {_safe_strings(k, replaced): _safe_strings(v, replaced) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_safe_strings(v, replaced) for v in obj]
    return obj


def _short(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Warnings:
    """Warnings about entries, at most a few of each kind, then one sentence with the count."""

    def __init__(self, display: str) -> None:
        self.display = display
        self.lines: list[str] = []
        self._counts: dict[str, int] = {}

    def add(self, kind: str, sentence: str) -> None:
        seen = self._counts.get(kind, 0) + 1
        self._counts[kind] = seen
        if seen <= _WARNINGS_PER_KIND:
            self.lines.append(sentence)

    def finish(self) -> list[str]:
        for kind, count in self._counts.items():
            if count > _WARNINGS_PER_KIND:
                self.lines.append(f"{self.display}: {count - _WARNINGS_PER_KIND} more manifest entries of the same "
                                  f"kind ({kind}) were not listed one by one")
        return self.lines


def assemble(path: Path, display: str, members: list[Member], limits: BundleLimits,
             warnings: list[str] | None = None) -> Bundle:
    warnings = list(warnings or [])
    root = _bundle_root(members)
    relative: list[tuple[str, bytes]] = []
    for member in members:
        name = member.name
        if root and name.startswith(root + "/"):
            name = name[len(root) + 1:]
        relative.append((name, member.data))

    by_name = {name: data for name, data in relative}
    manifest: dict = {}
    manifest_data = by_name.get(MANIFEST_NAME)
    if manifest_data is None:
        warnings.append(f"{display} has no manifest.json; every file was read as plain evidence without the "
                        "commands and exit codes that produced it")
    else:
        manifest, problems = load_manifest(manifest_data, display, limits)
        warnings.extend(problems)

    evidence: list[Evidence] = []
    claimed: set[str] = {MANIFEST_NAME}
    entries = manifest.get("evidence") if manifest else None
    if entries is not None and not isinstance(entries, list):
        warnings.append(f"{display}: manifest 'evidence' is not a list; its entries were ignored")
        entries = None
    if entries is not None and len(entries) > limits.max_members:
        warnings.append(f"{display}: manifest lists {len(entries)} entries, more than the {limits.max_members} a "
                        f"bundle may hold; only the first {limits.max_members} were read")
        entries = entries[:limits.max_members]
    notes = _Warnings(display)
    for position, entry in enumerate(entries or []):
        if not isinstance(entry, dict):
            notes.add("not an object", f"{display}: manifest evidence entry {position} is not an object; skipped")
            continue
        item = _evidence_from_entry(display, entry, by_name, notes, position, claimed)
        if item is not None:
            evidence.append(item)
    warnings.extend(notes.finish())

    extras = [(name, data) for name, data in relative if name not in claimed and not _is_junk(name)]
    if extras and manifest:
        listed = ", ".join(name for name, _ in extras[:5]) + (" ..." if len(extras) > 5 else "")
        warnings.append(f"{display}: {counted(len(extras), 'file')} not listed in the manifest "
                        f"{'was' if len(extras) == 1 else 'were'} read as plain evidence "
                        f"(added by hand?): {listed}")
    for name, data in extras:
        evidence.append(Evidence(name=f"{display}:{name}", data=data, kind="file",
                                 meta={"bundle_member": name, "in_manifest": False}))
    return Bundle(path=path, manifest=manifest, evidence=evidence, warnings=warnings)


def _bundle_root(members: list[Member]) -> str:
    """The top folder when every member sits under one (how tar archives usually look)."""
    names = [m.name for m in members]
    if not names or MANIFEST_NAME in names:
        return ""
    tops = {name.split("/", 1)[0] for name in names}
    if len(tops) == 1:
        top = tops.pop()
        # Only a folder holding the manifest is a bundle root; `evidence/` alone is not.
        if all("/" in name for name in names) and f"{top}/{MANIFEST_NAME}" in names:
            return top
    return ""


def _is_junk(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base in JUNK_NAMES or base.startswith("._") or name.startswith("__MACOSX/")


def _clean_manifest_member(member: str) -> str | None:
    try:
        return check_member_name("manifest", member)
    except BundleError:
        return None


def _evidence_from_entry(display: str, entry: dict, by_name: dict[str, bytes], notes: _Warnings, position: int,
                         claimed: set[str]) -> Evidence | None:
    member = entry.get("member")
    data: bytes | None = None
    error = _opt_str(entry.get("error"))
    if member is not None:
        if not isinstance(member, str):
            notes.add("member not a string", f"{display}: manifest entry {position} has a member that is not a "
                                             "string; skipped")
            return None
        cleaned = _clean_manifest_member(member)
        if cleaned is None:
            notes.add("member outside the bundle", f"{display}: manifest entry {position} names member "
                                                   f"{_short(member)!r} outside the bundle; it was ignored")
            return None
        if cleaned in claimed:
            notes.add("member listed twice", f"{display}: manifest entry {position} lists {_short(cleaned)!r} "
                                             "again; it was read once")
            return None
        claimed.add(cleaned)
        data = by_name.get(cleaned)
        if data is None:
            notes.add("member missing", f"{display}: manifest lists {_short(cleaned)!r} but the bundle does not "
                                        "hold it")
            error = error or f"{cleaned} is listed in the manifest but missing from the bundle"
        name = f"{display}:{cleaned}"
    else:
        original = _opt_str(entry.get("name")) or f"entry-{position}"
        name = f"{display}:{original}"
    kind = entry.get("kind") if entry.get("kind") in ("file", "command", "reading") else "file"
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    meta = dict(meta)
    if isinstance(entry.get("name"), str):
        meta.setdefault("collected_as", entry["name"])
    if member is not None:
        meta.setdefault("bundle_member", member)
    exit_code = entry.get("exit_code")
    duration = entry.get("duration_s")
    return Evidence(
        name=name,
        data=data,
        kind=kind,
        command=_opt_str(entry.get("command")),
        exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
        duration_s=float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool)
        and math.isfinite(float(duration)) else None,
        stderr=_opt_str(entry.get("stderr")) or "",
        timed_out=entry.get("timed_out") is True,
        error=error,
        format_hint=_opt_str(entry.get("format_hint")),
        meta=meta,
    )


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None
