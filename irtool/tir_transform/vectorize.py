"""Turning a vectorized loop into vector TIR: `for i in [b, b + N) { body }` becomes `body` with
`i` replaced by `ramp(b, 1, N)`, every value that depends on `i` computed in N lanes and the
rest broadcast where they meet (codegen maps that to SIMD instructions directly).

It applies when the body is stores, `let`s, inner loops and `if`s whose conditions do not depend
on `i`, and expressions without vector values of their own or lazily guarded branches that
depend on `i` (`if_then_else` would need masked loads). The caller has already checked that
iterations touch disjoint elements (`dependence.iterations_disjoint`), so running statement by
statement over all lanes equals running iteration by iteration.

This is the one vectorizer. `tir-loops` uses it in full; the code generator and the register
epilogue of lowering use its *straight-line* policy (`vectorize_loop`, `widen_expr`): bodies of
stores whose index depends on the loop and `let`s only, no `if_then_else`; other loops keep the
`vectorized` mark and are left to LLVM's loop vectorizer.
"""

from __future__ import annotations

from irtool.core.span import Span
from irtool.ir.tir import (BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call, Cast, FloatImm, For, IfExpr,
                           IfThenElse, IntImm, LetStmt, Not, PrimExpr, Ramp, Select, SeqStmt, Stmt, Var, children,
                           lanes_of, seq, with_lanes)
from irtool.tir_transform.mutator import rebuild_expr


class NotVectorizable(Exception):
    """The body has a construct that needs lanes it cannot have (the message says which)."""


# Loops wider than this stay loops under the straight-line policy (LLVM vectorizes them).
MAX_LANES = 64


class _Vectorizer:
    def __init__(self, vectors: dict[int, PrimExpr], lanes: int, straight_line: bool = False) -> None:
        self.lanes = lanes
        # Scalar variables that become vectors: the loop variable and lets that depend on it.
        self.vectors = vectors
        self.straight_line = straight_line

    def is_vector(self, e: PrimExpr) -> bool:
        return lanes_of(e.dtype) > 1

    def widen(self, e: PrimExpr) -> PrimExpr:
        return e if self.is_vector(e) else Broadcast(e, self.lanes, e.span)

    def expr(self, root: PrimExpr) -> PrimExpr:
        """`root` over lanes (the same object when it does not depend on the loop)."""
        results: list[PrimExpr] = []
        done: dict[int, PrimExpr] = {}   # shared subexpressions stay shared
        todo: list[tuple[PrimExpr, bool]] = [(root, False)]
        while todo:
            node, ready = todo.pop()
            kids = children(node)
            if not ready and id(node) in done:
                results.append(done[id(node)])
                continue
            if not ready:
                if self.is_vector(node):
                    raise NotVectorizable("the body already computes with vectors")
                if self.straight_line and isinstance(node, IfExpr):
                    raise NotVectorizable("`if_then_else` needs masked loads")
                if self.straight_line and isinstance(node, BufferLoad):
                    self.check_buffer(node.buffer)
                if kids:
                    todo.append((node, True))
                    todo.extend((k, False) for k in reversed(kids))
                    continue
            new = results[len(results) - len(kids):] if kids else []
            if kids:
                del results[len(results) - len(kids):]
            done[id(node)] = out = self.node(node, new)
            results.append(out)
        return results[0]

    def node(self, node: PrimExpr, kids: list[PrimExpr]) -> PrimExpr:
        if isinstance(node, Var):
            return self.vectors.get(id(node), node)
        if isinstance(node, (IntImm, FloatImm)) or not any(self.is_vector(k) for k in kids):
            return rebuild_expr(node, kids)
        if isinstance(node, IfExpr):
            if self.is_vector(kids[0]):
                raise NotVectorizable("an `if_then_else` condition depends on the loop")
            return IfExpr(kids[0], self.widen(kids[1]), self.widen(kids[2]), node.span)
        if isinstance(node, Select):
            return Select(kids[0], self.widen(kids[1]), self.widen(kids[2]), node.span)
        if isinstance(node, BinaryOp):
            return BinaryOp(node.op, self.widen(kids[0]), self.widen(kids[1]), node.span)
        if isinstance(node, Cast):
            return Cast(with_lanes(node.dtype, self.lanes), kids[0], node.span)
        if isinstance(node, Not):
            return Not(kids[0], node.span)
        if isinstance(node, Call):
            return Call(node.name, [self.widen(k) for k in kids], node.span)
        if isinstance(node, BufferLoad):
            self.check_buffer(node.buffer)
            return BufferLoad(node.buffer, kids, node.span)
        raise NotVectorizable(f"cannot vectorize {type(node).__name__}")

    def check_buffer(self, buf: Buffer) -> None:
        if lanes_of(buf.dtype) > 1:
            raise NotVectorizable(f"`%{buf.name}` holds vectors already")

    def stmt(self, root: Stmt) -> Stmt:
        """The body over lanes. Recursion follows statement nesting (shallow), not program size."""
        if isinstance(root, SeqStmt):
            return seq([self.stmt(s) for s in root.stmts], root.span)
        if isinstance(root, BufferStore):
            indices = [self.expr(i) for i in root.indices]
            value = self.expr(root.value)
            if any(self.is_vector(i) for i in indices):
                if not self.straight_line:
                    self.check_buffer(root.buffer)
                return BufferStore(root.buffer, indices, self.widen(value), root.span)
            if self.straight_line:
                raise NotVectorizable(f"every lane stores to one element of `%{root.buffer.name}`")
            if self.is_vector(value):
                raise NotVectorizable(f"a store to `%{root.buffer.name}` at an index that does not depend on the "
                                      "loop")
            return BufferStore(root.buffer, indices, value, root.span)
        if isinstance(root, LetStmt):   # a chain of lets without recursion
            lets: list[tuple[Var, PrimExpr, Span | None]] = []
            while isinstance(root, LetStmt):
                value = self.expr(root.value)
                var = root.var
                if self.is_vector(value):
                    var = Var(var.name, value.dtype, var.span)
                    self.vectors[id(root.var)] = var
                lets.append((var, value, root.span))
                root = root.body
            body = self.stmt(root)
            for var, value, span in reversed(lets):
                body = LetStmt(var, value, body, span)
            return body
        if self.straight_line:
            raise NotVectorizable(f"a {type(root).__name__} statement is not straight-line code")
        if isinstance(root, For):
            begin, end = self.expr(root.begin), self.expr(root.end)
            if self.is_vector(begin) or self.is_vector(end):
                raise NotVectorizable(f"the bounds of loop `%{root.var.name}` depend on the loop")
            return For(root.var, begin, end, root.kind, self.stmt(root.body), root.span)
        if isinstance(root, IfThenElse):
            cond = self.expr(root.cond)
            if self.is_vector(cond):
                raise NotVectorizable("an `if` condition depends on the loop")
            else_body = None if root.else_body is None else self.stmt(root.else_body)
            return IfThenElse(cond, self.stmt(root.then_body), else_body, root.span)
        raise NotVectorizable(f"cannot vectorize a {type(root).__name__} statement")


