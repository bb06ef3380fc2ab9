"""Parser actions for TIR (`grammar/tir.lark`), mixed into the Relay builder of `parser.py`.

The Relay parser's LALR driver calls these by rule alias, like its own actions: each gets the
rule's value-carrying children and the rule's source range. Names resolve while parsing (a
`%name` is the innermost buffer or variable of that name), so a misspelt name is reported at
once, where it is written. Dtype agreement is not checked here but by `verify_primfunc`, which
passes run too; parsing only rejects what the text cannot mean.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from irtool.ir.expr import Attrs
from irtool.core.span import Span
from irtool.ir.tir import (ALL_INTRINSICS, BIT_OPS, LOOP_KINDS, SCOPES, SYMBOL_OPS, Allocate, AssertStmt, BinaryOp, Broadcast,
                           Buffer, BufferLoad, BufferStore, Call, Cast, Evaluate, FloatImm, For, IfExpr, IfThenElse,
                           IntImm, LetStmt, Not, PrimExpr, PrimFunc, Ramp, Select, Stmt, Var, int_range, is_float,
                           is_int, lanes_of, seq)
from irtool.core.diagnostics import Diagnostic, DiagnosticError, suggest
from irtool.ir.types import parse_dtype, unknown_dtype_message
from irtool.syntax.lexer import SourceText, Token

_BINARY_CALLS = ("floordiv", "floormod", "min", "max", "and", "or", *BIT_OPS)
_BUILTINS = (*_BINARY_CALLS, "not", "select", "if_then_else", "ramp", "broadcast", *ALL_INTRINSICS)
_KIND_NAMES = {"range": "serial", **{kind: kind for kind in LOOP_KINDS if kind != "serial"}}
_BUFFER_OPTIONS = ("strides", "align", "scope")

# A scope's undo log: (name, what the name meant before, or None).
_Undo = list[tuple[str, "Var | Buffer | None"]]
_BufferSpec = tuple[tuple[int, ...], str, tuple[int, ...] | None, int, str]


class _LetMark:
    """A `let` inside a block's statement list; the block makes the rest of the list its body."""

    __slots__ = ("var", "value", "span")

    def __init__(self, var: Var, value: PrimExpr, span: Span) -> None:
        self.var = var
        self.value = value
        self.span = span


