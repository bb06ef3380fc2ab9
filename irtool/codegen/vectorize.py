"""Explicit vector code for `vectorized` loops (TVM's VectorizeLoop, in its simplest form).

A `for %i in vectorized(b, b + n)` loop with constant bounds, n ≤ MAX_LANES, whose body is
straight-line stores and lets (no nested loops, branches, `if_then_else`, allocations or vectors
already) becomes its body once, with `%i` replaced by `ramp(b, 1, n)`: scalars that meet vectors
are broadcast, loads and stores indexed by the ramp become contiguous vector accesses. Any other
vectorized loop is left to LLVM's loop vectorizer (the code generator tags it with
`llvm.loop.vectorize.enable`).
"""

from __future__ import annotations

from irtool.ir.tir import (BinaryOp, Broadcast, BufferLoad, BufferStore, Call, Cast, FloatImm, For, IntImm, LetStmt,
                           Not, PrimExpr, Ramp, Select, SeqStmt, Stmt, Var, children, lanes_of, seq, with_lanes)

MAX_LANES = 64


class _NotVectorizable(Exception):
    pass


def vectorize_loop(loop: For) -> Stmt | None:
    """The loop's body in vector form, or None when it must stay a loop."""
    if not (isinstance(loop.begin, IntImm) and isinstance(loop.end, IntImm)):
        return None
    lanes = loop.end.value - loop.begin.value
    if not 1 < lanes <= MAX_LANES:
        return None
    try:
        return _Vectorizer({id(loop.var): Ramp(loop.begin, IntImm(1, loop.var.dtype), lanes)}).stmt(loop.body)
    except _NotVectorizable:
        return None


def widen_expr(expr: PrimExpr, subst: dict[int, PrimExpr]) -> PrimExpr | None:
    """`expr` with the variables whose ids `subst` maps replaced by (possibly vector) values,
    scalars broadcast where they meet vectors (a fused epilogue applied to a register tile's
    vector); None when the expression has no vector form (`if_then_else`, vector buffers)."""
    try:
        return _Vectorizer(dict(subst)).expr(expr)
    except _NotVectorizable:
        return None


class _Vectorizer:
    def __init__(self, subst: dict[int, PrimExpr]) -> None:
        self.subst = subst

    def stmt(self, root: Stmt) -> Stmt:
        """Straight-line bodies only: stores, and lets (which scope everything after them; the
        variables are bound once, so widening a let's scope changes nothing)."""
        items: list[tuple[Var, PrimExpr] | Stmt] = []
        pending = [root]
        while pending:
            node = pending.pop()
            if isinstance(node, SeqStmt):
                pending.extend(reversed(node.stmts))
            elif isinstance(node, LetStmt):
                value = self.expr(node.value)
                var = Var(node.var.name, value.dtype, node.var.span)
                self.subst[id(node.var)] = var
                items.append((var, value))
                pending.append(node.body)
            elif isinstance(node, BufferStore):
                indices = [self.expr(i) for i in node.indices]
                value = self.expr(node.value)
                index_lanes = max((lanes_of(i.dtype) for i in indices), default=1)
                if index_lanes == 1:
                    raise _NotVectorizable   # every iteration stores to one place (a reduction)
                if index_lanes > 1 and lanes_of(value.dtype) == 1:
                    value = Broadcast(value, index_lanes)
                items.append(BufferStore(node.buffer, indices, value, node.span))
            else:
                raise _NotVectorizable
        tail: list[Stmt] = []
        for item in reversed(items):
            if isinstance(item, tuple):
                tail = [LetStmt(item[0], item[1], seq(tail))]
            else:
                tail.insert(0, item)
        return seq(tail)

    def expr(self, root: PrimExpr) -> PrimExpr:
        done: dict[int, PrimExpr] = {}
        stack: list[tuple[PrimExpr, bool]] = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in done:
                continue
            kids = () if isinstance(node, Var) else children(node)
            if not ready and kids:
                stack.append((node, True))
                stack.extend((k, False) for k in kids)   # type: ignore[misc]
                continue
            done[id(node)] = self.rebuild(node, [done[id(k)] for k in kids])  # type: ignore[arg-type]
        return done[id(root)]

    def widen(self, values: list[PrimExpr]) -> list[PrimExpr]:
        lanes = max(lanes_of(v.dtype) for v in values)
        if any(lanes_of(v.dtype) not in (1, lanes) for v in values):
            raise _NotVectorizable
        return [Broadcast(v, lanes) if lanes > 1 and lanes_of(v.dtype) == 1 else v for v in values]

    def rebuild(self, node: PrimExpr, args: list[PrimExpr]) -> PrimExpr:
        if isinstance(node, Var):
            return self.subst.get(id(node), node)
        if isinstance(node, (IntImm, FloatImm)):
            return node
        if isinstance(node, BinaryOp):
            a, b = self.widen(args)
            return BinaryOp(node.op, a, b, node.span)
        if isinstance(node, Not):
            return Not(args[0], node.span)
        if isinstance(node, Select):
            t, f = self.widen(args[1:])
            cond = args[0]
            if lanes_of(cond.dtype) not in (1, lanes_of(t.dtype)):
                raise _NotVectorizable
            return Select(cond, t, f, node.span)
        if isinstance(node, Cast):
            return Cast(with_lanes(node.dtype, lanes_of(args[0].dtype)), args[0], node.span)
        if isinstance(node, BufferLoad):
            if lanes_of(node.buffer.dtype) > 1:
                raise _NotVectorizable
            lanes = {lanes_of(a.dtype) for a in args} - {1}
            if len(lanes) > 1:
                raise _NotVectorizable
            return BufferLoad(node.buffer, args, node.span)
        if isinstance(node, Call):
            return Call(node.name, self.widen(args), node.span)
        raise _NotVectorizable   # if_then_else, ramps and broadcasts already there
