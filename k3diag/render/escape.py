"""Text from input shown on a terminal: control characters escaped, never executed.

Member names, manifest strings, tool output and error sentences all come from files someone
else wrote. A terminal obeys escape sequences (`ESC ] 0;title BEL` retitles the window,
`ESC [ 2J` clears it, OSC 8 forges links, OSC 52 writes the clipboard), and bidirectional
overrides make text read differently from what it is. Every such character is shown as its
Python escape (`\\x1b`, `\\u202e`) so the user sees that it was there and nothing acts on it.

Used by every renderer that prints input text to a terminal (analyze, topo, audit) and by the
commands' error messages. Pure functions, no imports beyond the standard library; rich markup
escaping is a separate step (`for_rich`).
"""

from __future__ import annotations

import re

# C0 controls except TAB and LF, DEL, C1 controls (0x80-0x9f: 0x9b is a one-byte CSI on
# terminals that honour 8-bit controls), lone surrogates (what `surrogateescape` decoding
# leaves for undecodable bytes; printing one raises UnicodeEncodeError), the line and
# paragraph separators, and the bidirectional embedding/override/isolate marks.
_UNSAFE_CLASS = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\ud800-\udfff"
    "\u2028\u2029"
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
)
_UNSAFE_RE = re.compile(f"[{_UNSAFE_CLASS}]")
_UNSAFE_OR_NEWLINE_RE = re.compile(f"[{_UNSAFE_CLASS}\n]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0A:
        return "\\n"
    if code == 0x0D:
        return "\\r"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def escape_terminal(text: object, multiline: bool = False) -> str:
    """`text` with every control character shown escaped (`\\x1b`, `\\r`, `\\u202e`).

    A newline is escaped too (`\\n`) unless `multiline`: a single-line field (a member name,
    a host name) must not be able to start a forged line of output. TAB is kept.
    """
    value = text if isinstance(text, str) else str(text)
    pattern = _UNSAFE_RE if multiline else _UNSAFE_OR_NEWLINE_RE
    if pattern.search(value) is None:
        return value
    return pattern.sub(_escaped, value)


def has_unsafe(text: str, multiline: bool = False) -> bool:
    """Whether `escape_terminal` would change `text`."""
    pattern = _UNSAFE_RE if multiline else _UNSAFE_OR_NEWLINE_RE
    return pattern.search(text) is not None


def for_rich(text: object, multiline: bool = False) -> str:
    """`escape_terminal`, then rich markup escaping, for text placed inside a rich markup string."""
    from rich.markup import escape

    return escape(escape_terminal(text, multiline=multiline))


def safe_message(text: object) -> str:
    """An error or warning sentence that quotes input, for stderr: multiline kept, controls escaped."""
    return escape_terminal(text, multiline=True)


_SAFE_CONSOLE: type | None = None


def safe_console(**kwargs):
    """A rich `Console` that shows control characters in every piece of text it prints escaped
    (`\\x1b`), whatever path the text took (a table cell, a `Text`, a markup string), while its own
    colour and cursor codes still go out: the filter sits where rich turns text segments into output,
    and rich's own control segments are left alone."""
    global _SAFE_CONSOLE
    if _SAFE_CONSOLE is None:
        from rich.console import Console
        from rich.segment import Segment

        class SafeConsole(Console):
            def _render_buffer(self, buffer):  # type: ignore[override]
                return super()._render_buffer(
                    Segment(escape_terminal(segment.text, multiline=True), segment.style, segment.control)
                    if not segment.control and has_unsafe(segment.text, multiline=True) else segment
                    for segment in buffer)

        _SAFE_CONSOLE = SafeConsole
    return _SAFE_CONSOLE(**kwargs)
