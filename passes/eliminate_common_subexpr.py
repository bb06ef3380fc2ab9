"""`eliminate-common-subexpr`: one node for each distinct pure computation.

Two operator calls (or tuples, or projections) with the same operator, attributes and the same
rewritten arguments (or equal scalar constants) become one shared node. Sharing stays within a scope: a computation in one
`if` branch, `match` clause or function body is not merged with one outside it, so no value is
computed where it was not before. Calls of globals and closures are never merged (they may have
effects); neither are constants (they are not computations).
"""

from __future__ import annotations

import dataclasses

from irtool.ir.expr import Call, Constant, Expr, Function, If, Let, Match, Op, Tuple, TupleGetItem
from irtool.ir.module import IRModule
from irtool.ir.visitor import ExprMutator
from irtool.passes.base import ModulePass


def scope_ids(root: Expr) -> dict[int, int]:
    """For each node, a number naming the scope (function body, branch, clause) it was first reached in."""
    scope: dict[int, int] = {id(root): 0}
    counter = 0
    stack: list[Expr] = [root]
    while stack:
        node = stack.pop()
        here = scope[id(node)]
        pairs: list[tuple[Expr, int]]
        if isinstance(node, If):
            pairs = [(node.cond, here), (node.true_branch, counter + 1), (node.false_branch, counter + 2)]
            counter += 2
        elif isinstance(node, Function):
            counter += 1
            pairs = [(node.body, counter)]
        elif isinstance(node, Match):
            pairs = [(node.data, here)]
            for clause in node.clauses:
                counter += 1
                pairs.append((clause.rhs, counter))
        elif isinstance(node, Let):
            pairs = [(node.value, here), (node.body, here)]
        else:
            pairs = [(c, here) for c in node.children()]
        for child, child_scope in pairs:
            if id(child) not in scope:
                scope[id(child)] = child_scope
                stack.append(child)
    return scope


def _operand_key(expr: Expr) -> object:
    """Operands match by identity, except that scalar constants match by value (as in TVM)."""
    if isinstance(expr, Constant) and expr.data.ndim == 0:
        return ("scalar", expr.data.dtype.str, expr.data.tobytes())
    return id(expr)


class _CSE(ExprMutator):
    def __init__(self, scope: dict[int, int]) -> None:
        super().__init__()
        self.scope = scope
        self.table: dict[tuple, Expr] = {}

    def _share(self, node: Expr, rebuilt: Expr, key: tuple) -> Expr:
        full = (self.scope.get(id(node), -1), *key)
        return self.table.setdefault(full, rebuilt)

    def rewrite_call(self, node: Call) -> Expr:
        rebuilt = super().rewrite_call(node)
        assert isinstance(rebuilt, Call)
        if not isinstance(rebuilt.op, Op):
            return rebuilt
        key = ("call", rebuilt.op.name, rebuilt.attrs, rebuilt.type_args, tuple(_operand_key(a) for a in rebuilt.args))
        return self._share(node, rebuilt, key)

    def rewrite_tuple(self, node: Tuple) -> Expr:
        rebuilt = super().rewrite_tuple(node)
        assert isinstance(rebuilt, Tuple)
        return self._share(node, rebuilt, ("tuple", tuple(_operand_key(f) for f in rebuilt.fields)))

    def rewrite_tuple_get_item(self, node: TupleGetItem) -> Expr:
        rebuilt = super().rewrite_tuple_get_item(node)
        assert isinstance(rebuilt, TupleGetItem)
        return self._share(node, rebuilt, ("get", rebuilt.index, id(rebuilt.tuple_value)))


@dataclasses.dataclass
class EliminateCommonSubexprPass(ModulePass):
    """Merge identical operator calls, tuples and projections within each scope."""

    name = "eliminate-common-subexpr"
    description = "merge identical operator calls, tuples and projections (within a scope)"

    def apply(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for name, func in mod.relay_functions():
            out.functions[name] = _CSE(scope_ids(func)).visit(func)  # type: ignore[arg-type]
        return out
