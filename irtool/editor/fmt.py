"""The comment-preserving formatter behind `irtool-fmt` and the language server's formatting.

The printer defines the canonical layout, but it starts from the IR, where comments no longer
exist. So formatting prints the parsed program and then puts every comment of the source back:

1. The real tokenizer splits the source into tokens; the text between two tokens is whitespace
   and comments only, so comments are found exactly where the parser skipped them.
2. Each comment is anchored to a token: a comment ending its line after code *trails* the token
   before it, any other comment *leads* the next token, except that comments before the first
   definition describe the file and stay at its top (below the `#[version]` header).
3. Source and printed text are cut into top-level units (header, each `def`/`type`/`primfn` by
   name, since the printer sorts definitions) and each unit's tokens are aligned with `difflib`
   (variable names blanked, as the printer renames and renumbers). A leading comment goes on its
   own line above the printed line holding its token, a trailing one at the end of that line;
   where the printer rewrote code, at the start (leading) or end (trailing) of the rewrite.
4. The result is checked: it must hold exactly the source's comments and print back to itself.
   Anything else is refused with a located error instead of losing a comment.
"""

from __future__ import annotations

import difflib
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

from irtool.core.span import Span
from irtool.core.diagnostics import Diagnostic, DiagnosticError
from irtool.syntax.lexer import SourceText, Token, tokenize
from irtool.syntax.parser import _grammar, parse
from irtool.syntax.printer import print_program

__all__ = ["Comment", "Nesting", "format_text", "nesting", "scan_comments", "too_deep"]

_TOP_KEYWORDS = ("def", "type", "extern", "primfn")
_OPEN, _CLOSE = "([{", ")]}"


# The printer indents each nested block two more spaces, so formatting a file whose blocks nest N
# deep writes about N² bytes of indentation: more than this (and four times the input) is refused.
MAX_INDENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Comment:
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Nesting:
    """How deeply a token list nests brackets."""

    depth: int     # the most brackets `( [ {` open at once
    deepest: int   # the offset of the first bracket reaching that depth (-1 when there is none)
    indent: int    # a lower bound on the indentation the printer writes for the `{` blocks, in bytes


def nesting(tokens: list[Token]) -> Nesting:
    depth = braces = best = indent = 0
    deepest = -1
    for _, text, start, _ in tokens:
        if text in _OPEN:
            depth += 1
            if text == "{":
                braces += 1
                indent += 2 * braces   # at least one line of the block, two spaces per level
            if depth > best:
                best, deepest = depth, start
        elif text in _CLOSE:
            depth = max(depth - 1, 0)
            braces = max(braces - (text == "}"), 0)
    return Nesting(best, deepest, indent)


def lex(text: str, name: str) -> tuple[list[Token], list[Comment]]:
    """The tokens of `text` (as the parser sees them) and the comments between them."""
    src = SourceText(text, name)
    tokens = [token for chunk in tokenize(src, _grammar()[1]) for token in chunk]
    comments: list[Comment] = []
    gap_start = 0
    for token in [*tokens, ("END", "", len(text), len(text))]:
        comments.extend(_gap_comments(text, gap_start, token[2]))
        gap_start = token[3]
    return tokens, comments


def scan_comments(text: str, name: str = "<string>") -> list[Comment]:
    """Every comment of `text`, in order (`text` must tokenize)."""
    return lex(text, name)[1]


def _gap_comments(text: str, start: int, end: int) -> list[Comment]:
    """Comments in text[start:end], which the tokenizer skipped (whitespace and comments only)."""
    found: list[Comment] = []
    pos = start
    while pos < end:
        if text.startswith("//", pos):
            stop = text.find("\n", pos, end)
            stop = end if stop < 0 else stop
        elif text.startswith("/*", pos):
            depth, stop = 0, pos
            while True:   # nested block comment; the tokenizer already checked it terminates
                opening, closing = text.find("/*", stop, end), text.find("*/", stop, end)
                if 0 <= opening < closing:
                    depth, stop = depth + 1, opening + 2
                else:
                    depth, stop = depth - 1, closing + 2
                    if depth == 0:
                        break
        else:
            pos += 1
            continue
        found.append(Comment(pos, stop, text[pos:stop]))
        pos = stop
    return found


