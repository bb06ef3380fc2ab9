"""Rebuilding TIR trees: the shared walk under every TIR transformation.

`TirRewriter` rewrites expressions bottom-up and statements top-down-then-bottom-up, both with
explicit stacks (lowered code has long `let` chains and deep fused expressions), and never
mutates a node: an unchanged subtree comes back as the same object, so callers can tell whether
anything happened with `is`. Subclasses hook in at three points:
- `visit_expr(node)`: a node whose children are already rewritten (simplification rules);
- `pre(stmt)`: before a statement's children, to set up context (a loop range, a substitution)
  or to hand back another statement to process in its place (an `if` with a constant condition
  becomes its branch), or None to drop it;
- `post(original, rebuilt)`: after the children, to replace or drop (None) the statement.
`var_map` and `buffer_map` rename or substitute binders by identity (every binder is bound once
in a function, so an identity-keyed map never captures the wrong variable).
"""

from __future__ import annotations

from collections.abc import Iterable

from irtool.ir.tir import (Allocate, AssertStmt, BinaryOp, Broadcast, Buffer, BufferLoad, BufferStore, Call,
                           Cast, Evaluate, FloatImm, For, IfExpr, IfThenElse, IntImm, LetStmt, Not, PrimExpr,
                           PrimFunc, Ramp, Select, SeqStmt, Stmt, Var, children, seq)

EMPTY = SeqStmt(())


def is_empty(stmt: Stmt | None) -> bool:
    """True for a statement that does nothing (a dropped one, or an empty block)."""
    return stmt is None or (type(stmt) is SeqStmt and not stmt.stmts)


def rebuild_expr(node: PrimExpr, kids: list[PrimExpr]) -> PrimExpr:
    """`node` with its children replaced by `kids` (the node itself when none changed)."""
    old = children(node)
    if all(a is b for a, b in zip(old, kids)):
        return node
    span = node.span
    if isinstance(node, BinaryOp):
        return BinaryOp(node.op, kids[0], kids[1], span)
    if isinstance(node, BufferLoad):
        return BufferLoad(node.buffer, kids, span)
    if isinstance(node, Cast):
        return Cast(node.dtype, kids[0], span)
    if isinstance(node, Broadcast):
        return Broadcast(kids[0], node.lanes, span)
    if isinstance(node, Not):
        return Not(kids[0], span)
    if isinstance(node, Select):
        return Select(kids[0], kids[1], kids[2], span)
    if isinstance(node, IfExpr):
        return IfExpr(kids[0], kids[1], kids[2], span)
    if isinstance(node, Ramp):
        return Ramp(kids[0], kids[1], node.lanes, span)
    if isinstance(node, Call):
        return Call(node.name, kids, span)
    raise TypeError(f"not a TIR expression with children: {node!r}")


def stmt_parts(stmt: Stmt) -> tuple[tuple[PrimExpr, ...], tuple[Stmt | None, ...]]:
    """The expressions a statement evaluates (in order) and its child statements."""
    if isinstance(stmt, For):
        return (stmt.begin, stmt.end), (stmt.body,)
    if isinstance(stmt, BufferStore):
        return (*stmt.indices, stmt.value), ()
    if isinstance(stmt, Allocate):
        return (), (stmt.body,)
    if isinstance(stmt, LetStmt):
        return (stmt.value,), (stmt.body,)
    if isinstance(stmt, IfThenElse):
        return (stmt.cond,), (stmt.then_body, stmt.else_body)
    if isinstance(stmt, SeqStmt):
        return (), stmt.stmts
    if isinstance(stmt, Evaluate):
        return (stmt.value,), ()
    if isinstance(stmt, AssertStmt):
        return (stmt.cond,), ()
    raise TypeError(f"not a TIR statement: {stmt!r}")


