"""Closures whose captured tensors are borrowed, not copied (docs/native-relay.md, "Memory").

A closure object normally holds its captured tensors inline: it may outlive the activation that
made it. A `let`-bound literal whose variable is only ever called (by the `let` body and by the
literal itself, never passed, stored, returned or captured by another literal) cannot outlive
the activation: each call ends before the activation does, and the activation releases the
closure when it returns (or ends its iteration). Its captured tensors, which live at least that
long in the activation's frame, parameters or held objects, are then stored as pointers. This
is the loop every ONNX recurrent layer, Loop and Scan imports to, whose captures include the
input projection of all T steps.
"""

from __future__ import annotations

from irtool.ir.expr import Call, Expr, Function, Let
from irtool.ir.visitor import free_vars, post_order


def only_called(let: Let) -> bool:
    """Whether `let` binds a function literal whose variable appears only as the callee of
    calls, in the `let` body and in the literal's own body, outside any other literal."""
    fn, var = let.value, let.var
    if not isinstance(fn, Function) or let.body is var or fn.body is var:
        return False
    for root in (let.body, fn.body):
        for node in post_order(root, _not_into_literals):
            if isinstance(node, Function):
                if any(v is var for v in free_vars(node)):
                    return False
                continue
            for k, child in enumerate(node.children()):
                if child is var and not (isinstance(node, Call) and k == 0):
                    return False
    return True


def _not_into_literals(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Function):
        return ()
    return node.children()
