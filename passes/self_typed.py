"""Which expressions have a type that follows from their own parts, without any context.

A let's annotation (`let %l: List[int32] = Nil;`) can be the only thing that fixes its value's
type: the type checker unifies the two, and without the annotation `Nil` is a `List[_]` nobody
solves. A pass that drops such a let must keep the annotation's information, so it asks here
whether the value's type is already determined bottom-up (a conservative answer: "no" keeps a
let that was not needed, never the other way round).
"""

from __future__ import annotations

from irtool.ir.adt import Constructor
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                            RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.types import IncompleteType, Type, TypeVar, type_parts
from irtool.passes.substitution import value_first_order


def is_complete(t: Type | None) -> bool:
    """Whether an annotation fixes a type entirely (no `_` hole; type variables are rigid)."""
    return t is not None and t.complete


def annotation_matters(var: Var) -> bool:
    """Whether `var`'s annotation says anything (a bare `_` says nothing)."""
    return var.type_annotation is not None and not isinstance(var.type_annotation, IncompleteType)


class SelfTyped:
    """For every node under a function, whether its type is known from its parts alone (one walk)."""

    def __init__(self, func: Function, mod: IRModule) -> None:
        self.mod = mod
        self.typed: dict[int, bool] = {}
        order = value_first_order(func)
        self.let_of = {id(n.var): n for n in order if isinstance(n, Let)}
        self.match_of = {id(v): n for n in order if isinstance(n, Match)
                         for c in n.clauses for v in c.lhs.bound_vars()}
        for node in order:
            self.typed[id(node)] = self.decide(node)

    def __call__(self, expr: Expr) -> bool:
        return self.typed.get(id(expr), False)

    def decide(self, node: Expr) -> bool:
        known = self.__call__
        if isinstance(node, (Constant, RefWrite)):
            return True
        if isinstance(node, Var):
            if is_complete(node.type_annotation):
                return True
            let, match = self.let_of.get(id(node)), self.match_of.get(id(node))
            # A recursive closure reaches its variable before its value: not known from the value.
            return (let is not None and known(let.value)) or (match is not None and known(match.data))
        if isinstance(node, GlobalVar):
            return self.global_typed(node.name_hint)
        if isinstance(node, Constructor):
            return not self.adt_params(node)
        if isinstance(node, Call):
            if isinstance(node.op, Op):
                return all(known(a) for a in node.args)
            if isinstance(node.op, Constructor):
                mentioned = {p for t in node.op.inputs for p in type_parts(t) if isinstance(p, TypeVar)}
                return self.adt_params(node.op) <= mentioned and all(known(a) for a in node.args)
            return known(node.op)
        if isinstance(node, Tuple):
            return all(known(f) for f in node.fields)
        if isinstance(node, (TupleGetItem, RefRead)):
            return known(node.tuple_value if isinstance(node, TupleGetItem) else node.ref)
        if isinstance(node, RefCreate):
            return known(node.value)
        if isinstance(node, If):
            return known(node.true_branch) or known(node.false_branch)
        if isinstance(node, Let):
            return known(node.body)
        if isinstance(node, Match):
            return any(known(c.rhs) for c in node.clauses)
        if isinstance(node, Function):
            return (not node.type_params and all(is_complete(p.type_annotation) for p in node.params)
                    and (is_complete(node.ret_type) or known(node.body)))
        return False  # a bare operator is polymorphic

    def adt_params(self, ctor: Constructor) -> set[TypeVar]:
        data = self.mod.type_defs.get(ctor.belong_to)
        return set(data.type_params) if data is not None else set()

    def global_typed(self, name: str) -> bool:
        func = self.mod.functions.get(name)
        if isinstance(func, PrimFunc):
            return True
        return (isinstance(func, Function) and not func.type_params and is_complete(func.ret_type)
                and all(is_complete(p.type_annotation) for p in func.params))

