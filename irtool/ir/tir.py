"""TIR: the loop-level dialect that lowered Relay functions become (`primfn @f(...) { ... }`).

Nodes are plain immutable-by-convention objects. `Var` and `Buffer` are compared by identity
(each binder makes a new one); structural comparison modulo renaming is `tir_equality`. Every
expression computes its `dtype` when built (a vector dtype such as `float32x16` for lane-wise
values); whether operand dtypes agree is the verifier's job (`irtool.analysis.tir_verify`), so
that a pass that builds ill-typed TIR gets a located error instead of a crash. The text syntax is
in `grammar/tir.lark` and `docs/tir.md`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Union

import numpy as np

from irtool.ir.expr import EMPTY_ATTRS, Attrs
from irtool.core.span import Span
from irtool.ir.types import dtype_bits

# Binary operators: infix ones print with their symbol, the rest as calls `floordiv(a, b)`.
ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC_OPS = ("and", "or")
# Integer bit operations, printed as calls. A shift count outside [0, bits) shifts every bit out
# (0, or -1 for `shift_right` of a negative value), as numpy's shifts do.
BIT_OPS = ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right")
INFIX_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<",
                 "le": "<=", "gt": ">", "ge": ">="}
SYMBOL_OPS = {symbol: op for op, symbol in INFIX_SYMBOLS.items()}
# Math intrinsics (`exp(%x)`): name -> number of arguments. All take and return floats of one dtype.
INTRINSICS = {"exp": 1, "exp2": 1, "log": 1, "log2": 1, "log10": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1,
              "sigmoid": 1, "erf": 1, "fabs": 1, "floor": 1, "ceil": 1, "round": 1, "trunc": 1, "sin": 1,
              "cos": 1, "tan": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "asinh": 1,
              "acosh": 1, "atanh": 1, "pow": 2, "fmod": 2, "fma": 3}
# Integer intrinsics (int32 lanes): name -> number of arguments. `dot_u8s8(acc, a, b)`: each lane
# of `acc` plus the sum of the four products of a's bytes (unsigned) and b's bytes (signed) in
# that lane, wrapping: x86's VNNI `vpdpbusd`, the step of the int8 dot-product tiles.
INTEGER_INTRINSICS = {"dot_u8s8": 3}
ALL_INTRINSICS = {**INTRINSICS, **INTEGER_INTRINSICS}
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")
SCOPES = ("global", "local")

_NUMPY_FLOATS = ("float16", "float32", "float64")   # float literals are kept rounded to these


@lru_cache(maxsize=None)
def lanes_of(dtype: str) -> int:
    return dtype_bits(dtype)[1]


@lru_cache(maxsize=None)
def element_of(dtype: str) -> str:
    """The scalar dtype of one lane: `float32x16` -> `float32`."""
    return dtype.split("x", 1)[0]


@lru_cache(maxsize=None)
def with_lanes(dtype: str, lanes: int) -> str:
    base = element_of(dtype)
    return base if lanes == 1 else f"{base}x{lanes}"


@lru_cache(maxsize=None)
def int_range(dtype: str) -> tuple[int, int]:
    """The values a scalar integer or bool dtype holds, inclusive."""
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def is_bool(dtype: str) -> bool:
    return dtype.startswith("bool")


# ---- Buffers -------------------------------------------------------------------------------------

class Buffer:
    """A typed n-d memory region: a PrimFunc parameter or an `allocate`d scratch buffer.

    `strides` (in elements) are None for a dense row-major buffer; `align` is in bytes; `scope`
    is `global` (ordinary memory) or `local` (a per-thread scratch area codegen may keep in
    registers, TVM's `C.local`).
    """

    __slots__ = ("name", "shape", "dtype", "strides", "align", "scope", "span")

    def __init__(self, name: str, shape: Iterable[int], dtype: str, strides: Iterable[int] | None = None,
                 align: int = 0, scope: str = "global", span: Span | None = None) -> None:
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.strides = None if strides is None else tuple(strides)
        self.align = align
        self.scope = scope
        self.span = span

    def __repr__(self) -> str:
        return f"Buffer(%{self.name}, {self.shape}, {self.dtype})"


# ---- Expressions ---------------------------------------------------------------------------------

class PrimExpr:
    __slots__ = ("dtype", "span")

    dtype: str
    span: Span | None


class Var(PrimExpr):
    """A loop variable or `let` variable, compared by identity."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str, span: Span | None = None) -> None:
        self.name = name
        self.dtype = dtype
        self.span = span

    def __repr__(self) -> str:
        return f"Var(%{self.name}: {self.dtype})"


class IntImm(PrimExpr):
    """An integer or bool literal (`bool` dtype holds 0/1)."""

    __slots__ = ("value",)

    def __init__(self, value: int, dtype: str = "int32", span: Span | None = None) -> None:
        self.value = int(value)
        self.dtype = dtype
        self.span = span


class FloatImm(PrimExpr):
    __slots__ = ("value",)

    def __init__(self, value: float, dtype: str = "float32", span: Span | None = None) -> None:
        # Kept rounded to the dtype, so that the shortest text of the value reads back exactly.
        self.value = float(np.dtype(dtype).type(value)) if dtype in _NUMPY_FLOATS else float(value)
        self.dtype = dtype
        self.span = span


class Cast(PrimExpr):
    """Conversion to `dtype` (lane count preserved); float to int truncates toward zero."""

    __slots__ = ("value",)

    def __init__(self, dtype: str, value: PrimExpr, span: Span | None = None) -> None:
        self.dtype = dtype
        self.value = value
        self.span = span


class BinaryOp(PrimExpr):
    """`op` is one of ARITH_OPS, COMPARE_OPS, LOGIC_OPS or BIT_OPS; comparisons give bool lanes."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: PrimExpr, b: PrimExpr, span: Span | None = None) -> None:
        self.op = op
        self.a = a
        self.b = b
        self.dtype = with_lanes("bool", lanes_of(a.dtype)) if op in COMPARE_OPS else a.dtype
        self.span = span


class Not(PrimExpr):
    __slots__ = ("a",)

    def __init__(self, a: PrimExpr, span: Span | None = None) -> None:
        self.a = a
        self.dtype = a.dtype
        self.span = span


class _Conditional(PrimExpr):
    """The fields of the two conditional expressions; they differ only in which sides run."""

    __slots__ = ("cond", "true_value", "false_value")

    def __init__(self, cond: PrimExpr, true_value: PrimExpr, false_value: PrimExpr,
                 span: Span | None = None) -> None:
        self.cond = cond
        self.true_value = true_value
        self.false_value = false_value
        self.dtype = true_value.dtype
        self.span = span


class Select(_Conditional):
    """`select(c, t, f)`: both sides are evaluated (a data choice, not control flow), as in TVM."""

    __slots__ = ()


class IfExpr(_Conditional):
    """`if_then_else(c, t, f)`: evaluates only the chosen side (guards loads, e.g. for padding)."""

    __slots__ = ()


class BufferLoad(PrimExpr):
    """`%A[i, j]`; a vector index (a ramp) in any position makes a vector load of that many lanes."""

    __slots__ = ("buffer", "indices")

    def __init__(self, buffer: Buffer, indices: Iterable[PrimExpr], span: Span | None = None) -> None:
        self.buffer = buffer
        self.indices = tuple(indices)
        lanes = max((lanes_of(i.dtype) for i in self.indices), default=1)
        self.dtype = buffer.dtype if lanes == 1 else with_lanes(buffer.dtype, lanes)
        self.span = span


class Ramp(PrimExpr):
    """The vector `[base, base + stride, ..., base + (lanes - 1) * stride]`."""

    __slots__ = ("base", "stride", "lanes")

    def __init__(self, base: PrimExpr, stride: PrimExpr, lanes: int, span: Span | None = None) -> None:
        self.base = base
        self.stride = stride
        self.lanes = lanes
        self.dtype = with_lanes(base.dtype, lanes)
        self.span = span


class Broadcast(PrimExpr):
    """A scalar repeated in `lanes` lanes."""

    __slots__ = ("value", "lanes")

    def __init__(self, value: PrimExpr, lanes: int, span: Span | None = None) -> None:
        self.value = value
        self.lanes = lanes
        self.dtype = with_lanes(value.dtype, lanes)
        self.span = span


class Call(PrimExpr):
    """An intrinsic (see ALL_INTRINSICS), lane-wise; its dtype is its first argument's."""

    __slots__ = ("name", "args")

    def __init__(self, name: str, args: Iterable[PrimExpr], span: Span | None = None) -> None:
        self.name = name
        self.args = tuple(args)
        self.dtype = self.args[0].dtype if self.args else "void"
        self.span = span


# ---- Statements ----------------------------------------------------------------------------------

class Stmt:
    __slots__ = ("span",)

    span: Span | None


class For(Stmt):
    """`for %i in range(begin, end) { body }`; `kind` is one of LOOP_KINDS (`range` is serial)."""

    __slots__ = ("var", "begin", "end", "kind", "body")

    def __init__(self, var: Var, begin: PrimExpr, end: PrimExpr, kind: str, body: Stmt,
                 span: Span | None = None) -> None:
        self.var = var
        self.begin = begin
        self.end = end
        self.kind = kind
        self.body = body
        self.span = span


class BufferStore(Stmt):
    __slots__ = ("buffer", "indices", "value")

    def __init__(self, buffer: Buffer, indices: Iterable[PrimExpr], value: PrimExpr,
                 span: Span | None = None) -> None:
        self.buffer = buffer
        self.indices = tuple(indices)
        self.value = value
        self.span = span


class Allocate(Stmt):
    """A scratch buffer that lives for `body`; its contents start undefined."""

    __slots__ = ("buffer", "body")

    def __init__(self, buffer: Buffer, body: Stmt, span: Span | None = None) -> None:
        self.buffer = buffer
        self.body = body
        self.span = span


class LetStmt(Stmt):
    """`let %x: int32 = value;` binds `var` in `body` (in the text: the rest of the block)."""

    __slots__ = ("var", "value", "body")

    def __init__(self, var: Var, value: PrimExpr, body: Stmt, span: Span | None = None) -> None:
        self.var = var
        self.value = value
        self.body = body
        self.span = span


class IfThenElse(Stmt):
    __slots__ = ("cond", "then_body", "else_body")

    def __init__(self, cond: PrimExpr, then_body: Stmt, else_body: Stmt | None = None,
                 span: Span | None = None) -> None:
        self.cond = cond
        self.then_body = then_body
        self.else_body = else_body
        self.span = span


class SeqStmt(Stmt):
    """Statements in order. Canonical form (what `seq` builds and the parser produces): never one
    statement, never directly nested, so that printing and re-parsing give the same tree."""

    __slots__ = ("stmts",)

    def __init__(self, stmts: Iterable[Stmt], span: Span | None = None) -> None:
        self.stmts = tuple(stmts)
        self.span = span


class Evaluate(Stmt):
    """An expression computed for its effect (or for nothing: `evaluate(0);` is a no-op)."""

    __slots__ = ("value",)

    def __init__(self, value: PrimExpr, span: Span | None = None) -> None:
        self.value = value
        self.span = span


class AssertStmt(Stmt):
    """Fails the function with `message` when `cond` is false."""

    __slots__ = ("cond", "message")

    def __init__(self, cond: PrimExpr, message: str, span: Span | None = None) -> None:
        self.cond = cond
        self.message = message
        self.span = span


def seq(stmts: Iterable[Stmt], span: Span | None = None) -> Stmt:
    """A statement sequence in canonical form: nested sequences spliced in, one statement alone."""
    flat: list[Stmt] = []
    for stmt in stmts:
        if type(stmt) is SeqStmt:
            flat.extend(stmt.stmts)
        else:
            flat.append(stmt)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(flat, span)


# ---- Functions -----------------------------------------------------------------------------------

class PrimFunc:
    """A TIR function over buffers; it returns nothing (outputs are written into parameters)."""

    __slots__ = ("params", "body", "attrs", "span")

    def __init__(self, params: Iterable[Buffer], body: Stmt, attrs: Attrs = EMPTY_ATTRS,
                 span: Span | None = None) -> None:
        self.params = tuple(params)
        self.body = body
        self.attrs = attrs
        self.span = span

    def __repr__(self) -> str:
        return f"PrimFunc({', '.join(p.name for p in self.params)})"


Node = Union[PrimExpr, Stmt]


def children(node: Node) -> tuple[Node, ...]:
    """The sub-expressions and sub-statements of a node, in text order (for generic walks)."""
    if isinstance(node, BinaryOp):
        return (node.a, node.b)
    if isinstance(node, (Var, IntImm, FloatImm)):
        return ()
    if isinstance(node, BufferLoad):
        return node.indices
    if isinstance(node, (Cast, Broadcast)):
        return (node.value,)
    if isinstance(node, Not):
        return (node.a,)
    if isinstance(node, (Select, IfExpr)):
        return (node.cond, node.true_value, node.false_value)
    if isinstance(node, Ramp):
        return (node.base, node.stride)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, For):
        return (node.var, node.begin, node.end, node.body)
    if isinstance(node, BufferStore):
        return (*node.indices, node.value)
    if isinstance(node, Allocate):
        return (node.body,)
    if isinstance(node, LetStmt):
        return (node.var, node.value, node.body)
    if isinstance(node, IfThenElse):
        rest = () if node.else_body is None else (node.else_body,)
        return (node.cond, node.then_body, *rest)
    if isinstance(node, SeqStmt):
        return node.stmts
    if isinstance(node, Evaluate):
        return (node.value,)
    if isinstance(node, AssertStmt):
        return (node.cond,)
    raise TypeError(f"not a TIR node: {node!r}")
