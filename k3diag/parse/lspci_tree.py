"""`lspci -tv` / `lspci -t`: the PCI tree as lspci draws it.

pciutils draws each bus as the children of its bridge: a device token `dd.f` is followed,
for a bridge, by `-[sec-sub]-` and its children, either on the same line (`--` for an only
child, `+-` for the first of several) or on the lines below, at the column where the first
child began. So a token's parent is the bridge (or root bus) that last opened a child column
at the token's column; the walk needs no look-back. Names (`-tv`) follow a device after two
spaces; bridges print none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef
from k3diag.parse.text import MAX_LINE_CHARS, Section, normalize

FORMAT = "lspci-tv"

# `[0000:40]-` (a root bus, with its domain) or `[40]-` (old pciutils without domains);
# `01.1-[43-53]-` (a bridge and its bus range); `00.0` (a device).
_TOKEN_RE = re.compile(
    r"\[(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<root>[0-9a-fA-F]{2})\]-?"
    r"|(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])"
    r"(?:-\[(?P<sec>[0-9a-fA-F]{2})(?:-(?P<sub>[0-9a-fA-F]{2}))?(?P<close>\]-?)?)?"
)
_NAME_RE = re.compile(r"\s{2,}(?P<name>\S.*)$")
# The tree's drawing after the indentation starts with a drawing character, so the two repeats never
# take the same blank (`\s*[-+|\\ ]*` was quadratic in a line of blanks: 20,000 took 3 s).
_TREE_LINE_RE = re.compile(r"^\s*(?:[-+|\\][-+|\\ ]*)?(?:[-+\\]-|-)(?:\[|[0-9a-fA-F]{2}\.[0-7])")
# `|  +-` under a branch: the bars and blanks before the `+-` or `\-`, ending in one of them (as above,
# the blanks are the indentation's or the bars').
_TREE_BRANCH_RE = re.compile(r"^\s*(?:\|[| ]*)?(?<=[| ])[+\\]-")


@dataclass
class TreeNode:
    bdf: str
    parent: str | None  # the bridge above, None on a root bus
    name: str | None = None
    secondary_bus: int | None = None
    subordinate_bus: int | None = None
    root_bus: str | None = None  # "0000:40": the root bus (host bridge) the device hangs under
    source: SourceRef | None = None

    @property
    def is_bridge(self) -> bool:
        return self.secondary_bus is not None


@dataclass
class LspciTreeResult:
    nodes: list[TreeNode] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    lines = [line for line in text.split("\n")[:2000] if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return 0.0
    treeish = sum(1 for line in lines if _TREE_LINE_RE.match(line) or _TREE_BRANCH_RE.match(line))
    roots = sum(1 for line in lines if re.search(r"-\[(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}\]-", line))
    if roots and treeish * 10 >= len(lines) * 7:
        return 0.95
    if treeish >= 3 and treeish * 10 >= len(lines) * 8:
        return 0.7
    return 0.0


def parse(section: Section, input_name: str) -> LspciTreeResult:
    result = LspciTreeResult()
    # column where a child token starts -> (domain, bus, parent bdf, root bus label)
    columns: dict[int, tuple[int, int, str | None, str]] = {}
    domain = 0
    seen: set[str] = set()
    lines = normalize(section.text).split("\n")
    for index, line in enumerate(lines):
        line_no = section.first_line + index
        if len(line) > MAX_LINE_CHARS or not line.strip() or line.lstrip().startswith("#"):
            continue
        ref = SourceRef(input_name, line_no, line.rstrip())
        try:
            _parse_line(line, ref, columns, result, seen, domain)
        except Exception as exc:  # a damaged line costs itself only
            result.warnings.append(f"line {line_no}: could not be read ({type(exc).__name__}: {exc})")
    if not result.nodes:
        result.warnings.append("no devices found in the tree")
    return result


def _parse_line(
    line: str,
    ref: SourceRef,
    columns: dict[int, tuple[int, int, str | None, str]],
    result: LspciTreeResult,
    seen: set[str],
    domain: int,
) -> None:
    position = 0
    while position < len(line):
        match = _TOKEN_RE.search(line, position)
        if match is None:
            return
        if match.group("root") is not None:
            dom = int(match.group("domain"), 16) if match.group("domain") else 0
            bus = int(match.group("root"), 16)
            label = f"{dom:04x}:{bus:02x}"
            # A root bus's children follow its `]-` after a connector (`+-`, `--`).
            columns[match.end() + 2 - (0 if match.group(0).endswith("-") else 1)] = (dom, bus, None, label)
            position = match.end()
            continue
        start = match.start()
        context = _context_for(columns, start)
        if context is None:
            result.warnings.append(f"line {ref.line}: {match.group(0)!r} at column {start + 1} has no parent in the "
                                   "tree drawn above it; skipped")
            position = match.end()
            continue
        dom, bus, parent, root_label = context
        bdf = f"{dom:04x}:{bus:02x}:{int(match.group('dev'), 16):02x}.{match.group('fn')}"
        node = TreeNode(bdf=bdf, parent=parent, root_bus=root_label, source=ref)
        if match.group("sec") is not None:
            node.secondary_bus = int(match.group("sec"), 16)
            node.subordinate_bus = int(match.group("sub"), 16) if match.group("sub") else node.secondary_bus
            if match.group("close") is None:
                result.warnings.append(f"line {ref.line}: the bus range of {bdf} is cut short")
            else:
                # A bridge's children follow its `]-` after one more dash and a connector:
                # `]----00.0` for an only child, `]--+-00.0` for the first of several.
                columns[match.end() + 3 - (0 if match.group(0).endswith("-") else 1)] = (
                    dom, node.secondary_bus, bdf, root_label)
        else:
            name = _NAME_RE.match(line, match.end())
            if name:
                node.name = name.group("name").strip()
        if bdf in seen:
            result.warnings.append(f"line {ref.line}: {bdf} appears twice; the first is kept")
        else:
            seen.add(bdf)
            result.nodes.append(node)
        if node.name is not None:
            return  # the rest of the line is the device's name
        position = match.end()


def _context_for(columns: dict[int, tuple[int, int, str | None, str]], column: int):
    """The bus a token at this column belongs to; tolerate a one-column drift in pasted text."""
    for candidate in (column, column - 1, column + 1):
        if candidate in columns:
            return columns[candidate]
    return None
