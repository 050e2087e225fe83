"""Where a fact came from: every record carries one so findings can quote their evidence."""

from __future__ import annotations

from dataclasses import dataclass

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
