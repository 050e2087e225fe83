"""A Markdown document (a README, notes, an issue body saved as `.md`): which of its lines are outputs.

In a document the outputs sit in fenced code blocks; the prose around them (headings, tables, lists,
sentences with `inline code`) is the author's words, even where it quotes a tool's lines: a table
row citing `misc/ibvwrap.cc:63 NCCL WARN ...` is not a warning NCCL printed. So a document is read
as its code blocks only (`split_markdown`), and what its prose quotes is said, not read. The prose still says
which command printed a block: a block that holds only a command, or an inline-code command in the sentence right
before a block (`Output of `nvidia-smi topo -m`:`), gives the block its command (`read_document`).

A text is a document when its head holds what only a document has: a code fence (```` ``` ```` or
`~~~`, CommonMark) or a table as GitHub renders one, a header row then a delimiter row (`| --- | --- |`)
of as many cells. A delimiter-like line alone is not enough: tools draw boxes with `|-----|` rules (PyTorch's
`torch.cuda.memory_summary()` in a training log next to NCCL's lines), and a heading is no sign either
(nccl-tests starts its lines with `# `). A fence that is never closed runs
to the end of the text (as CommonMark renders it): a paste that starts with ```` ```bash ```` and was
cut keeps all its lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from k3diag.model.words import counted
from k3diag.parse.detect import detect, split_sections
from k3diag.parse.markdown_head import _FENCE_RE, HEAD_CHARS, is_markdown  # noqa: F401  (is_markdown re-exported)
from k3diag.parse.registry import FormatSpec, parser_module
from k3diag.parse.text import Section, prompt_command


# A code block shorter than this quotes part of an output (what the author chose to show); a longer one is
# taken for the whole output. Parsers judge what an excerpt does not show as unknown (`Section.excerpt`).
EXCERPT_BLOCK_LINES = 100
# A block holding only a command stands for the next block's command across at most this many prose lines
# ("Output:", "gives:"); more prose between them is about something else.
MAX_PROSE_AFTER_COMMAND = 2
_INLINE_CODE_RE = re.compile(r"`([^`\n]+)`")


def known_command(text: str) -> str | None:
    """`text` as a command k3diag knows the output of (`nvidia-smi topo -m`, `$ lspci -vvv`), else None."""
    text = text.strip()
    if not text or len(text) > 300:
        return None
    if prompt_command(text) is not None:
        return prompt_command(text)
    # a bare command, not a tool's first line that starts with its name (`nvbandwidth Version: v0.5`)
    return None if ": " in text or "\t" in text else prompt_command("$ " + text)


def command_only(text: str) -> str | None:
    """The command of a block that holds only one (a prompt line or a bare command, blank lines aside)."""
    filled = [line for line in text.split("\n") if line.strip()]
    return known_command(filled[0]) if len(filled) == 1 else None


def inline_command(sentence: str) -> str | None:
    """The command an inline-code span of a sentence names (`Output of `nvidia-smi topo -m`:`), the last one
    when several do; None when no span is a command k3diag knows."""
    found = None
    for span in _INLINE_CODE_RE.findall(sentence):
        found = known_command(span) or found
    return found


def _bare_command_head(text: str) -> tuple[str, str | None]:
    """A block whose first line is a bare command (`nvidia-smi topo -m`, no prompt) then its output: the
    text with that line written as a prompt line (line numbers stay), and the command; else the text as it is."""
    head, sep, rest = text.partition("\n")
    if not sep or not rest.strip() or prompt_command(head) is not None:
        return text, None  # a prompt line is `split_sections`'s to read
    found = known_command(head)
    # read as the prompt line it stands for, which keeps the output below it in one section with it
    return ("$ " + head.strip() + "\n" + rest, found) if found else (text, None)


@dataclass(frozen=True)
class CodeBlock:
    """The content of one fenced code block of a Markdown document."""

    first_line: int  # 1-based line of the document where the block's content starts
    text: str
    # the last line of prose right before the fence (blank lines aside), and how many prose lines stand
    # between the previous block and this one: what says which command printed the block
    lead: str = ""
    prose_between: int = 0


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
    lead, between = "", 0  # the prose since the previous block: its last line, and how many lines
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
                block_lead, block_between = lead, between
            elif found is not None:  # ``` `code` ``` on one line: an inline span, prose
                prose[-1] = line
            if found is None or fence is None:
                if line.strip():
                    lead, between = line.strip(), between + 1
            continue
        prose.append("")
        if found is not None and found.group("fence")[0] == fence[0] and len(found.group("fence")) >= len(fence) \
                and not found.group("info").strip():
            if block:
                blocks.append(CodeBlock(block_start, "\n".join(block), block_lead, block_between))
            fence = None
            lead, between = "", 0
            continue
        block.append(line)
    if fence is not None and block:
        blocks.append(CodeBlock(block_start, "\n".join(block), block_lead, block_between))
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
    # Its command (what says which tool printed it, with which options) is, in this order: a prompt line in
    # the block (`split_sections`), a bare command on its first line, the block before it when that holds only
    # a command, an inline-code command in the sentence right before it; else the document's.
    pending: str | None = None  # a block that held only a command: the next block is its output
    for block in document.blocks:
        alone = command_only(block.text)
        if alone is not None:
            pending = alone
            continue
        text, own = _bare_command_head(block.text)
        block_command = own or (pending if block.prose_between <= MAX_PROSE_AFTER_COMMAND else None) \
            or inline_command(block.lead) or command
        pending = None
        # the output starts the block's first section (which carries the command), blank lines above it aside
        skipped = len(text) - len(text.lstrip("\n"))
        for section in split_sections(text[skipped:], block_command, normalized=True):
            section = replace(section, first_line=section.first_line + block.first_line - 1 + skipped)
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
