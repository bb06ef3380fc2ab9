"""Pygments lexers for Relay and TIR text, registered as the `relay` and `tir` lexers through the
`pygments.lexers` entry point so that `pygmentize -l relay` and Sphinx/MkDocs code blocks use them.

The rules mirror the terminals of `grammar/relay.lark` and `grammar/tir.lark`; they are kept in
regexes here (not derived from the grammar) because highlighting must also colour broken text.
"""

from __future__ import annotations

from typing import ClassVar

from pygments.lexer import RegexLexer, bygroups, include, using, words
from pygments.lexers.data import JsonLexer
from pygments.token import (Comment, Error, Keyword, Name, Number, Operator, Punctuation, String, Whitespace,
                            _TokenType)

__all__ = ["RelayLexer", "TIRLexer", "KEYWORDS", "LOOP_KINDS"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_/]*"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT})*"
_END = r"(?![A-Za-z0-9_/])"

# Relay keywords, then TIR's (grammar/tir.lark).
KEYWORDS = ("def", "fn", "let", "if", "else", "match", "type", "extern", "free_var", "ref_read", "ref_write",
            "ref", "primfn", "for", "in", "allocate", "evaluate", "assert")
# TIR loop kinds, written where Relay would have an operator name: `for %i in parallel(0, 8)`.
LOOP_KINDS = ("range", "serial", "parallel", "vectorized", "unrolled")


class RelayLexer(RegexLexer):
    """Relay text (TVM's format, version 0.0.5), including TIR `primfn`s that share a module."""

    name = "Relay"
    aliases: ClassVar[list[str]] = ["relay"]
    filenames: ClassVar[list[str]] = ["*.relay"]
    mimetypes: ClassVar[list[str]] = ["text/x-relay"]
    url = "https://tvm.apache.org/docs/arch/relay_intro.html"

    tokens: ClassVar[dict[str, list]] = {
        "root": [
            (r"[ \t\r\n]+", Whitespace),
            include("comments"),
            (r'(#\[)(version)(\s*)(=)(\s*)("[^"\n]*")(\])',
             bygroups(Comment.Preproc, Keyword.Declaration, Whitespace, Operator, Whitespace, String.Double,
                      Comment.Preproc)),
            # Everything after `#[metadata]` is one JSON object.
            (r"(#\[metadata\])([\s\S]*)", bygroups(Comment.Preproc, using(JsonLexer))),
            (r"(meta)(\[)([^\]\s]+)(\])(\[)([0-9]+)(\])",
             bygroups(Keyword.Pseudo, Punctuation, Name.Constant, Punctuation, Punctuation, Number.Integer,
                      Punctuation)),
            (r"match\?", Keyword),
            # `for %i in parallel(0, 8)`: the loop kind after `in`.
            (rf"(in)(\s+)({'|'.join(LOOP_KINDS)}){_END}", bygroups(Keyword, Whitespace, Keyword.Pseudo)),
            (words(KEYWORDS, suffix=_END), Keyword),
            (words(("True", "False", "None", "nullptr"), suffix=_END), Keyword.Constant),
            (words(("Tensor", "Buffer"), suffix=_END), Keyword.Type),
            (rf"(?:u?int|float|bfloat|bool)[0-9]*(?:x[0-9]+)?{_END}", Keyword.Type),
            (r"_" + _END, Keyword.Pseudo),
            (rf"%{_IDENT}", Name.Variable),
            (r"%[0-9]+", Name.Variable.Anonymous),
            (rf"@{_IDENT}", Name.Variable.Global),
            # Literals: `1`, `-2i64`, `1.5f`, `2f16`, `1e-05f`, `inff` (a run of `-` belongs to the number).
            (rf"-*(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?f(?:16|32|64)?|inff){_END}", Number.Float),
            (rf"-*[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?{_END}", Number.Float),
            (rf"-*[0-9]+(?:i(?:8|16|32|64)?)?{_END}", Number.Integer),
            (r'"[^"\n]*"', String.Double),
            # `key=value` attributes (not `==`); TIR's keys may be dotted (`tir.noalias=True`).
            (rf"({_DOTTED})(\s*)(=)(?!=)", bygroups(Name.Attribute, Whitespace, Operator)),
            # An operator (or TIR intrinsic) is a possibly dotted lower-case name that is called;
            # a dotted name is always an operator. Capitalised names are ADTs and constructors.
            (rf"([a-z_][A-Za-z0-9_/]*(?:\.{_IDENT})*)(\s*)(\()", bygroups(Name.Builtin, Whitespace, Punctuation)),
            (rf"{_IDENT}(?:\.{_IDENT})+", Name.Builtin),
            (r"[A-Z][A-Za-z0-9_/]*", Name.Class),   # ADT types and constructors, type variables
            (_IDENT, Name),
            (r"->|=>|==|!=|<=|>=|[-+*/<>=?!]", Operator),
            (r"[()\[\]{},;:.]", Punctuation),
        ],
        "comments": [
            (r"//[^\n]*", Comment.Single),
            (r"/\*", Comment.Multiline, "block_comment"),
        ],
        # Block comments nest: every `/*` pushes this state again, every `*/` pops one level.
        "block_comment": [
            (r"[^*/]+", Comment.Multiline),
            (r"/\*", Comment.Multiline, "#push"),
            (r"\*/", Comment.Multiline, "#pop"),
            (r"[*/]", Comment.Multiline),
        ],
    }


class TIRLexer(RelayLexer):
    """TIR text (`primfn`s, docs/tir.md); the same lexical family as Relay."""

    name = "TIR"
    aliases: ClassVar[list[str]] = ["tir"]
    filenames: ClassVar[list[str]] = ["*.tir"]
    mimetypes: ClassVar[list[str]] = ["text/x-tir"]
    url = ""


def error_tokens(lexer: RegexLexer, text: str) -> list[tuple[int, _TokenType, str]]:
    """Where the lexer gives up (Error tokens), for tests and for checking new syntax quickly."""
    return [(pos, tok, value) for pos, tok, value in lexer.get_tokens_unprocessed(text) if tok in Error]

