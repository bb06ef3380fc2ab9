"""The tokenizer shared by irtool's text formats (Relay now, TIR later): one compiled regex.

It implements the terminals at the bottom of `grammar/relay.lark`: identifiers (a dotted run is
one NAME), `%local`, `%0`, `@global`, numbers with TVM's suffix and `-` rules, strings,
`meta[Kind][i]`, the `#[version]` header and the `#[metadata]` tail, operators and
punctuation; whitespace and comments (`//`, nestable `/* */`) are skipped. Tokens are plain
tuples `(terminal, text, start, end)` with character offsets; `SourceText` turns offsets into
1-based line/column spans only when a node or a diagnostic needs one.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterator
from itertools import accumulate

import numpy as np

from irtool.ir.span import Span
from irtool.syntax.diagnostics import DiagnosticError

Token = tuple[str, str, int, int]

_IDENT = r"[A-Za-z_][A-Za-z0-9_/]*"
# Order matters: earlier alternatives win at the same position.
_MASTER = re.compile("|".join([
    # Whitespace and comments without nesting, in one run (the common case).
    r"(?P<SKIP>(?:[ \t\r\n]+|//[^\n]*|/\*(?:[^*/]|\*(?!/)|/(?!\*))*\*/)+)",
    r"(?P<COMMENT>/\*)",                       # a nested or unterminated block comment
    r"(?P<META>meta\[[^\]\s]+\]\[[0-9]+\])",
    r'(?P<VERSION>#\[version\s*=\s*"[^"\n]*"\])',
    r"(?P<METADATA>#\[metadata\])",
    r"(?P<PMATCH>match\?)",
    r"(?P<NUMBER>-*(?:[0-9][0-9.eE+\-]*(?:[fi][0-9]*)?|inff(?![A-Za-z0-9_/])))",
    rf"(?P<LOCAL>%{_IDENT})",
    r"(?P<GRAPH>%[0-9]+)",
    rf"(?P<GLOBAL>@{_IDENT})",
    r'(?P<STRING>"[^"]*")',
    rf"(?P<NAME>{_IDENT}(?:\.{_IDENT})*)",
    r"(?P<OP>->|=>|==|!=|<=|>=|[-<>+*/])",
    r"(?P<PUNCT>[(){}\[\],.;:=?])",
    r"(?P<ERROR>.)",
]), re.DOTALL)

# Operator text -> grammar terminal for the operators that share a precedence level.
_OPERATORS = {"==": "EQ_OP", "!=": "EQ_OP", "<=": "CMP_OP", ">=": "CMP_OP", "<": "CMP_OP",
              ">": "CMP_OP", "+": "ADD_OP", "-": "ADD_OP", "*": "MUL_OP", "/": "MUL_OP"}
_SAME = ("NUMBER", "LOCAL", "GRAPH", "GLOBAL", "STRING", "META", "VERSION")


class SourceText:
    """A source file: its text, name, and offset -> (line, column) conversion for spans."""

    def __init__(self, text: str, name: str, line_offset: int = 0) -> None:
        self.text = text
        self.name = name
        self.line_offset = line_offset
        # Offsets at which each line starts.
        self.line_starts = [0, *accumulate(len(line) + 1 for line in text.split("\n"))][:-1]

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self.line_starts, offset)
        return line + self.line_offset, offset - self.line_starts[line - 1] + 1

    def span(self, start: int, end: int) -> Span:
        starts = self.line_starts
        line = bisect_right(starts, start)
        if line == len(starts) or end < starts[line]:
            end_line = line
        else:
            end_line = bisect_right(starts, end)
        return make_span(self.name, line + self.line_offset, start - starts[line - 1] + 1,
                         end_line + self.line_offset, end - starts[end_line - 1] + 1)

    def error(self, message: str, start: int, end: int) -> DiagnosticError:
        return DiagnosticError(message, self.span(start, max(end, start + 1)))


_new_span = Span.__new__
_set_source, _set_line, _set_col, _set_end_line, _set_end_col = (
    Span.__dict__[f].__set__ for f in ("source", "line", "col", "end_line", "end_col"))


def make_span(source: str, line: int, col: int, end_line: int, end_col: int) -> Span:
    """`Span(...)` without the frozen dataclass's slow `__init__` (half the cost; spans are per node)."""
    span = _new_span(Span)
    _set_source(span, source)
    _set_line(span, line)
    _set_col(span, col)
    _set_end_line(span, end_line)
    _set_end_col(span, end_col)
    return span