class TirRewriter:
    """Identity rewrite of PrimFuncs; subclasses override the hooks (see the module docstring)."""

    def __init__(self) -> None:
        self.var_map: dict[int, PrimExpr] = {}
        self.buffer_map: dict[int, Buffer] = {}
        # id -> (node, result); the node is kept so that its id is not reused while cached.
        self._memo: dict[int, tuple[PrimExpr, PrimExpr]] = {}

    # -- hooks
    def visit_expr(self, node: PrimExpr) -> PrimExpr:
        return node

    def pre(self, stmt: Stmt) -> Stmt | None:
        return stmt

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        return rebuilt

    # -- functions
    def rewrite_func(self, func: PrimFunc) -> PrimFunc:
        body = self.rewrite_stmt(func.body)
        params = tuple(self.buffer_map.get(id(p), p) for p in func.params)
        if body is func.body and all(a is b for a, b in zip(params, func.params)):
            return func
        return PrimFunc(params, EMPTY if body is None else body, func.attrs, func.span)

    # -- expressions
    def rewrite_expr(self, root: PrimExpr) -> PrimExpr:
        memo = self._memo
        hit = memo.get(id(root))
        if hit is not None:
            return hit[1]
        results: list[PrimExpr] = []
        todo: list[tuple[PrimExpr, bool]] = [(root, False)]
        while todo:
            node, ready = todo.pop()
            hit = memo.get(id(node))
            if hit is not None:
                results.append(hit[1])
                continue
            kids = children(node)
            if not ready and kids:
                todo.append((node, True))
                todo.extend((kid, False) for kid in reversed(kids))
                continue
            if kids:
                new_kids = results[len(results) - len(kids):]
                del results[len(results) - len(kids):]
                rebuilt = rebuild_expr(node, new_kids)
            elif isinstance(node, Var):
                rebuilt = self.var_map.get(id(node), node)
            else:
                rebuilt = node
            if isinstance(rebuilt, BufferLoad) and id(rebuilt.buffer) in self.buffer_map:
                rebuilt = BufferLoad(self.buffer_map[id(rebuilt.buffer)], rebuilt.indices, rebuilt.span)
            out = self.visit_expr(rebuilt)
            memo[id(node)] = (node, out)
            results.append(out)
        return results[0]

    # -- statements
    def rewrite_stmt(self, root: Stmt) -> Stmt | None:
        results: list[Stmt | None] = []
        # Tasks: (stmt, None) to start one; (stmt, exprs) to finish it once its children are done.
        stack: list[tuple[Stmt | None, tuple[PrimExpr, ...] | None]] = [(root, None)]
        while stack:
            stmt, exprs = stack.pop()
            if stmt is None:
                results.append(None)
                continue
            if exprs is None:
                stmt = self._settle(stmt)
                if stmt is None:
                    results.append(None)
                    continue
                old_exprs, kids = stmt_parts(stmt)
                stack.append((stmt, tuple(self.rewrite_expr(e) for e in old_exprs)))
                stack.extend((kid, None) for kid in reversed(kids))
                continue
            n = len(stmt_parts(stmt)[1])
            kids = results[len(results) - n:]
            del results[len(results) - n:]
            results.append(self.post(stmt, self._rebuild(stmt, exprs, kids)))
        return results[0]

    def _settle(self, stmt: Stmt) -> Stmt | None:
        """Apply `pre` until it keeps the statement it is given."""
        while True:
            replaced = self.pre(stmt)
            if replaced is stmt or replaced is None:
                return replaced
            stmt = replaced

    def _rebuild(self, stmt: Stmt, exprs: tuple[PrimExpr, ...], kids: list[Stmt | None]) -> Stmt:
        old_exprs, old_kids = stmt_parts(stmt)
        buffer = getattr(stmt, "buffer", None)
        new_buffer = self.buffer_map.get(id(buffer), buffer)
        var = getattr(stmt, "var", None)
        new_var = self.var_map.get(id(var), var) if var is not None else None
        if (all(a is b for a, b in zip(old_exprs, exprs)) and all(a is b for a, b in zip(old_kids, kids))
                and new_buffer is buffer and new_var is var):
            return stmt
        body = (EMPTY if kids[0] is None else kids[0]) if kids else None
        span = stmt.span
        if isinstance(stmt, For):
            assert isinstance(new_var, Var), "a loop variable can only be renamed to a variable"
            return For(new_var, exprs[0], exprs[1], stmt.kind, body, span)
        if isinstance(stmt, BufferStore):
            return BufferStore(new_buffer, exprs[:-1], exprs[-1], span)
        if isinstance(stmt, Allocate):
            return Allocate(new_buffer, body, span)
        if isinstance(stmt, LetStmt):
            assert isinstance(new_var, Var), "a let variable can only be renamed to a variable"
            return LetStmt(new_var, exprs[0], body, span)
        if isinstance(stmt, IfThenElse):
            return IfThenElse(exprs[0], body, kids[1], span)
        if isinstance(stmt, SeqStmt):
            return seq([k for k in kids if k is not None], span)
        if isinstance(stmt, Evaluate):
            return Evaluate(exprs[0], span)
        if isinstance(stmt, AssertStmt):
            return AssertStmt(exprs[0], stmt.message, span)
        raise TypeError(f"not a TIR statement: {stmt!r}")


class FreshCopier(TirRewriter):
    """Gives every binder inside the statement a new identity (for code that gets duplicated)."""

    def pre(self, stmt: Stmt) -> Stmt | None:
        if isinstance(stmt, (For, LetStmt)):
            var = stmt.var
            self.var_map[id(var)] = Var(var.name, var.dtype, var.span)
        elif isinstance(stmt, Allocate):
            b = stmt.buffer
            self.buffer_map[id(b)] = Buffer(b.name, b.shape, b.dtype, b.strides, b.align, b.scope, b.span)
        return stmt


def fresh_copy(stmt: Stmt, mapping: dict[Var, PrimExpr] | None = None) -> Stmt:
    """A copy of `stmt` whose own binders are new objects, with `mapping` substituted; the copy can
    sit beside the original without binding anything twice."""
    copier = FreshCopier()
    copier.var_map.update((id(v), e) for v, e in (mapping or {}).items())
    out = copier.rewrite_stmt(stmt)
    return EMPTY if out is None else out


def walk_exprs(roots: Iterable[PrimExpr]) -> Iterable[PrimExpr]:
    """Every expression node under `roots` (occurrences, not distinct nodes), iteratively."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(children(node))


def walk_stmts(root: Stmt) -> Iterable[Stmt]:
    """Every statement under (and including) `root`, pre-order."""
    stack: list[Stmt | None] = [root]
    while stack:
        stmt = stack.pop()
        if stmt is None:
            continue
        yield stmt
        stack.extend(reversed(stmt_parts(stmt)[1]))


def is_const(expr: PrimExpr) -> bool:
    return type(expr) in (IntImm, FloatImm)
