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
from k3diag.parse.markdown_head import _FENCE_RE, HEAD_CHARS, is_markdown  # noqa: F401  (is_markdown re-exported)
from k3diag.parse.registry import FormatSpec, parser_module
from k3diag.parse.text import Section


# A code block shorter than this quotes part of an output (what the author chose to show); a longer one is
# taken for the whole output. Parsers judge what an excerpt does not show as unknown (`Section.excerpt`).
EXCERPT_BLOCK_LINES = 100


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
            lines = section.text.count("\n") + 1
            if lines < EXCERPT_BLOCK_LINES:
                section = replace(section, excerpt=f"it is a code block of {lines} lines in a Markdown document")
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
