"""`to-a-normal-form` and `to-graph-normal-form`: let-bound versus graph-shared computations.

A-normal form names every computation with a `let`, so evaluation order and sharing are explicit.
Each computation is bound in the innermost scope (function body, `if` branch, `match` clause)
that contains all of its uses, which is where it is guaranteed to be evaluated before them.
Graph normal form is the dataflow view: each pure `let` disappears and its uses share the value.
"""

from __future__ import annotations

import dataclasses
import itertools

from irtool.ir.adt import Clause, Constructor
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                            RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.ir.visitor import use_counts
from irtool.passes.base import ModulePass
from irtool.passes.purity import Purity
from irtool.passes.self_typed import SelfTyped, annotation_matters
from irtool.passes.substitution import LetSubstMutator, value_first_order

ATOMS = (Var, GlobalVar, Op, Constant, Constructor)


class _Scopes:
    """The tree of scopes, and the scope each node must be bound in (the deepest common one of its uses)."""

    def __init__(self) -> None:
        self.parent: list[int] = [-1]
        self.depth: list[int] = [0]
        self.child: dict[tuple[int, int], int] = {}

    def inner(self, owner: Expr, index: int, outer: int) -> int:
        key = (id(owner), index)
        if key not in self.child:
            self.child[key] = len(self.parent)
            self.parent.append(outer)
            self.depth.append(self.depth[outer] + 1)
        return self.child[key]

    def common(self, a: int, b: int) -> int:
        while self.depth[a] > self.depth[b]:
            a = self.parent[a]
        while self.depth[b] > self.depth[a]:
            b = self.parent[b]
        while a != b:
            a, b = self.parent[a], self.parent[b]
        return a


def _children_with_scopes(node: Expr, here: int, scopes: _Scopes) -> list[tuple[Expr, int]]:
    if isinstance(node, If):
        return [(node.cond, here), (node.true_branch, scopes.inner(node, 1, here)),
                (node.false_branch, scopes.inner(node, 2, here))]
    if isinstance(node, Function):
        return [(node.body, scopes.inner(node, 0, here))]
    if isinstance(node, Match):
        return [(node.data, here)] + [(c.rhs, scopes.inner(node, i, here)) for i, c in enumerate(node.clauses)]
    if isinstance(node, Let):
        return [(node.value, here), (node.body, here)]
    return [(c, here) for c in node.children()]


def assign_scopes(func: Function, order: list[Expr]) -> tuple[_Scopes, dict[int, int]]:
    """Scope of every node; `order` lists children before parents, so reversed it visits users first."""
    scopes = _Scopes()
    where: dict[int, int] = {id(func): 0}
    for node in reversed(order):
        if isinstance(node, Var):
            continue
        here = where[id(node)]
        for child, scope in _children_with_scopes(node, here, scopes):
            if isinstance(child, Var):
                continue
            known = where.get(id(child))
            where[id(child)] = scope if known is None else scopes.common(known, scope)
    return scopes, where


