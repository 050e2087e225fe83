"""Regular expressions compiled the first time they are used, not when their module is imported.

`k3diag analyze one-file.txt` imports the parsers whose formats might match; compiling every
pattern of each at import cost ~180 compilations (tens of milliseconds, as much as importing
typer) for the handful one input needs. `lazy(pattern, flags)` stands in for
`re.compile(pattern, flags)`: the first attribute asked for compiles it, and from then on its
methods are the compiled pattern's own (bound once, so loops pay nothing extra).

Pass it where a compiled pattern's methods are called (`P.match(line)`, `P.finditer(text)`,
`P.pattern`); `re.compile(P)` and `re.match(P, text)` need a real pattern (`P.compiled`).
"""

from __future__ import annotations

import re
from typing import cast

_METHODS = ("match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split", "scanner",
            "pattern", "flags", "groups", "groupindex")


class LazyPattern:
    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.__dict__["_source"] = (pattern, flags)

    @property
    def compiled(self) -> "re.Pattern[str]":
        return re.compile(*self._source)

    def __getattr__(self, name: str):
        # Only called for names not yet in the instance: the first use of the pattern.
        compiled = re.compile(*self._source)
        for method in _METHODS:
            self.__dict__[method] = getattr(compiled, method)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazy({self._source[0]!r})"


def lazy(pattern: str, flags: int = 0) -> "re.Pattern[str]":
    """`re.compile(pattern, flags)`, deferred to the first use."""
    return cast("re.Pattern[str]", LazyPattern(pattern, flags))