def tokenize(src: SourceText, literals: dict[str, str], chunk: int = 4096) -> Iterator[list[Token]]:
    """The tokens of `src`, in lists of about `chunk` tokens (one generator step per list keeps
    the per-token cost to the regex match and a tuple). `literals` maps keyword and
    punctuation text to its grammar terminal. A `#[metadata]` token carries the rest of the
    file as its text and ends the stream."""
    text = src.text
    size = len(text)
    finditer = _MASTER.finditer
    same = frozenset(_SAME)
    operators = _OPERATORS
    out: list[Token] = []
    append = out.append
    pos = 0
    while pos < size:
        for m in finditer(text, pos):
            kind = m.lastgroup
            if kind == "SKIP":
                continue
            start, end = m.span()
            if kind == "NAME":
                word = text[start:end]
                append((literals.get(word) or ("BOOL" if word in ("True", "False") else "NAME"), word, start, end))
            elif kind == "PUNCT":
                append((literals[text[start]], text[start], start, end))
            elif kind in same:
                append((kind, text[start:end], start, end))
            elif kind == "OP":
                op = text[start:end]
                append((operators.get(op) or literals[op], op, start, end))
            elif kind == "PMATCH":
                append((literals["match?"], "match?", start, end))
            elif kind == "COMMENT":
                pos = _skip_nested_comment(src, start)
                break
            elif kind == "METADATA":
                append(("METADATA", text[start:], start, size))
                pos = size
                break
            else:
                raise _bad_character(src, start)
            if len(out) >= chunk:
                yield out
                out = []
                append = out.append
        else:
            break
    yield out


def _skip_nested_comment(src: SourceText, start: int) -> int:
    """The offset after the `/* ... */` comment opening at `start`, honouring nesting."""
    text = src.text
    depth = 0
    pos = start
    while True:
        opening = text.find("/*", pos)
        closing = text.find("*/", pos)
        if closing < 0:
            raise src.error("unterminated block comment", start, start + 2)
        if 0 <= opening < closing:
            depth += 1
            pos = opening + 2
        else:
            depth -= 1
            pos = closing + 2
            if depth == 0:
                return pos


def _bad_character(src: SourceText, start: int) -> DiagnosticError:
    char = src.text[start]
    if char == '"':
        return src.error("unterminated string literal", start, start + 1)
    if char == "#":
        return src.error("unknown `#[...]` directive; only `#[version = \"0.0.5\"]` and `#[metadata]` exist",
                         start, start + 1)
    return src.error(f"unexpected character {char!r}", start, start + 1)


# ---- Number literals (TVM's rules) -------------------------------------------------------------

_INT_BODY = re.compile(r"[0-9]+")
_FLOAT_BODY = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
_INT_RANGE = {8: (-2**7, 2**7 - 1), 16: (-2**15, 2**15 - 1), 32: (-2**31, 2**31 - 1), 64: (-2**63, 2**63 - 1)}
_FLOAT_MAX = {16: 65504.0, 32: float(np.finfo(np.float32).max), 64: float(np.finfo(np.float64).max)}


class LiteralError(ValueError):
    """A malformed or out-of-range number; the parser locates it at the token."""


def number_value(text: str) -> tuple[int | float, str]:
    """(value, dtype) of a NUMBER token: `-05` → (-5, int32), `1e-05f` → (1e-05, float32).

    Rules (TVM's tokenizer): an odd run of leading `-` negates; suffix `f`/`fN` makes a float
    (width 16, 32 or 64), `i`/`iN` an integer (8, 16, 32, 64); without a suffix an integer is
    int32, or int64 if it does not fit; a value out of range for its width is an error, and a
    number with a fraction or exponent but no `f` is an error.
    """
    body = text.lstrip("-")
    negative = (len(text) - len(body)) % 2 == 1
    if body == "inff":
        return (-math.inf if negative else math.inf), "float32"
    suffix = ""
    for marker in ("f", "i"):
        at = body.find(marker)
        if at >= 0:
            body, suffix = body[:at], body[at:]
            break
    if suffix.startswith("f"):
        width = int(suffix[1:] or 32)
        if width not in _FLOAT_MAX:
            raise LiteralError(f"invalid float width {width} in `{text}` (use f16, f32 or f64)")
        if not _FLOAT_BODY.fullmatch(body):
            raise LiteralError(f"invalid floating point number `{text}`")
        value = float(body)
        if math.isinf(value) or value > _FLOAT_MAX[width]:
            raise LiteralError(f"floating point number `{text}` unrepresentable in width {width}")
        return (-value if negative else value), f"float{width}"
    if not _INT_BODY.fullmatch(body):
        hint = "; a floating point literal needs an `f` suffix, e.g. `1.5f`" if _FLOAT_BODY.fullmatch(body) else ""
        raise LiteralError(f"invalid integer number `{text}`{hint}")
    value = -int(body) if negative else int(body)
    width = int(suffix[1:] or 32) if suffix else 32
    if width not in _INT_RANGE:
        raise LiteralError(f"invalid integer width {width} in `{text}` (use i8, i16, i32 or i64)")
    low, high = _INT_RANGE[width]
    if not low <= value <= high:
        if not suffix and _INT_RANGE[64][0] <= value <= _INT_RANGE[64][1]:
            return value, "int64"   # TVM: an unsuffixed literal too big for int32 is int64
        raise LiteralError(f"integer literal `{text}` unrepresentable in width {width}")
    return value, f"int{width}"