class _ANF:
    def __init__(self, func: Function) -> None:
        self.func = func
        self.order = value_first_order(func)
        self.scopes, self.where = assign_scopes(func, self.order)
        taken = {n.name_hint for n in self.order if isinstance(n, Var)}
        self.names = (f"x{i}" for i in itertools.count() if f"x{i}" not in taken)
        self.atom: dict[int, Expr] = {}
        self.bindings: dict[int, list[tuple[Var, Expr]]] = {}
        # A non-atomic value whose only user is a let is bound to that let's own variable.
        counts = use_counts(func)
        self.own_var: dict[int, Var] = {}
        for node in self.order:
            if isinstance(node, Let) and counts.get(id(node.value), 0) == 1 and not isinstance(node.value, ATOMS):
                self.own_var[id(node.value)] = node.var
        self.bound_values: set[int] = set(self.own_var)

    def block(self, scope_owner: Expr, index: int, result: Expr) -> Expr:
        """The let chain of one inner scope, ending in the atom for `result`."""
        scope = self.scopes.child.get((id(scope_owner), index))
        out = self.atom[id(result)]
        for var, value in reversed(self.bindings.pop(scope, []) if scope is not None else []):
            out = Let(var, value, out, value.span)
        return out

    def bind(self, node: Expr, value: Expr) -> None:
        var = self.own_var.get(id(node)) or Var(next(self.names), span=node.span)
        self.bindings.setdefault(self.where[id(node)], []).append((var, value))
        self.atom[id(node)] = var

    def run(self) -> Function:
        lets = {id(n.var): n for n in self.order if isinstance(n, Let)}
        for node in self.order:
            if isinstance(node, ATOMS):
                self.atom[id(node)] = node
                let = lets.get(id(node))
                if let is not None and let.var is node and id(let.value) not in self.bound_values:
                    # The let's value is an atom or shared: bind the let's variable to its atom.
                    self.bindings.setdefault(self.where[id(let)], []).append((node, self.atom[id(let.value)]))
                continue
            if node is self.func:
                break
            if isinstance(node, Let):
                self.atom[id(node)] = self.atom[id(node.body)]
                continue
            self.bind(node, self.rebuild(node))
        body = self.block(self.func, 0, self.func.body)
        return Function(self.func.params, body, self.func.ret_type, self.func.type_params, self.func.attrs,
                        self.func.span)

    def rebuild(self, node: Expr) -> Expr:
        a = self.atom
        if isinstance(node, Call):
            return Call(a[id(node.op)], [a[id(x)] for x in node.args], node.attrs, node.span, node.type_args)
        if isinstance(node, Tuple):
            return Tuple([a[id(f)] for f in node.fields], node.span)
        if isinstance(node, TupleGetItem):
            return TupleGetItem(a[id(node.tuple_value)], node.index, node.span)
        if isinstance(node, If):
            return If(a[id(node.cond)], self.block(node, 1, node.true_branch), self.block(node, 2, node.false_branch),
                      node.span)
        if isinstance(node, Function):
            return Function(node.params, self.block(node, 0, node.body), node.ret_type, node.type_params,
                            node.attrs, node.span)
        if isinstance(node, Match):
            clauses = [Clause(c.lhs, self.block(node, i, c.rhs)) for i, c in enumerate(node.clauses)]
            return Match(a[id(node.data)], clauses, node.complete, node.span)
        if isinstance(node, RefCreate):
            return RefCreate(a[id(node.value)], node.span)
        if isinstance(node, RefRead):
            return RefRead(a[id(node.ref)], node.span)
        if isinstance(node, RefWrite):
            return RefWrite(a[id(node.ref)], a[id(node.value)], node.span)
        raise TypeError(f"to-a-normal-form: unexpected node {type(node).__name__}")


def to_a_normal_form(func: Function) -> Function:
    return _ANF(func).run()


class _ToGraph(LetSubstMutator):
    def __init__(self, pure: Purity, self_typed: SelfTyped) -> None:
        super().__init__()
        self.pure = pure
        self.self_typed = self_typed

    def eliminate(self, let: Let, new_value: Expr) -> bool:
        # Substituting pure values keeps purity, so the original value answers for the new one.
        # A let whose annotation types its value (`let %l: List[int32] = Nil;`) or says more than
        # the value's own type (`Tensor[(2, 3), float32]` for a `Tensor[(?, 3), float32]`) stays.
        if not self.pure(let.value):
            return False
        return not annotation_matters(let.var) or (self.self_typed(let.value)
                                                   and let.value.checked_type == let.var.type_annotation)


def to_graph_normal_form(func: Function, mod: IRModule) -> Function:
    """Pure lets dropped, except those whose annotation carries type information the value lacks
    (TVM keeps each node's inferred type; text has only the annotation to carry it). The module
    is expected type checked (as verify-each leaves it): an unchecked value keeps its let."""
    out = _ToGraph(Purity(func), SelfTyped(func, mod)).visit(func)
    assert isinstance(out, Function)
    return out


@dataclasses.dataclass
class ToANormalFormPass(ModulePass):
    """Every computation let-bound, in the innermost scope that holds all of its uses."""

    name = "to-a-normal-form"
    description = "bind every computation with a let (A-normal form)"

    def apply(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for name, func in mod.relay_functions():
            out.functions[name] = to_a_normal_form(func)
        return out


@dataclasses.dataclass
class ToGraphNormalFormPass(ModulePass):
    """Pure lets become shared dataflow nodes (`%N = ...;` in the text)."""

    name = "to-graph-normal-form"
    description = "replace pure let bindings by shared dataflow nodes (graph normal form)"

    def apply(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for name, func in mod.relay_functions():
            out.functions[name] = to_graph_normal_form(func, mod)
        return out

