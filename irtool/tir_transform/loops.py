"""Loop transformations on PrimFuncs: split, reorder, and loop kinds (vectorize, unroll,
parallel). Loops are named by their variable's name; every loop of that name in the function
is transformed (lowered kernels name each nest's loops distinctly, and one name may stand for
the same axis of several stages). A missing loop, a nest that is not perfect, bounds that
depend on a loop moved inside them, or an order the dependence check cannot prove safe are
located `DiagnosticError`s.

Which reorders and loop kinds are safe is decided by `irtool.tir_transform.dependence`.
"""

from __future__ import annotations

from collections.abc import Callable

from irtool.ir.tir import BinaryOp, FloatImm, For, IfThenElse, IntImm, LetStmt, PrimExpr, PrimFunc, Stmt, Var, seq
from irtool.core.diagnostics import DiagnosticError
from irtool.tir_transform.fold import int_range
from irtool.tir_transform.dependence import element_pickers, iterations_disjoint
from irtool.tir_transform.mutator import TirRewriter, fresh_copy, walk_exprs, walk_stmts
from irtool.tir_transform.simplify import simplify_expr
from irtool.tir_transform.vectorize import NotVectorizable, vectorize_body


def loop_names(func: PrimFunc) -> list[str]:
    """The loop variable names of the function, in text order, without repeats."""
    names: list[str] = []
    for stmt in walk_stmts(func.body):
        if isinstance(stmt, For) and stmt.var.name not in names:
            names.append(stmt.var.name)
    return names


def _missing_loop(func: PrimFunc, fname: str, name: str) -> DiagnosticError:
    known = ", ".join(f"%{n}" for n in loop_names(func)) or "none"
    return DiagnosticError(f"no loop `%{name}` in @{fname} (its loops: {known})", func.span)


class _LoopEditor(TirRewriter):
    """Replaces each loop named `name` (innermost first) by `edit(loop)`."""

    def __init__(self, name: str, edit: Callable[[For], Stmt]) -> None:
        super().__init__()
        self.name = name
        self.edit = edit
        self.found = 0

    def post(self, original: Stmt, rebuilt: Stmt) -> Stmt | None:
        if isinstance(rebuilt, For) and rebuilt.var.name == self.name:
            self.found += 1
            return self.edit(rebuilt)
        return rebuilt


def _edit_loops(func: PrimFunc, fname: str, name: str, edit: Callable[[For], Stmt]) -> PrimFunc:
    editor = _LoopEditor(name.lstrip("%"), edit)
    out = editor.rewrite_func(func)
    if editor.found == 0:
        raise _missing_loop(func, fname, name.lstrip("%"))
    return out


# ---- split ---------------------------------------------------------------------------------------

def _bind(value: PrimExpr, name: str, lets: list[tuple[Var, PrimExpr]]) -> PrimExpr:
    """`value` itself when it is a literal or variable, else a new `let` variable holding it
    (so that a bound the loop evaluated once is still evaluated once)."""
    if type(value) in (IntImm, FloatImm, Var):
        return value
    var = Var(name, value.dtype, value.span)
    lets.append((var, value))
    return var


def _wrap_lets(lets: list[tuple[Var, PrimExpr]], body: Stmt) -> Stmt:
    for var, value in reversed(lets):
        body = LetStmt(var, value, body, value.span)
    return body


def split_loop(loop: For, factor: int, tail: bool = False) -> Stmt:
    """`for i in [b, e)` as `for i_outer { for i_inner in [0, factor) { body[i := b + i_outer*factor + i_inner] } }`.

    When `factor` does not divide a literal extent (or the extent is not a literal), the inner
    body is guarded by `if (i < e)`; with `tail`, the outer loop covers only whole chunks and
    a copy of the original loop runs the remaining iterations instead.
    """
    var, dtype = loop.var, loop.var.dtype
    if factor < 1 or factor > int_range(dtype)[1]:
        raise DiagnosticError(f"split factor {factor} of loop `%{var.name}` must be between 1 and "
                              f"{int_range(dtype)[1]}", loop.span)
    lets: list[tuple[Var, PrimExpr]] = []
    begin = _bind(loop.begin, f"{var.name}_begin", lets)
    end = _bind(loop.end, f"{var.name}_end", lets)
    f = IntImm(factor, dtype)
    zero = IntImm(0, dtype)
    extent = simplify_expr(BinaryOp("max", BinaryOp("sub", end, begin), zero))
    known = extent.value if type(extent) is IntImm else None
    exact = known is not None and known % factor == 0
    outer = Var(f"{var.name}_outer", dtype, var.span)
    inner = Var(f"{var.name}_inner", dtype, var.span)
    index = simplify_expr(BinaryOp("add", BinaryOp("add", BinaryOp("mul", outer, f), inner), begin))
    body = fresh_copy(loop.body, {var: index})
    whole = tail or exact   # the outer loop runs whole chunks only
    chunks = simplify_expr(BinaryOp("floordiv", extent if whole else BinaryOp("add", extent, IntImm(factor - 1, dtype)),
                                    f))
    if not whole:
        body = IfThenElse(BinaryOp("lt", index, end), body, None, loop.span)
    main = For(outer, zero, chunks, loop.kind, For(inner, zero, f, "serial", body, loop.span), loop.span)
    if tail and not exact:
        rest_begin = simplify_expr(BinaryOp("add", begin, BinaryOp("mul", chunks, f)))
        main = seq([main, For(var, rest_begin, end, loop.kind, loop.body, loop.span)])
    return _wrap_lets(lets, main)


