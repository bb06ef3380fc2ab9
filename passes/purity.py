"""Which expressions may be dropped, shared or moved without changing what a program does."""

from __future__ import annotations

from irtool.ir.adt import Constructor
from irtool.ir.expr import Call, Expr, Function, Op, RefRead, RefWrite


def is_pure(expr: Expr) -> bool:
    """Whether evaluating `expr` has no effect besides producing its value.

    Operators, constructors and building closures are pure; reading or writing a reference is
    not, and neither is calling a global or a closure (it may write references or not return).
    Function bodies are not entered: creating a closure runs nothing.
    """
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Function):
            continue
        if isinstance(node, (RefRead, RefWrite)):
            return False
        if isinstance(node, Call) and not isinstance(node.op, (Op, Constructor)):
            return False
        stack.extend(node.children())
    return True
