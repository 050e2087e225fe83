"""Where a fact came from: every record carries one so findings can quote their evidence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# Lines a GPU or PCIe device keeps as its evidence: a few outputs' worth (one `lspci -vvv` block is at
# most ~150 lines). A file repeating one output thousands of times (a log of a command run in a loop)
# would otherwise make every "already kept?" check scan thousands of lines: minutes, not seconds.
MAX_SOURCES_PER_RECORD = 512


@dataclass(frozen=True)
class SourceRef:
    """One line of one input.

    `input` is the name the user knows the input by (a path, or a bundle member such as
    `node.tar.gz:nvidia-smi-topo-m.txt`). `line` is 1-based, None for a library reading.
    `text` is the line as it was read, trimmed of ANSI codes and line endings.
    """

    input: str
    line: int | None
    text: str

    def to_json(self) -> dict:
        return {"input": self.input, "line": self.line, "text": self.text}

    def cite(self) -> str:
        where = f"{self.input}:{self.line}" if self.line is not None else self.input
        return f"{where}: {self.text.strip()}"

    def quoted(self) -> str:
        """`` `Attached GPUs : 8`, line 7 of INPUT ``: the line in a sentence, the padding of `key : value`
        columns collapsed; empty when the line has no text."""
        if not self.text:
            return ""
        where = f"line {self.line} of {self.input}" if self.line is not None else self.input
        return f"`{' '.join(self.text.split())}`, {where}"


# Lines a GPU, NIC, host or the IOMMU state keeps as its evidence (`keep_source`): each input names such a
# record on a line or a few, and what reads them takes the first.
MAX_SOURCES_KEPT = 64


def keep_source(sources: list[SourceRef], ref: SourceRef | None) -> None:
    """Add `ref` to a record's evidence: once, and no more than MAX_SOURCES_KEPT lines in all. An input that
    repeats an output thousands of times (a kernel log of a thousand boots, an nvlink listing pasted in a loop)
    then neither grows the record without bound nor makes each "already kept?" check scan all it kept
    (quadratic: 27 s for a 1 MB kernel log)."""
    if ref is not None and len(sources) < MAX_SOURCES_KEPT and ref not in sources:
        sources.append(ref)


def quoted_aside(source: SourceRef | None) -> str:
    """`` (`Attached GPUs : 8`, line 7 of INPUT)`` to follow a claim in a sentence, or nothing without a line."""
    text = source.quoted() if source is not None else ""
    return f" ({text})" if text else ""


def _filled_ref(input_name: str, line: int | None, text: str) -> SourceRef:
    """`SourceRef(input_name, line, text)`, the same object in under half the time, for parsers that
    make tens of thousands: a frozen dataclass's `__init__` sets each field through
    `object.__setattr__`; filling the new instance's dict is what it amounts to."""
    ref = _new_ref(SourceRef)
    fields = ref.__dict__
    fields["input"], fields["line"], fields["text"] = input_name, line, text
    return ref


_new_ref = SourceRef.__new__
# With __slots__ (no instance dict) the plain constructor is the only way.
source_ref = SourceRef if "__slots__" in SourceRef.__dict__ else _filled_ref


class LineCounter:
    """The line numbers of one text, counted only when a reference made by `counted_ref` is asked
    for its `line`.

    A parser that makes tens of thousands of references in a large text (a 5,000-device
    `lspci -vv`: 45,000 references in 25 MB) would otherwise count the newlines before every line
    it visits, for the few a finding quotes. The count is kept every `_STEP` characters as far as
    it was asked for, so a line is counted from the nearest kept mark before it: asking for every
    line scans the text once, and one line costs at most a `_STEP`-long `str.count`.
    """

    __slots__ = ("_text", "_marks")
    _SHIFT = 16  # marks every 64 Ki characters
    _STEP = 1 << _SHIFT

    def __init__(self, text: str, first_line: int) -> None:
        self._text = text
        self._marks = [first_line]  # _marks[k]: the line number of the character at k * _STEP

    def line_at(self, offset: int) -> int:
        """The line number of the character at `offset` (a newline belongs to the line it ends)."""
        marks, count, shift = self._marks, self._text.count, self._SHIFT
        index = offset >> shift
        while len(marks) <= index:
            done = len(marks)
            marks.append(marks[-1] + count("\n", (done - 1) << shift, done << shift))
        return marks[index] + count("\n", index << shift, offset)


class _CountedRef(SourceRef):
    """A `SourceRef` whose line number is counted on first use (`LineCounter`); made by
    `counted_ref`. To its users it is a `SourceRef`: the same fields, equal to (and hashed as) the
    `SourceRef` of the same input, line and text, and pickled or copied as that plain `SourceRef`
    (never with the text it counts in)."""

    def __getattr__(self, name: str) -> int:
        # Reached only for what the instance does not hold: `line`, until it is counted. The counter is
        # its class's (`counted_refs`: one class per parse).
        fields = self.__dict__
        if name != "line" or "_at" not in fields:
            raise AttributeError(name)
        line = fields["line"] = self._counter.line_at(fields.pop("_at"))
        return line

    def __eq__(self, other: object) -> bool:
        # Tried first also when a plain SourceRef is on the left (a subclass's reflected method wins).
        if isinstance(other, SourceRef):
            return (self.input, self.line, self.text) == (other.input, other.line, other.text)
        return NotImplemented

    __hash__ = SourceRef.__hash__  # defining __eq__ would make the class unhashable

    def __repr__(self) -> str:
        return f"SourceRef(input={self.input!r}, line={self.line!r}, text={self.text!r})"

    def __reduce__(self) -> tuple:
        return _filled_ref, (self.input, self.line, self.text)


def counted_ref(input_name: str, counter: LineCounter, offset: int, text: str) -> SourceRef:
    """The `SourceRef` of the line at `offset` of the text `counter` counts in, its number counted
    only if someone reads `.line` (one reference; a parser making many calls `counted_refs` once)."""
    return counted_refs(input_name, counter)(offset, text)


def counted_refs(input_name: str, counter: LineCounter) -> Callable[[int, str], SourceRef]:
    """`counted_ref` for one input and one counter, as a function of (offset, text): what a parser
    making tens of thousands of references in one text calls. The input's name and the counter are
    attributes of a class made for this call, so each reference holds only its text and offset: two
    entries in its dict instead of four (a third of the time to make one, measured in instructions)."""
    cls = type("_CountedRef", (_CountedRef,), {"input": input_name, "_counter": counter, "__slots__": ()})
    new = cls.__new__

    def make(offset: int, text: str) -> SourceRef:
        ref = new(cls)
        fields = ref.__dict__
        fields["text"], fields["_at"] = text, offset
        return ref

    return make