def vectorize_body(loop: For) -> Stmt:
    """The vector form of `loop` (literal bounds); raises NotVectorizable."""
    assert type(loop.begin) is IntImm and type(loop.end) is IntImm
    lanes = loop.end.value - loop.begin.value
    if lanes < 2:
        raise NotVectorizable("the loop has fewer than two iterations")
    ramp = Ramp(loop.begin, IntImm(1, loop.var.dtype), lanes, loop.var.span)
    return _Vectorizer({id(loop.var): ramp}, lanes).stmt(loop.body)


def vectorize_loop(loop: For) -> Stmt | None:
    """The straight-line vector form of a `vectorized` loop with literal bounds and at most
    MAX_LANES iterations (what codegen emits as SIMD code), or None when it stays a loop."""
    if not (type(loop.begin) is IntImm and type(loop.end) is IntImm):
        return None
    lanes = loop.end.value - loop.begin.value
    if not 1 < lanes <= MAX_LANES:
        return None
    ramp = Ramp(loop.begin, IntImm(1, loop.var.dtype), lanes)
    try:
        return _Vectorizer({id(loop.var): ramp}, lanes, straight_line=True).stmt(loop.body)
    except NotVectorizable:
        return None


def widen_expr(expr: PrimExpr, subst: dict[int, PrimExpr]) -> PrimExpr | None:
    """`expr` with the variables whose ids `subst` maps replaced by (possibly vector) values,
    scalars broadcast where they meet vectors (a fused epilogue applied to a register tile's
    vector); None when the expression has no straight-line vector form."""
    lanes = {lanes_of(v.dtype) for v in subst.values()} - {1}
    if len(lanes) > 1:
        return None
    try:
        return _Vectorizer(dict(subst), max(lanes, default=1), straight_line=True).expr(expr)
    except NotVectorizable:
        return None