def split(func: PrimFunc, fname: str, loop: str, factor: int, tail: bool = False) -> PrimFunc:
    return _edit_loops(func, fname, loop, lambda node: split_loop(node, factor, tail))


# ---- reorder ---------------------------------------------------------------------------------------

def _free_var_ids(exprs: tuple[PrimExpr, ...]) -> set[int]:
    return {id(n) for n in walk_exprs(exprs) if type(n) is Var}


class _Reorderer(TirRewriter):
    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names
        self.done: set[int] = set()

    def pre(self, stmt: Stmt) -> Stmt | None:
        if not isinstance(stmt, For) or stmt.var.name not in self.names or id(stmt) in self.done:
            return stmt
        chain = [stmt]
        while len({l.var.name for l in chain} & set(self.names)) < len(self.names) and isinstance(chain[-1].body, For):
            chain.append(chain[-1].body)
        found = {l.var.name for l in chain} & set(self.names)
        if len(found) < len(self.names):
            missing = [n for n in self.names if n not in found]
            below = {s.var.name for s in walk_stmts(chain[-1].body) if isinstance(s, For)}
            if any(n in below for n in missing):
                raise DiagnosticError(f"cannot reorder: loop `%{missing[0]}` is not perfectly nested in "
                                      f"`%{chain[-1].var.name}`", chain[-1].span)
            return stmt
        new_chain = reorder_chain(chain, self.names)
        self.done.update(id(l) for l in new_chain)
        return new_chain[0]


def reorder_chain(chain: list[For], names: list[str]) -> list[For]:
    """The perfect nest `chain` (outermost first) with the loops named `names` permuted into that
    order (other loops keep their places); checks bounds and dependences."""
    slots = [k for k, l in enumerate(chain) if l.var.name in names]
    by_name = {l.var.name: l for l in chain if l.var.name in names}
    order = list(chain)
    for slot, name in zip(slots, names):
        order[slot] = by_name[name]
    for depth, loop in enumerate(order):
        inside = {id(l.var): l for l in order[depth + 1:]}
        for vid in _free_var_ids((loop.begin, loop.end)):
            if vid in inside:
                raise DiagnosticError(f"cannot reorder: the bounds of `%{loop.var.name}` depend on "
                                      f"`%{inside[vid].var.name}`, which would move inside it", loop.span)
    body = chain[-1].body
    pickers, problem = element_pickers(body, [l.var for l in chain])
    if problem is not None:
        raise DiagnosticError(f"cannot reorder loops {', '.join('%' + n for n in names)}: {problem}", chain[0].span)
    for buf, picks in pickers:
        before = [l.var.name for l in chain if id(l.var) not in picks]
        after = [l.var.name for l in order if id(l.var) not in picks]
        if before != after:
            raise DiagnosticError(f"cannot reorder loops {', '.join('%' + n for n in names)}: iterations that "
                                  f"update the same element of `%{buf.name}` would run in a different order",
                                  chain[0].span)
    rebuilt: list[For] = []
    for loop in reversed(order):
        body = For(loop.var, loop.begin, loop.end, loop.kind, body, loop.span)
        rebuilt.append(body)
    return rebuilt[::-1]


def reorder(func: PrimFunc, fname: str, names: list[str]) -> PrimFunc:
    names = [n.lstrip("%") for n in names]
    if len(set(names)) != len(names) or len(names) < 2:
        raise DiagnosticError(f"reorder needs at least two distinct loop names, got {', '.join(names) or 'none'}",
                              func.span)
    known = loop_names(func)
    for name in names:
        if name not in known:
            raise _missing_loop(func, fname, name)
    reorderer = _Reorderer(names)
    out = reorderer.rewrite_func(func)
    if not reorderer.done:
        raise DiagnosticError(f"no perfect nest of the loops {', '.join('%' + n for n in names)} in @{fname}",
                              func.span)
    return out


# ---- loop kinds ------------------------------------------------------------------------------------

def set_kind(func: PrimFunc, fname: str, loop: str, kind: str, lower: bool = False) -> PrimFunc:
    """Marks loops `serial`, `parallel`, `vectorized` or `unrolled` (checked for legality). With
    `lower`, a vectorized loop whose body has a vector form becomes that form (`vectorize.py`);
    other vectorized loops stay marked loops."""

    def mark(node: For) -> Stmt:
        if kind == "vectorized" and not (type(node.begin) is IntImm and type(node.end) is IntImm):
            raise DiagnosticError(f"cannot vectorize loop `%{node.var.name}`: its extent is not a constant "
                                  "(split it by the vector width first)", node.span)
        if kind in ("parallel", "vectorized"):
            problem = iterations_disjoint(node)
            if problem is not None:
                what = "parallelize" if kind == "parallel" else "vectorize"
                raise DiagnosticError(f"cannot {what} loop `%{node.var.name}`: {problem}", node.span)
        if kind == "vectorized" and lower:
            try:
                return vectorize_body(node)
            except NotVectorizable:
                pass
        return For(node.var, node.begin, node.end, kind, node.body, node.span)

    return _edit_loops(func, fname, loop, mark)

