"""Expanding `unrolled` loops: one copy of the body per iteration, the loop variable a literal.

Schedules write a register tile's rows and vectors, an epilogue's stores and a reduction over
lanes as `unrolled` loops (readable, small TIR); code generation expands each such loop with
constant bounds here, just before it emits it (docs/tir.md). The index arithmetic of every copy
is folded again with the rules lowering builds indices with (`irtool.tir_transform.arith`), so
`%acc[%r, ramp(%c * 8, 1, 8)]` at `%r = 1, %c = 1` is `%acc[1, ramp(8, 1, 8)]`: constant offsets,
which is what lets LLVM keep the tile in registers. Only nodes that the substitution rebuilt are
folded; the rest of the body is shared as it is.
"""

from __future__ import annotations

from irtool.ir.tir import BinaryOp, For, IntImm, PrimExpr, PrimFunc, Stmt, seq
from irtool.tir_transform.arith import refold
from irtool.tir_transform.mutator import FreshCopier, TirRewriter, stmt_parts, walk_exprs, walk_stmts


class _Substituter(FreshCopier):
    """A copy of one iteration: the loop variable replaced, rebuilt index nodes folded, binders
    inside given fresh identities (each copy binds its own)."""

    def __init__(self, loop: For, value: int, original: set[int]) -> None:
        super().__init__()
        self.var_map[id(loop.var)] = IntImm(value, loop.var.dtype)
        self.original = original

    def visit_expr(self, node: PrimExpr) -> PrimExpr:
        if type(node) is BinaryOp and id(node) not in self.original:
            return refold(node)
        return node


def constant_extent(loop: For) -> tuple[int, int] | None:
    """(begin, end) of a loop with literal bounds, else None."""
    if type(loop.begin) is IntImm and type(loop.end) is IntImm:
        return loop.begin.value, loop.end.value
    return None


def unroll_loop(loop: For) -> Stmt:
    """The iterations of an `unrolled` loop with literal bounds, in order, as one block."""
    bounds = constant_extent(loop)
    assert bounds is not None, "only a loop with literal bounds unrolls"
    original = {id(e) for s in walk_stmts(loop.body) for e in walk_exprs(stmt_parts(s)[0])}
    copies = [_Substituter(loop, k, original).rewrite_stmt(loop.body) for k in range(*bounds)]
    return seq([c for c in copies if c is not None])


class _Expander(TirRewriter):
    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if type(rebuilt) is For and rebuilt.kind == "unrolled" and constant_extent(rebuilt) is not None:
            return unroll_loop(rebuilt)
        return rebuilt


def expand_unrolled(func: PrimFunc) -> PrimFunc:
    """`func` with every `unrolled` loop of literal bounds expanded (inner loops first), as code
    generation sees it."""
    return _Expander().rewrite_func(func)
