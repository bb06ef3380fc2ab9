"""Structural equality and hashing, modulo renaming of variables.

Two programs are equal when they have the same shape, operators, attributes, constants and types,
and their variables correspond one-to-one (a printed-then-parsed module has fresh Var objects with
possibly different names, so identity cannot be the test). Both walks are iterative.
"""

from __future__ import annotations

import numpy as np

from irtool.ir.adt import (Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar,
                           PatternWildcard, TypeData)
from irtool.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate,
                            RefRead, RefWrite, Tuple, TupleGetItem, Var)
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.tir_equality import tir_structural_equal
from irtool.ir.visitor import post_order


def constants_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class _Equal:
    def __init__(self) -> None:
        self.l2r: dict[int, Var] = {}
        self.r2l: dict[int, Var] = {}
        self.done: set[tuple[int, int]] = set()

    def vars(self, a: Var, b: Var) -> bool:
        mapped = self.l2r.get(id(a))
        if mapped is not None:
            return mapped is b
        if id(b) in self.r2l:
            return False
        if a.type_annotation != b.type_annotation or a.attrs != b.attrs:
            return False
        self.l2r[id(a)] = b
        self.r2l[id(b)] = a
        return True

    def patterns(self, pa: Pattern, pb: Pattern, stack: list) -> bool:
        pairs = [(pa, pb)]
        while pairs:
            a, b = pairs.pop()
            if type(a) is not type(b):
                return False
            if isinstance(a, PatternVar):
                stack.append((a.var, b.var))  # type: ignore[union-attr]
            elif isinstance(a, PatternConstructor):
                if a.constructor != b.constructor or len(a.patterns) != len(b.patterns):  # type: ignore[union-attr]
                    return False
                pairs.extend(zip(a.patterns, b.patterns))  # type: ignore[union-attr]
            elif isinstance(a, PatternTuple):
                if len(a.patterns) != len(b.patterns):  # type: ignore[union-attr]
                    return False
                pairs.extend(zip(a.patterns, b.patterns))  # type: ignore[union-attr]
            else:
                assert isinstance(a, PatternWildcard)
        return True

    def exprs(self, left: Expr, right: Expr) -> bool:
        stack: list[tuple[Expr, Expr]] = [(left, right)]
        while stack:
            a, b = stack.pop()
            if type(a) is not type(b):
                return False
            if isinstance(a, Var):
                if not self.vars(a, b):  # type: ignore[arg-type]
                    return False
                continue
            key = (id(a), id(b))
            if key in self.done:
                continue
            self.done.add(key)
            if not self.shallow(a, b, stack):
                return False
        return True

    def shallow(self, a: Expr, b: Expr, stack: list) -> bool:
        """Compare the node's own fields and push the child pairs (in reverse evaluation order)."""
        if isinstance(a, (GlobalVar, Op, Constructor)):
            return a == b
        if isinstance(a, Constant):
            return constants_equal(a.data, b.data)  # type: ignore[attr-defined]
        if isinstance(a, Call):
            if a.attrs != b.attrs or len(a.args) != len(b.args) or a.type_args != b.type_args:  # type: ignore
                return False
        elif isinstance(a, Function):
            if (len(a.params) != len(b.params) or a.attrs != b.attrs or a.ret_type != b.ret_type  # type: ignore
                    or a.type_params != b.type_params):  # type: ignore[attr-defined]
                return False
        elif isinstance(a, Tuple):
            if len(a.fields) != len(b.fields):  # type: ignore[attr-defined]
                return False
        elif isinstance(a, TupleGetItem):
            if a.index != b.index:  # type: ignore[attr-defined]
                return False
        elif isinstance(a, Match):
            if a.complete != b.complete or len(a.clauses) != len(b.clauses):  # type: ignore[attr-defined]
                return False
            # Pattern variables bind before the right-hand side is compared.
            rhs_pairs = []
            for ca, cb in zip(a.clauses, b.clauses):  # type: ignore[attr-defined]
                binders: list = []
                if not self.patterns(ca.lhs, cb.lhs, binders):
                    return False
                rhs_pairs.append((ca.rhs, cb.rhs))
                for va, vb in binders:
                    if not self.vars(va, vb):
                        return False
            stack.extend(reversed(rhs_pairs))
            stack.append((a.data, b.data))  # type: ignore[attr-defined]
            return True
        elif not isinstance(a, (Let, If, RefCreate, RefRead, RefWrite)):
            raise TypeError(f"structural_equal: unknown node {type(a).__name__}")
        ca, cb = a.children(), b.children()
        if len(ca) != len(cb):
            return False
        stack.extend(reversed(list(zip(ca, cb))))
        return True


def _types_data_equal(a: TypeData, b: TypeData) -> bool:
    return (a.name == b.name and a.type_params == b.type_params and a.extern == b.extern
            and [(c.name, c.inputs, c.tag) for c in a.constructors]
            == [(c.name, c.inputs, c.tag) for c in b.constructors])


def _definitions_equal(a: Function | PrimFunc, b: Function | PrimFunc) -> bool:
    if isinstance(a, PrimFunc) or isinstance(b, PrimFunc):
        return isinstance(a, PrimFunc) and isinstance(b, PrimFunc) and tir_structural_equal(a, b)
    return _Equal().exprs(a, b)


def structural_equal(a: object, b: object) -> bool:
    """Equality of expressions, types or whole modules, modulo renaming of variables."""
    if isinstance(a, IRModule) and isinstance(b, IRModule):
        if set(a.functions) != set(b.functions) or set(a.type_defs) != set(b.type_defs):
            return False
        if not all(_types_data_equal(a.type_defs[n], b.type_defs[n]) for n in a.type_defs):
            return False
        return all(_definitions_equal(a.functions[n], b.functions[n]) for n in a.functions)
    if isinstance(a, Expr) and isinstance(b, Expr):
        return _Equal().exprs(a, b)
    return a == b


def structural_hash(expr: Expr) -> int:
    """A hash consistent with `structural_equal`: variables hash by their annotation only."""
    hashes: dict[int, int] = {}
    for node in post_order(expr):
        kids = tuple(hashes[id(c)] for c in node.children())
        if isinstance(node, Var):
            own: object = ("Var", node.type_annotation)
        elif isinstance(node, (GlobalVar, Op, Constructor)):
            own = hash(node)
        elif isinstance(node, Constant):
            own = ("Constant", node.data.dtype.str, node.data.shape, node.data.tobytes())
        elif isinstance(node, Call):
            own = ("Call", node.attrs, node.type_args)
        elif isinstance(node, Function):
            own = ("Function", node.attrs, node.ret_type, node.type_params)
        elif isinstance(node, TupleGetItem):
            own = ("TupleGetItem", node.index)
        elif isinstance(node, Match):
            own = ("Match", node.complete, tuple(_pattern_shape(c.lhs) for c in node.clauses))
        else:
            own = type(node).__name__
        hashes[id(node)] = hash((own, kids))
    return hashes[id(expr)]


def _pattern_shape(p: Pattern) -> tuple:
    out: list[object] = []
    stack = [p]
    while stack:
        q = stack.pop()
        out.append(type(q).__name__)
        if isinstance(q, PatternConstructor):
            out.append(q.constructor.name)
            stack.extend(q.patterns)
        elif isinstance(q, PatternTuple):
            out.append(len(q.patterns))
            stack.extend(q.patterns)
    return tuple(out)
