"""Which expressions may be dropped, shared or moved without changing what a program does.

Operators, constructors and building closures are pure; reading or writing a reference is not,
and neither is calling a global or a closure (it may write references or not return). Function
bodies do not count: creating a closure runs nothing.
"""

from __future__ import annotations

from irtool.ir.adt import Constructor
from irtool.ir.expr import Call, Expr, Function, Op, RefRead, RefWrite
from irtool.ir.visitor import post_order


def _impure_itself(node: Expr) -> bool:
    return isinstance(node, (RefRead, RefWrite)) or (
        isinstance(node, Call) and not isinstance(node.op, (Op, Constructor)))


class Purity:
    """Purity of every node under a root, computed once in one walk (so asking about many
    overlapping subexpressions of a large graph stays linear)."""

    def __init__(self, root: Expr) -> None:
        self.impure: set[int] = set()
        for node in post_order(root):
            if isinstance(node, Function):
                continue
            if _impure_itself(node) or any(id(c) in self.impure for c in node.children()):
                self.impure.add(id(node))

    def __call__(self, expr: Expr) -> bool:
        return id(expr) not in self.impure


def is_pure(expr: Expr) -> bool:
    """Whether evaluating `expr` has no effect besides producing its value."""
    return Purity(expr)(expr)
