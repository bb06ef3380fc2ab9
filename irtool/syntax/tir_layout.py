"""Line breaking for printed TIR: a statement longer than `WIDTH` columns is broken inside its
calls, accesses and operator chains, so that a kernel reads (and diffs) as lines of at most
`WIDTH` characters. The parser ignores line breaks, so the broken text reads back the same.

The printer builds each expression as a `Group` (`head item, item, ... tail`: `max(` ... `)`,
`%A[` ... `]`, or an operator chain `a + b - c` with an empty head and tail) next to its one-line
text. `layout` keeps a group on one line when it fits; otherwise it fills lines with whole items,
an item that fits on no line being broken the same way one level deeper. Lines continuing a
statement are indented one level (`flatten_entries` indents nested entry lists).
"""

from __future__ import annotations

from collections.abc import Sequence

from irtool.syntax.text_format import Entries

WIDTH = 120
INDENT = 2
# A group nested deeper than this in broken groups is printed on one line whatever its length:
# the layout recurses once per broken group (a fused chain of thousands of calls stays at a few
# dozen frames), and such a line has little room left anyway.
MAX_NESTING = 48
# A group opening on a line that already holds text (`%out[...] = max(`) needs this much room.
HUG_ROOM = 24


class Group:
    """`head` + items separated by `seps` + `tail`, with its one-line text `flat`."""

    __slots__ = ("flat", "head", "items", "seps", "tail")

    def __init__(self, head: str, items: Sequence[Doc], seps: Sequence[str], tail: str) -> None:
        self.head = head
        self.items = tuple(items)
        self.seps = tuple(seps)
        self.tail = tail
        parts = [head]
        for i, item in enumerate(self.items):
            parts.append(flat(item))
            if i < len(self.seps):
                parts.append(self.seps[i])
        parts.append(tail)
        self.flat = "".join(parts)

    def is_chain(self) -> bool:
        """An operator chain (no brackets of its own)."""
        return not self.head and not self.tail


Doc = str | Group


def flat(doc: Doc) -> str:
    return doc if type(doc) is str else doc.flat  # type: ignore[union-attr]


def call(head: str, items: Sequence[Doc], tail: str = ")") -> Group:
    """`head(a, b, ...)`-shaped text (`max(`, `%A[`, `ramp(`), items separated by commas."""
    return Group(head, items, [", "] * (len(items) - 1), tail)


def chain(lhs: Doc, op: str, rhs: Doc) -> Group:
    """`lhs op rhs`, continuing `lhs` when it is a chain already (a left-associated sum stays one
    group, however long)."""
    sep = f" {op} "
    if type(lhs) is Group and lhs.is_chain():
        return Group("", [*lhs.items, rhs], [*lhs.seps, sep], "")
    return Group("", [lhs, rhs], [sep], "")


def _fits(depth: int, length: int) -> bool:
    return depth * INDENT + length <= WIDTH


def layout(doc: Doc, depth: int, prefix: str = "", suffix: str = "", nesting: int = 0) -> Entries:
    """`prefix` + `doc` + `suffix` as entries at `depth` (nested lists one level deeper);
    `nesting` counts the broken groups around it."""
    if type(doc) is str or nesting >= MAX_NESTING or _fits(depth, len(prefix) + len(flat(doc)) + len(suffix)):
        return [prefix + flat(doc) + suffix]
    assert isinstance(doc, Group)
    out: Entries = []

    def emit(entries: Entries, level: int) -> None:
        if level == depth:
            out.extend(entries)
        else:
            out.append(entries)
    line, at = prefix + doc.head, depth      # the line being filled and its depth
    last = len(doc.items) - 1
    for i, item in enumerate(doc.items):
        end = doc.seps[i].rstrip() if i < last else doc.tail + suffix
        join = "" if not line or line[-1] in "([ " else " "
        piece = flat(item) + end
        if _fits(at, len(line) + len(join) + len(piece)):
            line += join + piece
            continue
        if type(item) is Group and item.head and line and _fits(at, len(line) + len(join) + len(item.head) + HUG_ROOM):
            emit(layout(item, at, line + join, end, nesting + 1), at)
            line, at = "", depth + 1
            continue
        if line.strip():
            emit([line.rstrip()], at)
        at = depth + 1 if out else depth
        if _fits(at, len(piece)):
            line = piece
            continue
        emit(layout(item, at, "", end, nesting + 1), at)
        line, at = "", depth + 1
    if line.strip():
        emit([line.rstrip()], at)
    return out
