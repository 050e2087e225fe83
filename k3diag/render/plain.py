"""A plain text writer for the terminal report: aligned columns, colour only on a terminal, no rich.

Piped output (a file, `less`, `grep`, CI logs) gets plain lines: no box drawing, no escape codes, and the
report does not import rich at all, which keeps `k3diag analyze` quick to start. On a terminal the same lines
get ANSI colour unless NO_COLOR is set. Every string is shown through `escape_terminal`, so text that came
from an input (a GPU name, a log line, a path) cannot move the cursor, retitle the window or forge a line.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import Callable, Sequence, TextIO

from k3diag.render.escape import escape_terminal

_SGR = {
    "bold": "1", "dim": "2", "italic": "3", "red": "31", "green": "32", "yellow": "33", "cyan": "36",
    "bold red": "1;31", "bold green": "1;32", "bold yellow": "1;33", "bold cyan": "1;36",
}
# A terminal whose width cannot be read is taken to be this wide.
PIPED_WIDTH = 120


class Out:
    """Lines and tables to a stream; counts what it wrote (the report aims at one screen)."""

    def __init__(self, stream: TextIO | None = None, color: bool | None = None, width: int | None = None) -> None:
        self.stream = stream or sys.stdout
        is_terminal = bool(getattr(self.stream, "isatty", None) and self.stream.isatty())
        # NO_COLOR (no-color.org) and TERM=dumb (a terminal that understands no escape sequence: Emacs'
        # shell, some CI log viewers), as rich decides for the other commands
        self.color = (is_terminal and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb") \
            if color is None else color
        if width is None:
            # Piped output is not wrapped: a script or grep reads each fact on one line.
            width = shutil.get_terminal_size((PIPED_WIDTH, 40)).columns if is_terminal else 0
        self.width = max(40, width) if width else 0
        self.lines = 0

    def paint(self, text: str, style: str | None) -> str:
        if not style or not self.color or style not in _SGR:
            return text
        return f"\x1b[{_SGR[style]}m{text}\x1b[0m"

    def line(self, text: str = "", style: str | None = None, indent: int = 0, wrap: bool = False,
             hang: int = 0) -> None:
        """One line (or, with `wrap`, a paragraph wrapped to the width, continuation lines `hang` deeper)."""
        safe = escape_terminal(text)
        if not wrap or not self.width or len(safe) + indent <= self.width:
            self._write(" " * indent + self.paint(safe, style))
            return
        pieces = textwrap.wrap(safe, width=self.width - indent, subsequent_indent=" " * hang,
                               break_long_words=False, break_on_hyphens=False) or [""]
        for piece in pieces:
            self._write(" " * indent + self.paint(piece, style))

    def parts(self, pieces: Sequence[tuple[str, str | None]], indent: int = 0) -> None:
        """One line made of differently styled pieces (a severity label, a title, an id)."""
        self._write(" " * indent + "".join(self.paint(escape_terminal(text), style) for text, style in pieces))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str]], indent: int = 0,
              style: Callable[[int, int, str], str | None] | None = None) -> None:
        """Columns aligned with two spaces between them; `style(row, column, text)` colours a cell."""
        cells = [[escape_terminal(h) for h in headers]] + [[escape_terminal(c) for c in row] for row in rows]
        widths = [max(len(row[i]) if i < len(row) else 0 for row in cells) for i in range(len(headers))]
        for r, row in enumerate(cells):
            out = []
            for c, text in enumerate(row):
                padded = text.ljust(widths[c]) if c < len(row) - 1 else text
                chosen = "bold" if r == 0 else (style(r - 1, c, text) if style else None)
                out.append(self.paint(padded, chosen))
            self._write(" " * indent + "  ".join(out).rstrip())

    def _write(self, text: str) -> None:
        self.stream.write(text.rstrip() + "\n")
        self.lines += 1
