"""Which arguments of a self tail call native code computes in place (docs/native-relay.md).

A loop that collects per-step outputs passes `scatter_nd(%y, row index, output)` of its own
parameter `%y` back to itself (`irtool/frontend/onnx_ops/loops.py`). Computed as written, each
step copies all of `%y` into the other carry buffer and then writes one row. When nothing the
iteration evaluates after the update reads `%y`, the update may instead write its row straight
into the buffer that holds `%y` (the kernel's in-place twin, `irtool.lower.rules.indexing.
in_place_part`): the copy happens once, on the first iteration, when `%y` is still the caller's
buffer, and never again.
"""

from __future__ import annotations

from irtool.ir.expr import Call, Expr, Function, GlobalVar, If, Let, Match, Op, Tuple, Var
from irtool.ir.module import IRModule
from irtool.ir.tir import PrimFunc
from irtool.ir.visitor import use_counts
from irtool.lower.rules.indexing import IN_PLACE


def in_place_twin(mod: IRModule, arg: Expr) -> tuple[str, Var] | None:
    """(the in-place twin, the data variable) when `arg` is `call_lowered` of a kernel that has an
    in-place twin, applied to a variable as its data."""
    if not (isinstance(arg, Call) and isinstance(arg.op, Op) and arg.op.name == "call_lowered"
            and len(arg.args) == 2 and isinstance(arg.args[0], GlobalVar) and isinstance(arg.args[1], Tuple)
            and arg.args[1].fields and isinstance(arg.args[1].fields[0], Var)):
        return None
    kernel = mod.functions.get(arg.args[0].name_hint)
    twin = kernel.attrs.get(IN_PLACE) if isinstance(kernel, PrimFunc) else None
    return (str(twin), arg.args[1].fields[0]) if twin is not None else None


def read_once(body: Expr, tail_call: Call, var: Var) -> bool:
    """Whether `var` is read exactly once by everything an activation of the function whose body
    is `body` may evaluate on its way to `tail_call` (the binding values, conditions and scrutinees
    of the `let`s, `if`s and `match`es around it, and the call's own arguments): then that one
    read, in an argument of the call, is the last. Arms the call is not in never run with it."""
    path = _tail_path(body, tail_call)
    if path is None:
        return False
    evaluated: list[Expr] = list(tail_call.args)
    for node in path:
        if isinstance(node, Let):
            evaluated.append(node.value)
        elif isinstance(node, If):
            evaluated.append(node.cond)
        elif isinstance(node, Match):
            evaluated.append(node.data)
        elif isinstance(node, Call):   # a function literal called in place: its arguments
            evaluated.extend(node.args)
    return use_counts(Tuple(evaluated)).get(id(var), 0) == 1


def _tail_path(body: Expr, target: Call) -> list[Expr] | None:
    """The expressions in tail position from `body` down to `target`, outermost first."""
    stack: list[tuple[Expr, list[Expr]]] = [(body, [])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        inner: list[Expr] = []
        if isinstance(node, Let):
            inner = [node.body]
        elif isinstance(node, If):
            inner = [node.true_branch, node.false_branch]
        elif isinstance(node, Match):
            inner = [c.rhs for c in node.clauses]
        elif isinstance(node, Call) and isinstance(node.op, Function) and not node.op.is_primitive:
            inner = [node.op.body]
        stack.extend((e, [*path, node]) for e in inner)
    return None
