"""Whether a text is a Markdown document (`is_markdown`), decided on its head: what `join.build` asks of
every input, kept apart from the document reader (`parse.markdown`, whose records cost ~2 ms to import)
so that a text without a fence or a table loads nothing more. See `parse.markdown` for why a document is
read as its code blocks only.
"""

from __future__ import annotations

from k3diag.parse.lazy_re import lazy

# Up to three spaces before a fence in CommonMark; list items indent theirs further, so any indent is taken.
_FENCE_RE = lazy(r"^[ \t]*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_TABLE_DELIMITER_RE = lazy(r"(?m)^[ \t]*\|(?:[ \t]*:?-{3,}:?[ \t]*\|)+[ \t]*\r?$")
_RULE_CHARS = frozenset("-=:+| \t")
# How much of a text is looked at to decide whether it is a document (as much as the stream sniffer reads).
HEAD_CHARS = 256 * 1024


def is_markdown(head: str) -> bool:
    """Whether `head` (a text's first `HEAD_CHARS`) is a Markdown document's: a code fence, or a table as
    an author writes one (`_has_table`). Headings are no sign: nccl-tests starts its lines with `# `."""
    head = head[:HEAD_CHARS]
    if "```" in head or "~~~" in head:
        if any(_FENCE_RE.match(line) for line in head.split("\n") if "```" in line or "~~~" in line):
            return True
    return "|" in head and "---" in head and _has_table(head)


def _line_before(text: str, start: int) -> tuple[str, int]:
    """The line that ends just before offset `start` (a line's first character) and where it starts."""
    if start <= 0:
        return "", -1
    begin = text.rfind("\n", 0, start - 1) + 1
    return text[begin:start - 1].rstrip("\r"), begin


def _is_rule(line: str) -> bool:
    """A rule of a box a tool draws (`|=====|`, `+-----+-----+`, `|-----+-----|`), or a delimiter row:
    never a table's header. A set test, not a regex: a long line of dashes costs one pass."""
    text = line.strip()
    return (len(text) >= 5 and text[0] in "|+" and text[-1] in "|+" and ("---" in text or "===" in text)
            and set(text) <= _RULE_CHARS)


def _cells(row: str) -> int:
    """How many cells a pipe-table row holds: `| a | b |` and `a | b` hold 2 (`\\|` separates nothing)."""
    inner = row.strip().replace("\\|", "")
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return inner.count("|") + 1


def _has_table(head: str) -> bool:
    """A GitHub-flavoured Markdown table: a header row, then a delimiter row (`| --- | :-: |`) of as many
    cells. A delimiter-like line alone is a tool's frame: PyTorch's `torch.cuda.memory_summary()` draws
    `|=====|`, a one-cell title row, `|-----|` (a one-cell "table" under a rule, which no author writes),
    then rows of five cells between `|-----|` lines; dcgmi and nvidia-smi draw `+-----+-----+` rules."""
    for found in _TABLE_DELIMITER_RE.finditer(head):
        start = head.rfind("\n", 0, found.start()) + 1
        header, header_start = _line_before(head, start)
        if "|" not in header or not header.replace("|", "").strip() or _is_rule(header):
            continue
        above, _ = _line_before(head, header_start)
        if above and _is_rule(above):
            continue  # the title row of a box a tool drew, not a table's header
        if _cells(header) == _cells(found.group(0)):
            return True
    return False
