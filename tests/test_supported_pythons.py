"""Every regular expression k3diag has compiles on every Python it supports (3.10 to 3.13, README).

Possessive repeats (`\\t++`) and atomic groups are Python 3.11's: the lspci parser used them, and on 3.10 every
`lspci -vv` input ended in "the lspci-vv parser failed on this input (error: multiple repeat at position 8)",
while the suite, run on 3.11, passed. This runs on each other supported interpreter found on this machine (the
suite's own one is checked too): each module's lazy patterns, and each pattern literal handed to `re` or `lazy`
anywhere in the source, compiled there."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_CHECK = r"""
import ast, importlib, json, pkgutil, re, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import k3diag
from k3diag.parse.lazy_re import LazyPattern
failed, checked = [], 0
for info in pkgutil.walk_packages(k3diag.__path__, "k3diag."):
    try:
        module = importlib.import_module(info.name)
    except ImportError:
        continue  # a module that needs typer or rich, which this interpreter may not have
    except Exception as exc:
        failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
        continue
    for name, value in vars(module).items():
        if isinstance(value, LazyPattern):
            checked += 1
            try:
                value.compiled
            except re.error as exc:
                failed.append(f"{info.name}.{name}: {exc}")
CALLS = {"compile", "search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "lazy"}
for path in sorted(Path(sys.argv[1], "k3diag").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == "re" else func.id if isinstance(func, ast.Name) and func.id == "lazy" else None
        pattern = node.args[0]
        if called not in CALLS or not isinstance(pattern, ast.Constant) or not isinstance(pattern.value, str):
            continue
        flags = 0
        flag_arg = node.args[1] if called in ("compile", "lazy") and len(node.args) > 1 else \
            next((k.value for k in node.keywords if k.arg == "flags"), None)
        if flag_arg is not None:
            try:
                flags = eval(compile(ast.Expression(flag_arg), "<flags>", "eval"), {"re": re})
            except Exception:
                flags = 0
        checked += 1
        try:
            re.compile(pattern.value, flags)
        except re.error as exc:
            failed.append(f"{path.relative_to(sys.argv[1])}:{node.lineno}: {exc}")
print(json.dumps({"checked": checked, "failed": failed}))
"""


def _interpreters() -> list[str]:
    """Python 3.10 to 3.13 on PATH or in pyenv's versions, each version once, that start; not the suite's own
    version, which `test_every_pattern_compiles_on_this_python` checks."""
    found = {str(tuple(sys.version_info[:2])): sys.executable}
    candidates = [shutil.which(f"python3.{minor}") for minor in range(10, 14)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-3]*/bin/python3")))
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                  text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() not in found:
            found[done.stdout.strip()] = candidate
    return [path for path in found.values() if path != sys.executable]


def _check(interpreter: str) -> dict:
    done = subprocess.run([interpreter, "-c", _CHECK, str(REPO)], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_pattern_compiles_on_this_python() -> None:
    result = _check(sys.executable)
    assert result["failed"] == []
    assert result["checked"] > 300  # the lazy patterns and the literals were found


@pytest.mark.parametrize("interpreter", _interpreters() or [None])
def test_every_pattern_compiles_on_each_supported_python_found(interpreter: str | None) -> None:
    if interpreter is None:
        pytest.skip("no other Python 3.10 to 3.13 on this machine (PATH, ~/.pyenv/versions)")
    result = _check(interpreter)
    assert result["failed"] == [], interpreter
    assert result["checked"] > 300
