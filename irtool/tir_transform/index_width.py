"""Index arithmetic in 64 bits for the kernels whose indices can exceed int32.

Lowering writes loop variables and index arithmetic in int32 (`te.INDEX`): the narrower type is
what vectorised index code and LLVM's loop analyses do best with, and every kernel of an ordinary
model fits it. A kernel is widened as a whole when that is not proven: when one of its buffers
holds more than INT32_MAX elements (a flattened index of it may not fit), or when an int32
literal is out of range (a loop over an inlined tensor that large). Then every loop and `let`
variable of index type becomes int64, and the arithmetic over them follows: an int32 literal
beside an int64 operand is retyped, any other int32 operand is sign-extended, and a stored value
is converted back to its buffer's dtype.
"""

from __future__ import annotations

from irtool.ir.tir import (Allocate, BinaryOp, Buffer, BufferStore, Cast, For, IfExpr, IntImm, LetStmt, PrimExpr,
                           PrimFunc, Ramp, Select, Stmt, Var, children, element_of, lanes_of, with_lanes)
from irtool.tir_transform.mutator import TirRewriter, walk_stmts

INT32_MAX = 2 ** 31 - 1
NARROW, WIDE = "int32", "int64"


def needs_int64(func: PrimFunc) -> bool:
    """True unless every buffer of `func` has at most INT32_MAX elements and every int32 literal
    is in range (then no index the kernel computes can overflow int32)."""
    buffers: list[Buffer] = [*func.params]
    buffers += [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    if any(_elements(b) > INT32_MAX for b in buffers):
        return True
    seen: set[int] = set()
    stack: list[object] = [func.body]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if _out_of_int32(node):
            return True
        stack.extend(children(node))  # type: ignore[arg-type]
    return False


def widen_indices(func: PrimFunc) -> PrimFunc:
    """`func` with 64-bit index arithmetic when `needs_int64(func)`, else `func` itself."""
    return with_int64_indices(func) if needs_int64(func) else func


def with_int64_indices(func: PrimFunc) -> PrimFunc:
    """`func` with every int32 loop variable, and the index arithmetic over it, in int64."""
    return _Widen().rewrite_func(func)


def _out_of_int32(node: object) -> bool:
    """An int32 literal whose value int32 cannot hold (a bound or stride of a huge tensor)."""
    return type(node) is IntImm and node.dtype == NARROW and not -INT32_MAX - 1 <= node.value <= INT32_MAX


def _elements(buf: Buffer) -> int:
    n = 1
    for d in buf.shape:
        n *= d
    return n


def _as(e: PrimExpr, scalar: str) -> PrimExpr:
    """`e` with `scalar` lanes: a literal retyped, anything else converted."""
    if element_of(e.dtype) == scalar:
        return e
    dtype = with_lanes(scalar, lanes_of(e.dtype))
    if type(e) is IntImm:
        return IntImm(e.value, dtype, e.span)  # type: ignore[attr-defined]
    return Cast(dtype, e, e.span)


def _unify(a: PrimExpr, b: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    """The operands with int32 lanes widened when the other side has int64 lanes."""
    ea, eb = element_of(a.dtype), element_of(b.dtype)
    if ea == NARROW and eb == WIDE:
        return _as(a, WIDE), b
    if ea == WIDE and eb == NARROW:
        return a, _as(b, WIDE)
    return a, b


class _Widen(TirRewriter):
    def pre(self, stmt: Stmt) -> Stmt | None:
        if isinstance(stmt, (For, LetStmt)) and stmt.var.dtype == NARROW:
            # A let follows its value (memoised, so not rewritten twice); a loop is widened.
            if isinstance(stmt, For) or self.rewrite_expr(stmt.value).dtype == WIDE:
                self.var_map[id(stmt.var)] = Var(stmt.var.name, WIDE, stmt.var.span)
        return stmt

    def visit_expr(self, node: PrimExpr) -> PrimExpr:
        if _out_of_int32(node):
            return _as(node, WIDE)
        if isinstance(node, BinaryOp):
            a, b = _unify(node.a, node.b)
            return node if a is node.a and b is node.b else BinaryOp(node.op, a, b, node.span)
        if isinstance(node, (Select, IfExpr)):
            t, f = _unify(node.true_value, node.false_value)
            if t is node.true_value and f is node.false_value:
                return node
            return type(node)(node.cond, t, f, node.span)
        if isinstance(node, Ramp):
            base, stride = _unify(node.base, node.stride)
            return node if base is node.base and stride is node.stride else Ramp(base, stride, node.lanes, node.span)
        return node

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if isinstance(rebuilt, For) and rebuilt.var.dtype == WIDE:
            begin, end = _as(rebuilt.begin, WIDE), _as(rebuilt.end, WIDE)
            return For(rebuilt.var, begin, end, rebuilt.kind, rebuilt.body, rebuilt.span)
        if isinstance(rebuilt, BufferStore) and isinstance(original, BufferStore):
            want = original.value.dtype   # an int32 element computed from widened indices
            if rebuilt.value.dtype != want:
                return BufferStore(rebuilt.buffer, rebuilt.indices, _as(rebuilt.value, element_of(want)), rebuilt.span)
        return rebuilt
