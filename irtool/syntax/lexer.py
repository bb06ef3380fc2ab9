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
from decimal import Decimal
from bisect import bisect_right
from collections.abc import Iterator
from itertools import accumulate

import numpy as np

from irtool.core.span import Span
from irtool.core.diagnostics import DiagnosticError

Token = tuple[str, str, int, int]

_IDENT = r"[A-Za-z_][A-Za-z0-9_/]*"
# Whitespace and comments without nesting; skipped in front of every token, inside the same match.
_SKIP = r"(?:[ \t\r\n]+|//[^\n]*|/\*[^*/]*(?:(?:\*(?!/)|/(?!\*))[^*/]*)*\*/)*"
# Tokens whose terminal is fixed by the regex; the group name is the grammar terminal.
_PATTERNS = [
    ("NAME", rf"(?!meta\[|match\?|inff(?![A-Za-z0-9_/])){_IDENT}(?:\.{_IDENT})*"),
    ("LOCAL", rf"%{_IDENT}"),
    ("GRAPH", r"%[0-9]+"),
    ("NUMBER", r"-*(?:[0-9][0-9.eE+\-]*(?:[fi][0-9]*)?|inff(?![A-Za-z0-9_/]))"),
    ("GLOBAL", rf"@{_IDENT}"),
    ("STRING", r'"[^"]*"'),
    ("META", r"meta\[[^\]\s]+\]\[[0-9]+\]"),
    ("VERSION", r'#\[version\s*=\s*"[^"\n]*"\]'),
    ("METADATA", r"#\[metadata\]"),
    ("INT_LIST", r"\[[ \t\r\n]*-*[0-9]+(?:[ \t\r\n]*,[ \t\r\n]*-*[0-9]+)*[ \t\r\n]*,?[ \t\r\n]*\]"),
    ("EQ_OP", r"==|!="),
    ("CMP_OP", r"<=|>=|<|>"),
    ("ADD_OP", r"\+|-(?!>)"),
    ("MUL_OP", r"\*|/(?![/*])"),
]
_SPECIAL = ("COMMENT", "END_OF_TEXT", "ERROR")


class Lexer:
    """The compiled tokenizer for one grammar: `literals` maps keyword and punctuation text to
    the grammar's terminal names (Lark names them, e.g. `(` is LPAR)."""

    def __init__(self, literals: dict[str, str]) -> None:
        self.keywords = {text: name for text, name in literals.items() if text[0].isalpha() or text == "_"}
        self.keywords.update({"True": "BOOL", "False": "BOOL"})
        marks = sorted((text for text in literals if text not in self.keywords), key=len, reverse=True)
        groups = [f"(?P<{name}>{rx})" for name, rx in _PATTERNS]
        if "match?" in literals:
            groups.insert(0, f"(?P<{literals['match?']}>match\\?)")
            self.keywords.pop("match?", None)
        groups += [f"(?P<{literals[text]}>{re.escape(text)})" for text in marks]
        groups += [r"(?P<COMMENT>/\*)", r"(?P<END_OF_TEXT>\Z)", r"(?P<ERROR>.)"]
        # Terminals whose token is just (terminal, text): everything but NAME and the specials.
        self.plain = frozenset(re.findall(r"\(\?P<(\w+)>", "".join(groups))) - {"NAME", "METADATA", *_SPECIAL}
        self.regex = re.compile(_SKIP + "(?:" + "|".join(groups) + ")", re.DOTALL)


class SourceText:
    """A source file: its text, name, and offset -> (line, column) conversion for spans."""

    def __init__(self, text: str, name: str, line_offset: int = 0) -> None:
        self.text = text
        self.name = name
        self.line_offset = line_offset
        # Offsets at which each line starts.
        self.line_starts = [0, *accumulate(len(line) + 1 for line in text.split("\n"))][:-1]

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


def tokenize(src: SourceText, lexer: Lexer, chunk: int = 4096) -> Iterator[list[Token]]:
    """The tokens of `src`, in lists of about `chunk` tokens (one generator step per list keeps
    the per-token cost to one regex match and one tuple). A `#[metadata]` token carries the
    rest of the file as its text and ends the stream."""
    text = src.text
    finditer = lexer.regex.finditer
    keywords = lexer.keywords
    plain = lexer.plain
    out: list[Token] = []
    append = out.append
    pos = 0
    while True:
        for m in finditer(text, pos):
            kind = m.lastgroup
            start, end = m.span(kind)
            if kind == "NAME":
                word = text[start:end]
                append((keywords.get(word, "NAME"), word, start, end))
            elif kind in plain:
                append((kind, text[start:end], start, end))
                if len(out) >= chunk:
                    yield out
                    out = []
                    append = out.append
            elif kind == "METADATA":
                append(("METADATA", text[start:], start, len(text)))
                yield out
                return
            elif kind == "END_OF_TEXT":
                yield out
                return
            elif kind == "ERROR":
                raise _bad_character(src, start)
            else:   # COMMENT: a nested (or unterminated) block comment
                pos = _skip_nested_comment(src, start)
                break
        else:
            yield out
            return


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
_INT64_DIGITS = 19   # no longer run of digits fits any integer width (and int() refuses thousands)
_FLOATS = {16: np.float16, 32: np.float32, 64: np.float64}