@dataclass
class _Unit:
    """A top-level construct's tokens: normalised texts and 0-based lines."""

    keys: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


def _units(text: str, tokens: list[Token]) -> tuple[dict[tuple[str, str], _Unit], list[tuple[tuple[str, str], int]]]:
    """Tokens grouped by top-level unit, and (unit, index in it) of each token."""
    starts = SourceText(text, "").line_starts
    units: dict[tuple[str, str], _Unit] = {}
    owner: list[tuple[tuple[str, str], int]] = []
    current = ("expr", "")
    depth = 0
    for i, (kind, word, start, _) in enumerate(tokens):
        if depth == 0 and kind == "VERSION":
            current = ("header", "")
        elif depth == 0 and word in _TOP_KEYWORDS and not (word == "type" and i and tokens[i - 1][1] == "extern"):
            j = i + 2 if word == "extern" else i + 1
            current = ("type" if word == "extern" else word, tokens[j][1] if j < len(tokens) else "")
        elif current == ("header", ""):
            current = ("expr", "")
        if word in _OPEN:
            depth += 1
        elif word in _CLOSE:
            depth -= 1
        unit = units.setdefault(current, _Unit())
        owner.append((current, len(unit.keys)))
        unit.keys.append("%" if kind in ("LOCAL", "GRAPH") else word)
        unit.lines.append(bisect_right(starts, start) - 1)
    return units, owner


