"""The Relay text-format parser: text → `IRModule` (or a lone `Expr`), with located errors.

`grammar/relay.lark` is the syntax; this module holds the meaning of each rule (`_Builder`, one
method per rule alias) and the entry points. Parsing runs `parse_engine`'s LALR loop over the
`lexer` tokens and builds IR nodes directly, so throughput is several times a tree-building
parser's, and nothing recurses with program size (200k-deep let chains parse at the default
recursion limit).

Source registration: the text is registered as `SOURCES.add(source_name, "\\n" * line_offset +
text)`, so that `SOURCES.line(name, span.line)` quotes the right line for spans shifted by
`line_offset` (as `--split-input-file` needs).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np

from irtool.grammar import grammar_text
from irtool.ir.adt import (Clause, Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, TypeData)
from irtool.ir.expr import (EMPTY_ATTRS, Attrs, Call, Constant, Expr, Function, GlobalVar, If, Let, Match,
                            MetaRef, Op, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.core.span import Span
from irtool.ir.types import (MAX_TYPE_DEPTH, Any as AnyDim, CompoundType, FuncType, IncompleteType, RefType,
                             TensorType, TupleType, Type, TypeCall, TypeVar, parse_dtype, type_arity_message,
                             unknown_dtype_message)
from irtool.ops.registry import OpDef, get_op, op_names
from irtool.syntax import parse_engine
from irtool.core.diagnostics import SOURCES, Diagnostic, DiagnosticError, suggest
from irtool.syntax.lexer import Lexer, LiteralError, SourceText, Token, float_literal, number_value, tokenize
from irtool.syntax.parse_metadata import CONSTANT_KIND, MetadataError, constant_array, parse_metadata_json
from irtool.syntax.tir_builder import TirActions

__all__ = ["parse", "parse_module", "parse_expr"]

_STARTS = ["module", "expression"]
_MODULE_KEYWORDS = ("def", "type", "extern", "primfn")
_INFIX_OPS = {"*": "multiply", "/": "divide", "+": "add", "-": "subtract", "<": "less", ">": "greater",
              "<=": "less_equal", ">=": "greater_equal", "==": "equal", "!=": "not_equal"}
_DTYPE_PREFIXES = ("int", "uint", "float", "bfloat", "bool")
_NUMPY_DTYPES = {name: np.dtype(name) for name in ("int8", "int16", "int32", "int64")}

_grammar_cache: tuple[parse_engine.Table, Lexer] | None = None


def _grammar() -> tuple[parse_engine.Table, Lexer]:
    """The LALR table and tokenizer, built once per process (the table is also cached on disk)."""
    global _grammar_cache
    if _grammar_cache is None:
        table = parse_engine.load_table(grammar_text("relay") + "\n" + grammar_text("tir"), _STARTS)
        _grammar_cache = (table, Lexer(table.literals))
    return _grammar_cache


# ---- Entry points ---------------------------------------------------------------------------------

def parse(text: str, source_name: str = "<string>", line_offset: int = 0,
          metadata: dict[str, list[object]] | None = None) -> IRModule | Expr:
    """A module if the first token (after the header) is `def`/`type`/`extern` or the text is
    empty, else a lone expression. `metadata` adds entries after the file's own `#[metadata]`
    ones (TVM's `init_meta_table`). Every problem raises `DiagnosticError`."""
    return _parse(text, source_name, line_offset, metadata, None)


def parse_module(text: str, source_name: str = "<string>", line_offset: int = 0,
                 metadata: dict[str, list[object]] | None = None) -> IRModule:
    result = _parse(text, source_name, line_offset, metadata, "module")
    assert isinstance(result, IRModule)
    return result


def parse_expr(text: str, source_name: str = "<string>", line_offset: int = 0,
               metadata: dict[str, list[object]] | None = None) -> Expr:
    result = _parse(text, source_name, line_offset, metadata, "expression")
    assert isinstance(result, Expr)
    return result


def _parse(text: str, source_name: str, line_offset: int, metadata: dict[str, list[object]] | None,
           start: str | None) -> IRModule | Expr:
    SOURCES.add(source_name, "\n" * line_offset + text)
    src = SourceText(text, source_name, line_offset)
    gc_was_enabled = gc.isenabled()
    gc.disable()   # the parse allocates millions of long-lived objects; collections only cost time
    try:
        table, lexer = _grammar()
        chunks = tokenize(src, lexer)
        head = _leading_tokens(chunks)
        if start is None:
            first = next((t for t in head if t[0] != "VERSION"), None)
            start = "module" if first is None or first[0] == "METADATA" or first[1] in _MODULE_KEYWORDS \
                else "expression"
        builder = _Builder(src, _metadata_table(src, lexer, metadata), start == "module")
        bound = parse_engine.bind_actions(table, builder)
        return parse_engine.run(table, bound, start, _chain(head, chunks), len(text))
    except parse_engine.SyntaxErrorAt as err:
        raise _syntax_error(src, err, _grammar()[0]) from None
    except RecursionError:
        raise src.error("program nests too deeply to process", 0, 1) from None
    except MemoryError:
        raise src.error("out of memory while parsing", 0, 1) from None
    except DiagnosticError:
        raise
    except Exception as exc:   # a bug; still reported as a diagnostic, never a traceback
        raise src.error(f"internal parser error: {type(exc).__name__}: {exc}", 0, 1) from exc
    finally:
        if gc_was_enabled:
            gc.enable()


def _leading_tokens(chunks: Iterator[list[Token]]) -> list[Token]:
    """Tokens read ahead from the stream until one that is not the header (or the end)."""
    head: list[Token] = []
    for chunk in chunks:
        head.extend(chunk)
        if any(token[0] != "VERSION" for token in chunk):
            break
    return head


def _chain(head: list[Token], rest: Iterator[list[Token]]) -> Iterator[list[Token]]:
    yield head
    yield from rest


def _syntax_error(src: SourceText, err: parse_engine.SyntaxErrorAt, table: parse_engine.Table) -> DiagnosticError:
    kind, text, start, end = err.token
    shown = sorted({_describe(table, term) for term in err.expected})
    if len(shown) > 8:
        shown = shown[:8] + ["..."]
    found = "end of input" if kind == parse_engine.END else f"`{text[:40]}`"
    if kind == "METADATA":
        found, end = "`#[metadata]`", start + len("#[metadata]")
    expected = shown[0] if len(shown) == 1 else "one of " + ", ".join(shown)
    return src.error(f"unexpected {found}; expected {expected}", start, max(end, start + 1))


_DESCRIPTIONS = {"NAME": "an identifier", "LOCAL": "a local variable `%name`", "GRAPH": "a graph variable `%N`",
                 "GLOBAL": "a global `@name`", "NUMBER": "a number", "STRING": "a string", "BOOL": "`True`/`False`",
                 "META": "`meta[...][...]`", "VERSION": "`#[version = \"0.0.5\"]`", "METADATA": "`#[metadata]`",
                 "EQ_OP": "`==`/`!=`", "CMP_OP": "a comparison", "ADD_OP": "`+`/`-`", "MUL_OP": "`*`/`/`",
                 parse_engine.END: "end of input"}


def _describe(table: parse_engine.Table, terminal: str) -> str:
    if terminal in _DESCRIPTIONS:
        return _DESCRIPTIONS[terminal]
    return f"`{table.terminals.get(terminal, terminal)}`"


def _metadata_table(src: SourceText, lexer: Lexer,
                    extra: dict[str, list[object]] | None) -> dict[str, list[object]]:
    """The file's `#[metadata]` table (found by a pre-scan, since references precede it) merged
    with `extra` (file entries first, as TVM merges `init_meta_table`)."""
    merged: dict[str, list[object]] = {}
    if "#[metadata]" in src.text:
        for kind, text, start, _ in (t for chunk in tokenize(src, lexer) for t in chunk):
            if kind == "METADATA":
                try:
                    merged = parse_metadata_json(text[len("#[metadata]"):])
                except MetadataError as exc:
                    raise src.error(str(exc), start, start + len("#[metadata]")) from None
    for key, entries in (extra or {}).items():
        merged[key] = [*merged.get(key, []), *entries]
    return merged


# ---- Scopes ---------------------------------------------------------------------------------------

class _Scope:
    """Names bound by one binder (a let, a function's parameters, a clause's pattern); popping
    restores what the names meant before. Scopes nest like the text, so an undo log suffices."""

    __slots__ = ("saved",)

    def __init__(self, env: dict[str, Any], bindings: list[tuple[str, Any]]) -> None:
        self.saved = [(name, env.get(name)) for name, _ in bindings]
        for name, value in bindings:
            env[name] = value

    def pop(self, env: dict[str, Any]) -> None:
        for name, old in reversed(self.saved):
            if old is None:
                del env[name]
            else:
                env[name] = old


class _FnSig:
    __slots__ = ("params", "attrs", "ret_type", "type_params", "scope", "type_scope")

    def __init__(self, params: list[Var], attrs: Attrs, ret_type: Type | None, type_params: list[TypeVar],
                 scope: _Scope, type_scope: _Scope | None) -> None:
        self.params = params
        self.attrs = attrs
        self.ret_type = ret_type
        self.type_params = type_params
        self.scope = scope
        self.type_scope = type_scope


class _AttrList:
    """Keyword attributes as written, with where each key is (for duplicate-key errors)."""

    __slots__ = ("values", "keys", "start", "end")

    def __init__(self, start: int) -> None:
        self.values: dict[str, Any] = {}
        self.keys: dict[str, Token] = {}
        self.start = start   # source range, whose text keys the normalisation cache
        self.end = start


# ---- Rule actions -----------------------------------------------------------------------------------

class _Builder(TirActions):
    """One method per grammar rule alias: (kept children, start offset, end offset) → value."""

    def __init__(self, src: SourceText, meta: dict[str, list[object]], module_mode: bool) -> None:
        self.src = src
        self.span = src.span
        self.meta = meta
        self.module_mode = module_mode
        self.env: dict[str, Var] = {}
        self.type_env: dict[str, TypeVar] = {}
        self.free_vars: dict[str, Var] = {}
        self.graph: dict[int, Expr] = {}
        self.graph_tokens: dict[int, Token] = {}
        self.ctors: dict[str, Constructor] = {}
        self.ctor_spans: dict[str, Span] = {}
        self.type_defs: dict[str, TypeData] = {}
        self.functions: dict[str, tuple[Function, Span]] = {}
        self.global_uses: list[Token] = []
        self.adt_uses: list[tuple[Token, int]] = []   # an ADT name and how many type arguments it is given
        self.adt: tuple[str, int] | None = None   # the type definition being read, next tag
        self.opdefs: dict[str, OpDef | None] = {}
        self.constants: dict[int, np.ndarray] = {}
        self.normalized: dict[tuple[str, object], Attrs] = {}
        self.numbers: dict[str, tuple[int | float, str]] = {}
        self.floats: dict[str, np.floating] = {}
        self.int_lists: dict[str, tuple[int, ...]] = {}

    def error(self, message: str, start: int, end: int) -> DiagnosticError:
        return self.src.error(message, start, end)

    @staticmethod
    def check_distinct(what: str, names: list[tuple[str, Span | None]]) -> None:
        """One binder binds each name once: an error at the second binding, a note at the first."""
        first: dict[str, Span | None] = {}
        for name, span in names:
            if name in first:
                raise DiagnosticError(f"duplicate {what} `{name}`", span,
                                      notes=[Diagnostic("note", "first bound here", first[name])])
            first[name] = span

    def token_error(self, message: str, token: Token) -> DiagnosticError:
        return self.src.error(message, token[2], token[3])

    # -- entry points
    def module(self, ch: list[Any], start: int, end: int) -> IRModule:
        self.check_version(ch[0])
        mod = IRModule()
        for data in self.type_defs.values():
            mod.add_type(data)
        for name, (func, span) in self.functions.items():
            mod.add_function(name, func, span)
        for token in self.global_uses:
            name = token[1][1:]
            if name not in self.functions:
                hint = suggest(name, set(self.functions))
                raise self.token_error(f"undefined global `@{name}`" + (f"; did you mean `@{hint}`?" if hint else ""),
                                       token)
        for token, given in self.adt_uses:
            data = self.type_defs.get(token[1])
            if data is None:
                hint = suggest(token[1], set(self.type_defs))
                raise self.token_error(f"undefined type `{token[1]}`" + (f"; did you mean `{hint}`?" if hint else ""),
                                       token)
            message = type_arity_message(data.name, len(data.type_params), given)
            if message is not None:
                raise self.token_error(message, token)
        mod.metadata = {k: list(v) for k, v in self.meta.items() if k != CONSTANT_KIND}
        return mod

    def expression(self, ch: list[Any], start: int, end: int) -> Expr:
        self.check_version(ch[0])
        return ch[1]

    def check_version(self, token: Token | None) -> None:
        if token is not None and token[1].split("=", 1)[1].strip(' \t\r\n"]') != "0.0.5":
            raise self.token_error("unsupported text format version; expected #[version = \"0.0.5\"]", token)

    # -- definitions
    def defs_empty(self, ch: list[Any], start: int, end: int) -> None:
        return None

    def defs_append(self, ch: list[Any], start: int, end: int) -> None:
        return None

    def def_function(self, ch: list[Any], start: int, end: int) -> None:
        token, func = ch
        name = token[1][1:]
        span = self.span(start, end)
        func.span = span
        if name in self.functions:
            earlier = self.functions[name][1]
            raise DiagnosticError(f"duplicate definition of global `@{name}`", self.span(token[2], token[3]),
                                  notes=[Diagnostic("note", "previous definition is here", earlier)])
        self.functions[name] = (func, span)

    def type_head(self, ch: list[Any], start: int, end: int) -> tuple[Token, list[TypeVar], _Scope | None]:
        token, tparams = ch
        name = token[1]
        if name in self.type_defs:
            raise DiagnosticError(f"duplicate definition of type `{name}`", self.span(token[2], token[3]),
                                  notes=[Diagnostic("note", "previous definition is here",
                                                    self.type_defs[name].span)])
        self.adt = (name, 0)
        tvars, scope = tparams if tparams is not None else ([], None)
        return token, tvars, scope

    def def_type(self, ch: list[Any], start: int, end: int) -> None:
        self.finish_type(ch[0], ch[1] or [], False, start, end)

    def def_extern_type(self, ch: list[Any], start: int, end: int) -> None:
        self.finish_type(ch[0], [], True, start, end)

    def finish_type(self, head: tuple[Token, list[TypeVar], _Scope | None], ctors: list[Constructor],
                    extern: bool, start: int, end: int) -> None:
        token, tvars, scope = head
        if scope is not None:
            scope.pop(self.type_env)
        self.adt = None
        self.type_defs[token[1]] = TypeData(token[1], tuple(tvars), ctors, extern, self.span(start, end))

    def ctors_empty(self, ch: list[Any], start: int, end: int) -> list[Constructor]:
        return []

    def ctor_block(self, ch: list[Any], start: int, end: int) -> list[Constructor]:
        return ch[0]

    def ctor_plain(self, ch: list[Any], start: int, end: int) -> Constructor:
        return self.constructor(ch[0], (), start, end)

    def ctor_fields(self, ch: list[Any], start: int, end: int) -> Constructor:
        return self.constructor(ch[0], tuple(ch[1]), start, end)

    def constructor(self, token: Token, inputs: tuple[Type, ...], start: int, end: int) -> Constructor:
        assert self.adt is not None
        name = token[1]
        if name in self.ctors:
            raise DiagnosticError(f"a constructor named `{name}` was previously defined",
                                  self.span(token[2], token[3]),
                                  notes=[Diagnostic("note", "previous definition is here", self.ctor_spans[name])])
        adt, tag = self.adt
        self.adt = (adt, tag + 1)
        ctor = Constructor(name, inputs, adt, tag, self.span(start, end))
        self.ctors[name] = ctor
        self.ctor_spans[name] = self.span(token[2], token[3])
        return ctor

    # -- functions
    def fn_sig(self, ch: list[Any], start: int, end: int) -> _FnSig:
        tparams, fn_params, ret_type = ch
        tvars, type_scope = tparams if tparams is not None else ([], None)
        params, attrs = fn_params if fn_params is not None else ([], None)
        self.check_distinct("parameter", [("%" + p.name_hint, p.span) for p in params])
        scope = _Scope(self.env, [(p.name_hint, p) for p in params])
        return _FnSig(params, self.attrs_of(attrs), ret_type, tvars, scope, type_scope)

    def function(self, ch: list[Any], start: int, end: int) -> Function:
        sig, body = ch
        sig.scope.pop(self.env)
        if sig.type_scope is not None:
            sig.type_scope.pop(self.type_env)
        return Function(sig.params, body, sig.ret_type, sig.type_params, sig.attrs, self.span(start, end))

    def fn_expr(self, ch: list[Any], start: int, end: int) -> Function:
        func = ch[0]
        func.span = self.span(start, end)
        return func

    def fn_params_only(self, ch: list[Any], start: int, end: int) -> tuple[list[Var], None]:
        return ch[0], None

    def fn_params_attrs(self, ch: list[Any], start: int, end: int) -> tuple[list[Var], _AttrList]:
        return ch[0], ch[1]

    def fn_attrs_only(self, ch: list[Any], start: int, end: int) -> tuple[list[Var], _AttrList]:
        return [], ch[0]

    def param(self, ch: list[Any], start: int, end: int) -> Var:
        token, attrs, ty = ch
        return Var(token[1][1:], ty, self.span(start, end), self.attrs_of(attrs))

    def type_params(self, ch: list[Any], start: int, end: int) -> tuple[list[TypeVar], _Scope]:
        self.check_distinct("type parameter", [(token[1], self.span(token[2], token[3])) for token in ch[0]])
        tvars = [TypeVar(token[1]) for token in ch[0]]
        return tvars, _Scope(self.type_env, [(tv.name, tv) for tv in tvars])

    # -- generic lists
    def list_first(self, ch: list[Any], start: int, end: int) -> list[Any]:
        return ch

    def list_append(self, ch: list[Any], start: int, end: int) -> list[Any]:
        items = ch[0]
        items.append(ch[1])
        return items

    # -- expressions
    def sequence(self, ch: list[Any], start: int, end: int) -> Let:
        return Let(Var("", IncompleteType(), ch[0].span), ch[0], ch[1], self.span(start, end))

    def let_head(self, ch: list[Any], start: int, end: int) -> tuple[Var, _Scope]:
        token, ty = ch
        var = Var(token[1][1:], ty, self.span(token[2], token[3]))
        return var, _Scope(self.env, [(var.name_hint, var)])

    def let(self, ch: list[Any], start: int, end: int) -> Let:
        (var, scope), value, body = ch
        scope.pop(self.env)
        return Let(var, value, body, self.span(start, end))

    def graph_binding(self, ch: list[Any], start: int, end: int) -> None:
        token, value = ch
        number = int(token[1][1:])
        if number in self.graph:
            earlier = self.graph_tokens[number]
            raise DiagnosticError(f"graph variable `%{number}` is already defined", self.span(token[2], token[3]),
                                  notes=[Diagnostic("note", "previous definition is here",
                                                    self.span(earlier[2], earlier[3]))])
        self.graph[number] = value
        self.graph_tokens[number] = token

    def free_var(self, ch: list[Any], start: int, end: int) -> None:
        token, ty = ch
        name = token[1][1:]
        span = self.span(token[2], token[3])
        earlier = self.free_vars.get(name)
        if earlier is not None:
            raise DiagnosticError(f"duplicate `free_var %{name}`", span,
                                  notes=[Diagnostic("note", "first declared here", earlier.span)])
        self.free_vars[name] = Var(name, IncompleteType() if ty is None else ty, span)

    def after_binding(self, ch: list[Any], start: int, end: int) -> Expr:
        return ch[1]

    def match_total(self, ch: list[Any], start: int, end: int) -> Match:
        return Match(ch[0], ch[1] or [], True, self.span(start, end))

    def match_partial(self, ch: list[Any], start: int, end: int) -> Match:
        return Match(ch[0], ch[1] or [], False, self.span(start, end))

    def clause_head(self, ch: list[Any], start: int, end: int) -> tuple[Pattern, _Scope]:
        pattern = ch[0]
        variables = pattern.bound_vars()
        self.check_distinct("pattern variable", [("%" + v.name_hint, v.span) for v in variables])
        return pattern, _Scope(self.env, [(v.name_hint, v) for v in variables])

    def clause(self, ch: list[Any], start: int, end: int) -> Clause:
        (pattern, scope), rhs = ch
        scope.pop(self.env)
        return Clause(pattern, rhs)

    def infix(self, ch: list[Any], start: int, end: int) -> Call:
        lhs, op, rhs = ch
        return Call(Op(_INFIX_OPS[op[1]], self.span(op[2], op[3])), (lhs, rhs), EMPTY_ATTRS, self.span(start, end))

    def call(self, ch: list[Any], start: int, end: int) -> Expr:
        callee, call_args = ch
        args, attrs = call_args if call_args is not None else ((), None)
        if type(callee) is Op:
            span = self.span(start, end)
            return Call(callee, args, EMPTY_ATTRS if attrs is None else self.op_attrs(callee.name, attrs, span),
                        span)
        if not args and attrs is None and type(callee) is Call and not callee.args \
                and type(callee.op) is Constructor:
            return callee   # `Nil()` is `Nil`: a 0-ary constructor is already applied
        return Call(callee, args, self.attrs_of(attrs), self.span(start, end))

    def op_attrs(self, op_name: str, attrs: _AttrList, span: Span) -> Attrs:
        """`OpDef.normalize_attrs`, memoised on the attributes' source text: a model repeats the
        same few attribute sets, and equal text means equal values."""
        key = (op_name, self.src.text[attrs.start:attrs.end])
        normalized = self.normalized.get(key)
        if normalized is None:
            opdef = self.opdefs.get(op_name) or get_op(op_name)
            assert opdef is not None
            try:
                normalized = opdef.normalize_attrs(attrs.values, span)
            except DiagnosticError:
                raise
            except Exception as exc:   # a schema check that did not expect this value
                raise DiagnosticError(f"invalid attributes for `{op_name}`: {exc}", span) from None
            self.normalized[key] = normalized
        return normalized

    def call_args_only(self, ch: list[Any], start: int, end: int) -> tuple[list[Expr], None]:
        return ch[0], None

    def call_args_attrs(self, ch: list[Any], start: int, end: int) -> tuple[list[Expr], _AttrList]:
        return ch[0], ch[1]

    def call_attrs_only(self, ch: list[Any], start: int, end: int) -> tuple[list[Expr], _AttrList]:
        return [], ch[0]

    def project(self, ch: list[Any], start: int, end: int) -> TupleGetItem:
        value, token = ch
        if not token[1].isdigit():
            raise self.token_error(f"a tuple index must be a non-negative integer, found `{token[1]}`", token)
        return TupleGetItem(value, int(token[1]), self.span(start, end))

    def number_of(self, token: Token) -> tuple[int | float, str]:
        known = self.numbers.get(token[1])
        if known is None:
            try:
                known = self.numbers[token[1]] = number_value(token[1])
            except LiteralError as exc:
                raise self.token_error(str(exc), token) from None
        return known

    def float_of(self, token: Token) -> np.floating:
        """A float literal rounded once to its width (not through a double)."""
        known = self.floats.get(token[1])
        if known is None:
            self.number_of(token)   # the checks
            known = self.floats[token[1]] = float_literal(token[1])
        return known

    def number(self, ch: list[Any], start: int, end: int) -> Constant:
        value, dtype = self.number_of(ch[0])
        if dtype[0] == "f":
            return Constant(np.array(self.float_of(ch[0])), self.span(start, end))
        return Constant(np.array(value, dtype=_NUMPY_DTYPES[dtype]), self.span(start, end))

    def boolean(self, ch: list[Any], start: int, end: int) -> Constant:
        return Constant(np.array(ch[0][1] == "True"), self.span(start, end))

    def local_var(self, ch: list[Any], start: int, end: int) -> Var:
        token = ch[0]
        name = token[1][1:]
        var = self.env.get(name) or self.free_vars.get(name)
        if var is None:
            hint = suggest(name, set(self.env) | set(self.free_vars))
            raise self.token_error(f"undefined variable `%{name}`" + (f"; did you mean `%{hint}`?" if hint else ""),
                                   token)
        return var

    def graph_var(self, ch: list[Any], start: int, end: int) -> Expr:
        token = ch[0]
        expr = self.graph.get(int(token[1][1:]))
        if expr is None:
            raise self.token_error(f"graph variable `{token[1]}` is used before it is defined", token)
        return expr

    def global_var(self, ch: list[Any], start: int, end: int) -> GlobalVar:
        token = ch[0]
        if self.module_mode:
            self.global_uses.append(token)
        return GlobalVar(token[1][1:], self.span(start, end))

    def name(self, ch: list[Any], start: int, end: int) -> Expr:
        token = ch[0]
        name = token[1]
        ctor = self.ctors.get(name)
        if ctor is not None:
            return Call(ctor, (), EMPTY_ATTRS, self.span(start, end)) if not ctor.inputs else ctor
        if name not in self.opdefs:
            self.opdefs[name] = get_op(name)
        if self.opdefs[name] is None:
            hint = suggest(name, set(op_names()) | set(self.ctors))
            raise self.token_error(f"unknown operator `{name}`" + (f"; did you mean `{hint}`?" if hint else ""),
                                   token)
        return Op(name, self.span(start, end))

    def meta_expr(self, ch: list[Any], start: int, end: int) -> Constant:
        token = ch[0]
        kind, index = self.meta_entry(token)
        if kind != CONSTANT_KIND:
            raise self.token_error(f"`{token[1]}` cannot be used as an expression (only relay.Constant entries can)",
                                   token)
        array = self.constants.get(index)
        if array is None:
            try:
                array = self.constants[index] = constant_array(self.meta[kind][index])
            except MetadataError as exc:
                raise self.token_error(f"{token[1]}: {exc}", token) from None
        return Constant(array, self.span(start, end))

    def meta_entry(self, token: Token) -> tuple[str, int]:
        kind, _, rest = token[1][len("meta["):].partition("][")
        index = int(rest[:-1])
        entries = self.meta.get(kind)
        if entries is None:
            raise self.token_error(f"no entry in the meta table for `{kind}`", token)
        if index >= len(entries):
            raise self.token_error(f"the node index `{index}` is out of bounds for `{kind}` "
                                   f"({len(entries)} entries)", token)
        return kind, index

    def if_expr(self, ch: list[Any], start: int, end: int) -> If:
        return If(ch[0], ch[1], ch[2], self.span(start, end))

    def ref_create(self, ch: list[Any], start: int, end: int) -> RefCreate:
        return RefCreate(ch[0], self.span(start, end))

    def ref_read(self, ch: list[Any], start: int, end: int) -> RefRead:
        return RefRead(ch[0], self.span(start, end))

    def ref_write(self, ch: list[Any], start: int, end: int) -> RefWrite:
        return RefWrite(ch[0], ch[1], self.span(start, end))

    def unit(self, ch: list[Any], start: int, end: int) -> Tuple:
        return Tuple((), self.span(start, end))

    def tuple_one(self, ch: list[Any], start: int, end: int) -> Tuple:
        return Tuple(ch, self.span(start, end))

    def tuple_many(self, ch: list[Any], start: int, end: int) -> Tuple:
        return Tuple([ch[0], *ch[1]], self.span(start, end))

    # -- patterns
    def pattern_wildcard(self, ch: list[Any], start: int, end: int) -> PatternWildcard:
        return PatternWildcard(self.span(start, end))

    def pattern_var(self, ch: list[Any], start: int, end: int) -> PatternVar:
        token, ty = ch
        span = self.span(start, end)
        return PatternVar(Var(token[1][1:], ty, span), span)

    def pattern_ctor(self, ch: list[Any], start: int, end: int) -> PatternConstructor:
        return self.ctor_pattern(ch[0], [], start, end)

    def pattern_ctor_args(self, ch: list[Any], start: int, end: int) -> PatternConstructor:
        return self.ctor_pattern(ch[0], ch[1] or [], start, end)

    def ctor_pattern(self, token: Token, patterns: list[Pattern], start: int, end: int) -> PatternConstructor:
        ctor = self.ctors.get(token[1])
        if ctor is None:
            hint = suggest(token[1], set(self.ctors))
            raise self.token_error(f"undefined constructor `{token[1]}`" +
                                   (f"; did you mean `{hint}`?" if hint else
                                    f"; for a pattern variable write `%{token[1]}`"), token)
        if len(patterns) != len(ctor.inputs):
            raise self.error(f"constructor `{ctor.name}` takes {len(ctor.inputs)} field(s), "
                             f"the pattern gives {len(patterns)}", start, end)
        return PatternConstructor(ctor, tuple(patterns), self.span(start, end))

    def pattern_tuple(self, ch: list[Any], start: int, end: int) -> PatternTuple:
        return PatternTuple(tuple(ch[0] or ()), self.span(start, end))

    # -- attributes
    def attrs_first(self, ch: list[Any], start: int, end: int) -> _AttrList:
        return self.attrs_append([_AttrList(start), ch[0]], start, end)

    def attrs_append(self, ch: list[Any], start: int, end: int) -> _AttrList:
        attrs, (token, value) = ch
        key = token[1]
        if key in attrs.values:
            raise DiagnosticError(f"duplicate attribute `{key}`", self.span(token[2], token[3]),
                                  notes=[Diagnostic("note", "first given here",
                                                    self.span(attrs.keys[key][2], attrs.keys[key][3]))])
        attrs.values[key] = value
        attrs.keys[key] = token
        attrs.end = end
        return attrs

    def attrs_of(self, attrs: _AttrList | None) -> Attrs:
        return EMPTY_ATTRS if attrs is None else Attrs(attrs.values)

    def attr(self, ch: list[Any], start: int, end: int) -> tuple[Token, Any]:
        return ch[0], ch[1]

    def attr_number(self, ch: list[Any], start: int, end: int) -> int | float:
        # Floats keep the literal's value as a Python float (not rounded to the suffix's width).
        return self.number_of(ch[0])[0]

    def attr_int_list(self, ch: list[Any], start: int, end: int) -> tuple:
        token = ch[0]
        values = self.int_lists.get(token[1])
        if values is None:
            items = [item.strip() for item in token[1][1:-1].split(",")]
            values = self.int_lists[token[1]] = tuple(
                self.number_of((token[0], item, token[2], token[3]))[0] for item in items if item)
        return values

    def attr_bool(self, ch: list[Any], start: int, end: int) -> bool:
        return ch[0][1] == "True"

    def attr_string(self, ch: list[Any], start: int, end: int) -> str:
        return ch[0][1][1:-1]

    def attr_meta(self, ch: list[Any], start: int, end: int) -> MetaRef:
        return MetaRef(*self.meta_entry(ch[0]))

    def attr_name(self, ch: list[Any], start: int, end: int) -> None:
        token = ch[0]
        if token[1] not in ("None", "nullptr"):
            raise self.token_error(f"`{token[1]}` is not an attribute value (write strings in quotes)", token)
        return None

    def attr_empty_list(self, ch: list[Any], start: int, end: int) -> tuple:
        return ()

    def attr_list(self, ch: list[Any], start: int, end: int) -> tuple:
        return tuple(ch[0])

    # -- types
    def nested(self, t: CompoundType, start: int) -> CompoundType:
        """`t`, unless it nests deeper than any type may: then an error at its first token."""
        if t.depth > MAX_TYPE_DEPTH:
            raise self.error(f"type nested too deeply (limit {MAX_TYPE_DEPTH})", start, start + 1)
        return t

    def tuple_type_empty(self, ch: list[Any], start: int, end: int) -> TupleType:
        return TupleType(())

    def tuple_type(self, ch: list[Any], start: int, end: int) -> CompoundType:
        return self.nested(TupleType(tuple(ch[0])), start)

    def func_type(self, ch: list[Any], start: int, end: int) -> CompoundType:
        tparams, args, ret = ch
        tvars: list[TypeVar] = []
        if tparams is not None:
            tvars, scope = tparams
            scope.pop(self.type_env)
        return self.nested(FuncType(tuple(args or ()), ret, tuple(tvars)), start)

    def tensor_type(self, ch: list[Any], start: int, end: int) -> TensorType:
        shape, token = ch
        dtype = parse_dtype(token[1])
        if dtype is None:
            raise self.token_error(unknown_dtype_message(token[1]), token)
        return TensorType(tuple(shape), dtype)

    def named_type(self, ch: list[Any], start: int, end: int) -> Type:
        token = ch[0]
        name = token[1]
        if name.startswith(_DTYPE_PREFIXES):
            dtype = parse_dtype(name)
            if dtype is None:
                raise self.token_error(unknown_dtype_message(name), token)
            return TensorType((), dtype)
        tvar = self.type_env.get(name)
        if tvar is not None:
            return tvar
        return self.adt_type(token, ())

    def type_call(self, ch: list[Any], start: int, end: int) -> Type:
        token, args = ch
        if token[1] in self.type_env or token[1].startswith(_DTYPE_PREFIXES):
            raise self.token_error(f"`{token[1]}` does not take type arguments", token)
        return self.adt_type(token, tuple(args))

    def adt_type(self, token: Token, args: tuple[Type, ...]) -> Type:
        if "." in token[1]:
            raise self.token_error(f"`{token[1]}` is not a type", token)
        if self.module_mode:
            self.adt_uses.append((token, len(args)))
        return self.nested(TypeCall(token[1], args), token[2])

    def ref_type(self, ch: list[Any], start: int, end: int) -> CompoundType:
        return self.nested(RefType(ch[0]), start)

    def incomplete_type(self, ch: list[Any], start: int, end: int) -> IncompleteType:
        return IncompleteType()

    def shape_empty(self, ch: list[Any], start: int, end: int) -> list[Any]:
        return []

    def shape(self, ch: list[Any], start: int, end: int) -> list[Any]:
        return ch[0]

    def dim_int(self, ch: list[Any], start: int, end: int) -> int:
        token = ch[0]
        if not token[1].isdigit():
            raise self.token_error(f"a dimension must be a non-negative integer or `?`, found `{token[1]}`", token)
        return int(token[1])

    def dim_any(self, ch: list[Any], start: int, end: int) -> AnyDim:
        return AnyDim()

    def dim_meta(self, ch: list[Any], start: int, end: int) -> AnyDim:
        raise self.token_error("symbolic dimensions (`meta[...]` in a shape) are not supported; use `?`", ch[0])


def parse_primfunc(text: str, source_name: str = "<string>") -> PrimFunc:
    """The one `primfn` of a module text (for tests and tools that handle a single kernel)."""
    mod = parse_module(text, source_name)
    funcs = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    if len(funcs) != 1 or len(mod.functions) != 1:
        raise DiagnosticError(f"expected exactly one `primfn` definition, found {len(mod.functions)} definition(s)",
                              SourceText(text, source_name).span(0, min(1, len(text))))
    return funcs[0]
