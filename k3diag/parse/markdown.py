"""A Markdown document (a README, notes, an issue body saved as `.md`): which of its lines are outputs.

In a document the outputs sit in fenced code blocks; the prose around them (headings, tables, lists,
sentences with `inline code`) is the author's words, even where it quotes a tool's lines: a table
row citing `misc/ibvwrap.cc:63 NCCL WARN ...` is not a warning NCCL printed. So a document is read
as its code blocks only (`split_markdown`), and what its prose quotes is said, not read.

A text is a document when its head holds what only a document has: a code fence (```` ``` ```` or
`~~~`, CommonMark) or a table as GitHub renders one, a header row then a delimiter row (`| --- | --- |`)
of as many cells. A delimiter-like line alone is not enough: tools draw boxes with `|-----|` rules (PyTorch's
`torch.cuda.memory_summary()` in a training log next to NCCL's lines), and a heading is no sign either
(nccl-tests starts its lines with `# `). A fence that is never closed runs
to the end of the text (as CommonMark renders it): a paste that starts with ```` ```bash ```` and was
cut keeps all its lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from k3diag.model.words import counted
from k3diag.parse.detect import detect, split_sections
from k3diag.parse.lazy_re import lazy
from k3diag.parse.registry import FormatSpec, parser_module
from k3diag.parse.text import Section

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


@dataclass(frozen=True)
class CodeBlock:
    """The content of one fenced code block of a Markdown document."""

    first_line: int  # 1-based line of the document where the block's content starts
    text: str


@dataclass(frozen=True)
class MarkdownText:
    """A document cut into its code blocks and its prose; the prose keeps every line (the blocks'
    emptied), so its line numbers are the document's."""

    blocks: tuple[CodeBlock, ...]
    prose: str


def split_markdown(text: str) -> MarkdownText:
    lines = text.split("\n")
    prose: list[str] = []
    blocks: list[CodeBlock] = []
    fence: str | None = None  # the opening fence of the block we are in
    block: list[str] = []
    block_start = 0
    for number, line in enumerate(lines, 1):
        found = _FENCE_RE.match(line) if ("```" in line or "~~~" in line) else None
        if fence is None:
            prose.append("" if found is not None else line)
            if found is not None and not (found.group("fence")[0] == "`" and "`" in found.group("info")):
                fence = found.group("fence")
                info = found.group("info").strip()
                # `` ```bash ``: a language word. `` ```ai:480850:480850 [0] NCCL INFO Bootstrap ... ``: the
                # author typed the first line right after the fence (GitHub shows it as the info string).
                glued = " " in info or "\t" in info
                block, block_start = ([info], number) if glued else ([], number + 1)
            elif found is not None:  # ``` `code` ``` on one line: an inline span, prose
                prose[-1] = line
            continue
        prose.append("")
        if found is not None and found.group("fence")[0] == fence[0] and len(found.group("fence")) >= len(fence) \
                and not found.group("info").strip():
            if block:
                blocks.append(CodeBlock(block_start, "\n".join(block)))
            fence = None
            continue
        block.append(line)
    if fence is not None and block:
        blocks.append(CodeBlock(block_start, "\n".join(block)))
    return MarkdownText(blocks=tuple(blocks), prose="\n".join(prose))


@dataclass
class DocumentRead:
    """What a document holds: its code blocks' outputs (each section with its format), and sentences
    saying what was seen but not read, and why."""

    sections: list[tuple[Section, FormatSpec]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_document(text: str, name: str, command: str | None = None) -> DocumentRead:
    """The outputs in a document's code blocks (`text` normalized). A format whose parser sets
    `MIN_LINES_IN_DOCUMENT` (NCCL logs) is read only when the document's code blocks hold that many of
    its lines (`count_lines`): a README quoting three NCCL lines shows what a log looks like, it is not
    one run's log, and judging it as one would report that run's problems."""
    document = split_markdown(text)
    found: list[tuple[Section, FormatSpec]] = []
    # Each block is an output of its own (the author fenced each one), cut further where it holds several.
    for block in document.blocks:
        for section in split_sections(block.text, command, normalized=True):
            section = replace(section, first_line=section.first_line + block.first_line - 1)
            spec = detect(section.text, section.command)
            if spec is not None:
                found.append((section, spec))
    read = DocumentRead()
    quoted: set[str] = set()
    for spec in dict.fromkeys(spec for _, spec in found):
        module = parser_module(spec)
        minimum = getattr(module, "MIN_LINES_IN_DOCUMENT", None)
        if not minimum:
            continue
        parts = [section for section, its in found if its is spec]
        total = sum(module.count_lines(section.text) for section in parts)
        if total >= minimum:
            continue
        quoted.add(spec.name)
        spans = [_content_lines(section) for section in parts]
        where = ", ".join(f"{first}-{last}" if last > first else str(first) for first, last in spans)
        one_line = len(spans) == 1 and spans[0][0] == spans[0][1]
        read.notes.append(
            f"{name}: {'line' if one_line else 'lines'} {where} of this Markdown document quote {counted(total, spec.name + ' line')} in a code "
            f"block: too few to be a run's log (a document needs {minimum} across its code blocks), so "
            f"{'it was' if total == 1 else 'they were'} not judged; "
            "give the log itself as a file to have it read")
    read.sections = [(section, spec) for section, spec in found if spec.name not in quoted]
    # What the prose quotes is said when it is not what the code blocks hold: a document read for nothing
    # else (a table of sources citing NCCL warnings), or an output pasted outside the blocks; prose about
    # the NCCL log the document holds ("my NCCL INFO log is below") says nothing new.
    held = {spec.name for _, spec in read.sections}
    prose = sorted({spec.name for section in split_sections(document.prose, normalized=True)
                    if (spec := detect(section.text)) is not None} - held)
    if prose:
        read.notes.append(
            f"{name} is a Markdown document: only its code blocks are read as outputs; its prose (outside code blocks) "
            f"quotes {', '.join(prose)} lines, which were not read (put an output in a ``` block, or give it as its "
            "own file, to have it read)")
    return read


def _content_lines(section: Section) -> tuple[int, int]:
    """The first and last non-blank line of a section."""
    lines = section.text.split("\n")
    filled = [index for index, line in enumerate(lines) if line.strip()]
    if not filled:
        return section.first_line, section.first_line
    return section.first_line + filled[0], section.first_line + filled[-1]