def _align(source: _Unit, printed: _Unit) -> list[tuple[int, int]]:
    """For each source token: the printed tokens (first, last) it became. A token the printer
    dropped or rewrote maps to the edges of the rewritten block."""
    if source.keys == printed.keys:
        return [(i, i) for i in range(len(source.keys))]
    mapping: list[tuple[int, int]] = []
    last = len(printed.keys) - 1
    matcher = difflib.SequenceMatcher(None, source.keys, printed.keys, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for i in range(i1, i2):
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                mapping.append((j1 + i - i1, j1 + i - i1))
            elif tag == "replace":
                mapping.append((j1, j2 - 1))
            elif tag == "delete":
                mapping.append((min(j1, last), max(j1 - 1, 0)))
    return mapping


def too_deep(text: str, name: str, what: str) -> Diagnostic:
    """The error for a program some walk could not `what` (Python's recursion limit): at the
    bracket where it nests deepest, or the start of the file if it does not tokenize."""
    try:
        nest = nesting(lex(text, name)[0])
    except DiagnosticError:
        nest = Nesting(0, -1, 0)
    at = max(nest.deepest, 0)
    detail = f" ({nest.depth} levels of brackets at the deepest, here)" if nest.depth else ""
    return Diagnostic("error", f"nested too deeply to {what}{detail}",
                      SourceText(text, name).span(at, min(at + 1, len(text))))


def format_text(text: str, name: str = "<string>") -> str:
    """`text` in the printer's layout with all of its comments. Raises `DiagnosticError` for a
    program that does not parse, nests too deeply, or when a comment cannot be placed."""
    try:
        return _format(text, name)
    except RecursionError:
        raise DiagnosticError("", diagnostics=[too_deep(text, name, "format")]) from None


def _format(text: str, name: str) -> str:
    prog = parse(text, name)
    tokens, comments = lex(text, name)
    nest = nesting(tokens)
    if nest.indent > max(MAX_INDENT_BYTES, 4 * len(text)):
        src = SourceText(text, name)
        raise DiagnosticError(f"not formatted: brackets nest {nest.depth} deep here, and the formatted text would "
                              f"hold over {nest.indent // 2**20} MiB of indentation",
                              src.span(nest.deepest, nest.deepest + 1))
    printed = print_program(prog)
    if not comments:
        return printed
    out_tokens, _ = lex(printed, name)
    src_units, owner = _units(text, tokens)
    out_units, _ = _units(printed, out_tokens)
    src = SourceText(text, name)
    token_starts = [token[2] for token in tokens]
    leading: dict[int, list[str]] = {}
    trailing: dict[int, list[str]] = {}
    at_end: list[str] = []
    at_top: list[str] = []
    first_code = 1 if tokens and tokens[0][0] == "VERSION" else 0
    alignments: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for comment in comments:
        at = bisect_right(token_starts, comment.start)   # index of the next token
        line = bisect_right(src.line_starts, comment.start) - 1
        # Trailing: after code, with nothing but comments until the end of its line.
        trails = at > 0 and bisect_right(src.line_starts, tokens[at - 1][3] - 1) - 1 == line and \
            (at == len(tokens) or bisect_right(src.line_starts, tokens[at][2]) - 1 > line)
        if not trails and at == len(tokens):
            at_end.append(comment.text)
            continue
        if not trails and at == first_code:
            at_top.append(comment.text)
            continue
        unit_key, index = owner[at - 1 if trails else at]
        printed_unit = out_units.get(unit_key)
        if printed_unit is None:
            raise DiagnosticError(f"cannot place this comment: the {unit_key[0]} it belongs to is missing from the "
                                  "formatted output", _comment_span(src, comment))
        if unit_key not in alignments:
            alignments[unit_key] = _align(src_units[unit_key], printed_unit)
        first, last = alignments[unit_key][index]
        if trails:
            trailing.setdefault(printed_unit.lines[last], []).append(comment.text)
        else:
            leading.setdefault(printed_unit.lines[first], []).append(comment.text)
    lines = printed.split("\n")
    top = 1 if out_tokens and out_tokens[0][0] == "VERSION" else 0   # file comments go below the header
    lines[top:top] = at_top
    leading = {line + len(at_top) * (line >= top): texts for line, texts in leading.items()}
    trailing = {line + len(at_top) * (line >= top): texts for line, texts in trailing.items()}
    result = _emit(lines, leading, trailing, at_end)
    _check(text, name, comments, printed, result)
    return result


def _emit(lines: list[str], leading: dict[int, list[str]], trailing: dict[int, list[str]],
          at_end: list[str]) -> str:
    """Printed lines with the comments put back. A line keeps at most one trailing comment, and
    only a one-line one; others go above it (after its leading comments), so a second run finds
    them where the first put them."""
    out: list[str] = []
    for number, line in enumerate(lines):
        indent = line[:len(line) - len(line.lstrip())]
        above = leading.get(number, [])
        after = trailing.get(number, [])
        last = after[-1] if after and "\n" not in after[-1] else None
        above = above + (after[:-1] if last is not None else after)
        out.extend(indent + text for text in above)
        out.append(line + "  " + last if last is not None else line)
    while out and out[-1] == "":
        out.pop()
    out.extend(at_end)
    return "\n".join(out) + "\n"


def _comment_span(src: SourceText, comment: Comment) -> Span:
    return src.span(comment.start, comment.start + min(2, comment.end - comment.start))


def _check(text: str, name: str, comments: list[Comment], printed: str, result: str) -> None:
    """Refuse (located at a comment) rather than return text that lost or moved code or comments."""
    src = SourceText(text, name)
    kept = Counter(comment.text for comment in scan_comments(result, name))
    for comment in comments:
        if kept[comment.text] == 0:
            raise DiagnosticError("cannot place this comment in the formatted program; the file was left "
                                  "unchanged", _comment_span(src, comment))
        kept[comment.text] -= 1
    if print_program(parse(result, f"{name} (formatted)")) != printed:
        raise DiagnosticError("formatting would change the program (an irtool bug); the file was left unchanged",
                              _comment_span(src, comments[0]))