class TirActions:
    """TIR rule actions. The host class (the Relay `_Builder`) provides `src`, `span`,
    `functions`, `number_of`, `float_of` and `attrs_of`; TIR state is (re)made at each `primfn` signature."""

    src: SourceText
    span: Callable[[int, int], Span]
    functions: dict[str, tuple[Any, Span]]
    number_of: Callable[[Token], tuple[int | float, str]]
    float_of: Callable[[Token], np.floating]
    attrs_of: Callable[[Any], Attrs]
    tir_env: dict[str, Var | Buffer]
    tir_blocks: list[_Undo]

    # -- scopes
    def tir_bind(self, undo: _Undo, name: str, value: Var | Buffer) -> None:
        undo.append((name, self.tir_env.get(name)))
        self.tir_env[name] = value

    def tir_unbind(self, undo: _Undo) -> None:
        for name, old in reversed(undo):
            if old is None:
                del self.tir_env[name]
            else:
                self.tir_env[name] = old

    def tir_lookup(self, token: Token) -> Var | Buffer:
        name = token[1][1:]
        found = self.tir_env.get(name)
        if found is None:
            hint = suggest(name, set(self.tir_env))
            raise self.src.error(f"undefined variable or buffer `%{name}`" +
                                 (f"; did you mean `%{hint}`?" if hint else ""), token[2], token[3])
        return found

    def tir_buffer(self, token: Token) -> Buffer:
        found = self.tir_lookup(token)
        if not isinstance(found, Buffer):
            raise self.src.error(f"`{token[1]}` is a variable, not a buffer", token[2], token[3])
        return found

    # -- functions and buffers
    def tir_def_primfn(self, ch: list[Any], start: int, end: int) -> None:
        token, (params, attrs, undo), body = ch
        self.tir_unbind(undo)
        name = token[1][1:]
        span = self.span(start, end)
        if name in self.functions:
            raise DiagnosticError(f"duplicate definition of global `@{name}`", self.span(token[2], token[3]),
                                  notes=[Diagnostic("note", "previous definition is here", self.functions[name][1])])
        self.functions[name] = (PrimFunc(params, body, attrs, span), span)

    def tir_sig(self, ch: list[Any], start: int, end: int) -> tuple[list[Buffer], Attrs, _Undo]:
        self.tir_env = {}
        self.tir_blocks = []
        params, attrs = ch[0] if ch[0] is not None else ([], None)
        undo: _Undo = []
        for buf in params:
            if buf.name in self.tir_env:
                raise DiagnosticError(f"duplicate parameter `%{buf.name}`", buf.span)
            self.tir_bind(undo, buf.name, buf)
        return params, self.attrs_of(attrs), undo

    def tir_params_only(self, ch: list[Any], start: int, end: int) -> tuple[list[Buffer], None]:
        return ch[0], None

    def tir_params_with_attrs(self, ch: list[Any], start: int, end: int) -> tuple[list[Buffer], Any]:
        return ch[0], ch[1]

    def tir_attrs_only(self, ch: list[Any], start: int, end: int) -> tuple[list[Buffer], Any]:
        return [], ch[0]

    def tir_param(self, ch: list[Any], start: int, end: int) -> Buffer:
        token, spec = ch
        return Buffer(token[1][1:], *spec, span=self.span(start, end))

    def tir_buffer_type(self, ch: list[Any], start: int, end: int) -> _BufferSpec:
        return self.tir_buffer_spec(ch[0], ch[1], None, start, end)

    def tir_buffer_type_attrs(self, ch: list[Any], start: int, end: int) -> _BufferSpec:
        return self.tir_buffer_spec(ch[0], ch[1], ch[2], start, end)

    def tir_buffer_spec(self, shape: list[Any], token: Token, attrs: Any, start: int, end: int) -> _BufferSpec:
        if not all(type(d) is int for d in shape):
            raise self.src.error("a buffer shape holds integers only", start, end)
        dtype = parse_dtype(token[1])
        if dtype is None:
            raise self.src.error(unknown_dtype_message(token[1]), token[2], token[3])
        options = {} if attrs is None else attrs.values
        for key, key_token in ({} if attrs is None else attrs.keys).items():
            if key not in _BUFFER_OPTIONS:
                hint = suggest(key, set(_BUFFER_OPTIONS))
                raise self.src.error(f"unknown buffer option `{key}`" + (f"; did you mean `{hint}`?" if hint else
                                     f" (options: {', '.join(_BUFFER_OPTIONS)})"), key_token[2], key_token[3])
        strides = options.get("strides")
        align = options.get("align", 0)
        scope = options.get("scope", "global")
        if strides is not None and (not isinstance(strides, tuple) or len(strides) != len(shape)
                                    or not all(type(s) is int for s in strides)):
            raise self.src.error(f"`strides` must be a list of {len(shape)} integers", start, end)
        if type(align) is not int or align < 0:
            raise self.src.error("`align` must be a non-negative integer (bytes)", start, end)
        if scope not in SCOPES:
            raise self.src.error(f"`scope` must be one of {', '.join(map(repr, SCOPES))}", start, end)
        return tuple(shape), dtype, strides, align, scope

    # -- blocks and statements
    def tir_block_open(self, ch: list[Any], start: int, end: int) -> list[Any]:
        self.tir_blocks.append([])
        return []

    def tir_stmts_append(self, ch: list[Any], start: int, end: int) -> list[Any]:
        items, stmt = ch
        items.append(stmt)
        return items

    def tir_block(self, ch: list[Any], start: int, end: int) -> Stmt:
        self.tir_unbind(self.tir_blocks.pop())
        items = ch[0]
        span = self.span(start, end)
        # Fold from the end so that each `let` takes the statements after it as its body.
        tail: list[Stmt] = []
        for item in reversed(items):
            if type(item) is _LetMark:
                body = seq(reversed(tail), span)
                tail = [LetStmt(item.var, item.value, body, item.span)]
            else:
                tail.append(item)
        return seq(reversed(tail), span)

    def tir_for_head(self, ch: list[Any], start: int, end: int) -> tuple[Var, PrimExpr, PrimExpr, str, _Undo]:
        token, kind_token, begin, end_value = ch
        kind = _KIND_NAMES.get(kind_token[1])
        if kind is None:
            raise self.src.error(f"unknown loop kind `{kind_token[1]}`; expected one of "
                                 f"{', '.join(_KIND_NAMES)}", kind_token[2], kind_token[3])
        var = Var(token[1][1:], begin.dtype, self.span(token[2], token[3]))
        undo: _Undo = []
        self.tir_bind(undo, var.name, var)
        return var, begin, end_value, kind, undo

    def tir_for(self, ch: list[Any], start: int, end: int) -> For:
        (var, begin, end_value, kind, undo), body = ch
        self.tir_unbind(undo)
        return For(var, begin, end_value, kind, body, self.span(start, end))

    def tir_alloc_head(self, ch: list[Any], start: int, end: int) -> tuple[Buffer, _Undo]:
        token, spec = ch
        buf = Buffer(token[1][1:], *spec, span=self.span(start, end))
        undo: _Undo = []
        self.tir_bind(undo, buf.name, buf)
        return buf, undo

    def tir_allocate(self, ch: list[Any], start: int, end: int) -> Allocate:
        (buf, undo), body = ch
        self.tir_unbind(undo)
        return Allocate(buf, body, self.span(start, end))

    def tir_store(self, ch: list[Any], start: int, end: int) -> BufferStore:
        token, indices, value = ch
        return BufferStore(self.tir_buffer(token), indices or (), value, self.span(start, end))

    def tir_store_const(self, ch: list[Any], start: int, end: int) -> BufferStore:
        token, list_token, value = ch
        return BufferStore(self.tir_buffer(token), self.tir_int_list(list_token), value, self.span(start, end))

    def tir_let(self, ch: list[Any], start: int, end: int) -> _LetMark:
        token, type_token, value = ch
        dtype = value.dtype
        if type_token is not None:
            dtype = parse_dtype(type_token[1])
            if dtype is None:
                raise self.src.error(unknown_dtype_message(type_token[1]), type_token[2], type_token[3])
        var = Var(token[1][1:], dtype, self.span(token[2], token[3]))
        self.tir_bind(self.tir_blocks[-1], var.name, var)
        return _LetMark(var, value, self.span(start, end))

    def tir_if(self, ch: list[Any], start: int, end: int) -> IfThenElse:
        return IfThenElse(ch[0], ch[1], ch[2], self.span(start, end))

    def tir_evaluate(self, ch: list[Any], start: int, end: int) -> Evaluate:
        return Evaluate(ch[0], self.span(start, end))

    def tir_assert(self, ch: list[Any], start: int, end: int) -> AssertStmt:
        return AssertStmt(ch[0], ch[1][1][1:-1], self.span(start, end))

    # -- expressions
    def tir_infix(self, ch: list[Any], start: int, end: int) -> BinaryOp:
        lhs, op, rhs = ch
        return BinaryOp(SYMBOL_OPS[op[1]], lhs, rhs, self.span(start, end))

    def tir_number(self, ch: list[Any], start: int, end: int) -> PrimExpr:
        value, dtype = self.number_of(ch[0])
        if dtype.startswith("int"):
            return IntImm(int(value), dtype, self.span(start, end))
        return FloatImm(float(self.float_of(ch[0])), dtype, self.span(start, end))

    def tir_bool(self, ch: list[Any], start: int, end: int) -> IntImm:
        return IntImm(ch[0][1] == "True", "bool", self.span(start, end))

    def tir_var(self, ch: list[Any], start: int, end: int) -> Var:
        found = self.tir_lookup(ch[0])
        if isinstance(found, Buffer):
            raise self.src.error(f"buffer `{ch[0][1]}` used as a value; load an element with `{ch[0][1]}[...]`",
                                 start, end)
        return found

    def tir_load(self, ch: list[Any], start: int, end: int) -> BufferLoad:
        return BufferLoad(self.tir_buffer(ch[0]), ch[1] or (), self.span(start, end))

    def tir_load_const(self, ch: list[Any], start: int, end: int) -> BufferLoad:
        return BufferLoad(self.tir_buffer(ch[0]), self.tir_int_list(ch[1]), self.span(start, end))

    def tir_int_list(self, token: Token) -> list[PrimExpr]:
        """The indices of `%A[0, 1]`, which the lexer reads as one INT_LIST token."""
        span = self.span(token[2], token[3])
        out: list[PrimExpr] = []
        for item in token[1][1:-1].split(","):
            item = item.strip()
            if item:
                value, dtype = self.number_of((token[0], item, token[2], token[3]))
                out.append(IntImm(int(value), dtype, span))
        return out

    def tir_call(self, ch: list[Any], start: int, end: int) -> PrimExpr:
        token, args = ch
        args = args or []
        name = token[1]
        span = self.span(start, end)
        dtype = parse_dtype(name)
        if dtype is not None:
            self.tir_arity(token, args, 1)
            return _cast(dtype, args[0], span)
        if name not in _BUILTINS:
            hint = suggest(name, set(_BUILTINS))
            raise self.src.error(f"unknown TIR function `{name}`" + (f"; did you mean `{hint}`?" if hint else ""),
                                 token[2], token[3])
        if name in _BINARY_CALLS:
            self.tir_arity(token, args, 2)
            return BinaryOp(name, args[0], args[1], span)
        if name == "not":
            self.tir_arity(token, args, 1)
            return Not(args[0], span)
        if name == "select":
            self.tir_arity(token, args, 3)
            return Select(args[0], args[1], args[2], span)
        if name == "if_then_else":
            self.tir_arity(token, args, 3)
            return IfExpr(args[0], args[1], args[2], span)
        if name == "ramp":
            self.tir_arity(token, args, 3)
            return Ramp(args[0], args[1], self.tir_lanes(args[2]), span)
        if name == "broadcast":
            self.tir_arity(token, args, 2)
            return Broadcast(args[0], self.tir_lanes(args[1]), span)
        self.tir_arity(token, args, ALL_INTRINSICS[name])
        return Call(name, args, span)

    def tir_arity(self, token: Token, args: list[PrimExpr], n: int) -> None:
        if len(args) != n:
            raise self.src.error(f"`{token[1]}` takes {n} argument(s), {len(args)} given", token[2], token[3])

    def tir_lanes(self, arg: PrimExpr) -> int:
        if type(arg) is not IntImm or not is_int(arg.dtype) or arg.value < 1:
            raise DiagnosticError("the lane count must be a positive integer literal", arg.span)
        return arg.value


def _cast(dtype: str, value: PrimExpr, span: Span) -> PrimExpr:
    """`dtype(value)`: a literal of that dtype when `value` is a literal it can hold exactly, else a Cast."""
    if lanes_of(dtype) == 1:
        if type(value) is IntImm and not is_float(dtype) and value.dtype != "bool":
            low, high = int_range(dtype)
            if low <= value.value <= high:
                return IntImm(value.value, dtype, span)
        if type(value) is FloatImm and is_float(dtype):
            return FloatImm(value.value, dtype, span)
    return Cast(dtype, value, span)