class LiteralError(ValueError):
    """A malformed or out-of-range number; the parser locates it at the token."""


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _split(text: str) -> tuple[bool, str, str]:
    """(negative, digits, suffix) of a NUMBER token: an odd run of leading `-` negates."""
    body = text.lstrip("-")
    negative = (len(text) - len(body)) % 2 == 1
    for marker in ("f", "i"):
        at = body.find(marker)
        if at >= 0 and body != "inff":
            return negative, body[:at], body[at:]
    return negative, body, ""


def number_value(text: str) -> tuple[int | float, str]:
    """(value, dtype) of a NUMBER token: `-05` → (-5, int32), `1e-05f` → (1e-05, float32).

    Rules (TVM's tokenizer): an odd run of leading `-` negates; suffix `f`/`fN` makes a float
    (width 16, 32 or 64), `i`/`iN` an integer (8, 16, 32, 64); without a suffix an integer is
    int32, or int64 if it does not fit; a value out of range for its width is an error, and a
    number with a fraction or exponent but no `f` is an error. A float's value is the double
    nearest its digits; it is out of range only if the digits round to infinity in its width
    (so `3.4028235e+38f`, what numpy prints for the largest float32, is in range).
    """
    negative, body, suffix = _split(text)
    if body == "inff":
        return (-math.inf if negative else math.inf), "float32"
    if suffix.startswith("f"):
        width = int(suffix[1:] or 32)
        if width not in _FLOATS:
            raise LiteralError(f"invalid float width {width} in `{_shown(text)}` (use f16, f32 or f64)")
        if not _FLOAT_BODY.fullmatch(body):
            raise LiteralError(f"invalid floating point number `{_shown(text)}`")
        value = float(body)
        if math.isinf(_nearest(body, value, width)):
            raise LiteralError(f"floating point number `{_shown(text)}` unrepresentable in width {width}")
        return (-value if negative else value), f"float{width}"
    if not _INT_BODY.fullmatch(body):
        hint = "; a floating point literal needs an `f` suffix, e.g. `1.5f`" if _FLOAT_BODY.fullmatch(body) else ""
        raise LiteralError(f"invalid integer number `{_shown(text)}`{hint}")
    width = int(suffix[1:] or 32) if suffix else 32
    if width not in _INT_RANGE:
        raise LiteralError(f"invalid integer width {width} in `{_shown(text)}` (use i8, i16, i32 or i64)")
    digits = body.lstrip("0") or "0"
    value = (-int(digits) if negative else int(digits)) if len(digits) <= _INT64_DIGITS else None
    low, high = _INT_RANGE[width]
    if value is None or not low <= value <= high:
        if not suffix and value is not None and _INT_RANGE[64][0] <= value <= _INT_RANGE[64][1]:
            return value, "int64"   # TVM: an unsuffixed literal too big for int32 is int64
        raise LiteralError(f"integer literal `{_shown(text)}` unrepresentable in width {width}")
    return value, f"int{width}"


def float_literal(text: str) -> np.floating:
    """A float NUMBER token's value as a scalar of its dtype, its digits rounded once to that
    width (call after `number_value` accepted the token)."""
    negative, body, suffix = _split(text)
    if body == "inff":
        return np.float32(-math.inf if negative else math.inf)
    near = _nearest(body, float(body), int(suffix[1:] or 32))
    return -near if negative else near


def _nearest(digits: str, value: float, width: int) -> np.floating:
    """The float of `width` bits nearest the decimal `digits` (≥ 0), whose nearest double is `value`.

    Rounding through the double (rounding twice) differs from rounding once only when the double
    lands exactly halfway between two floats of the width while the digits do not: then the
    digits, compared exactly, decide.
    """
    kind = _FLOATS[width]
    with np.errstate(over="ignore"):
        near = kind(value)
        if width == 64 or math.isinf(value) or float(near) == value:
            return near
        other = np.nextafter(near, kind(math.inf if float(near) < value else 0))
        low, high = sorted((float(near), float(other)))
        if math.isinf(high):
            high = 2.0 ** np.finfo(kind).maxexp   # where the next float would be, were there one
        middle = (low + high) / 2   # exact: both are floats of a narrower width
        if value != middle:
            return near
        exact = Decimal(digits)
        if exact == Decimal(middle):
            return near   # a true tie: numpy's round-half-to-even is the rule
        return kind(high) if exact > Decimal(middle) else kind(low)
