"""`fold-constant`: evaluate constant subgraphs with the interpreter and put the results in place.

An operator call whose arguments are all constants (or tuples of constants) is run by the
reference interpreter; a `let` bound to a constant (or tuple of constants) is substituted; a projection of a tuple
literal takes the field; an `if` on a constant condition takes its branch. Inside primitive
(fused) functions nothing is folded, as in TVM.

A folded tensor is written into the program text, so a result with more than `max-elements`
elements is folded only when it is no bigger than the largest constant it is computed from
(`-1` folds everything): `multiply(%weights, 2f)` folds, `zeros(shape=[4096, 4096])` does not.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from irtool.eval.interpreter import Interpreter
from irtool.ir.expr import Call, Constant, Expr, Function, If, Let, Op, Tuple, TupleGetItem
from irtool.ir.module import IRModule
from irtool.ir.visitor import post_order
from irtool.ops.registry import get_op
from irtool.passes.base import ModulePass
from irtool.passes.substitution import LetSubstMutator
from irtool.core.diagnostics import DiagnosticError


def is_constant(expr: Expr) -> bool:
    """A constant or a (nested) tuple literal of constants."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Tuple):
            stack.extend(node.fields)
        elif not isinstance(node, Constant):
            return False
    return True


def _largest_constant(args: tuple[Expr, ...]) -> int:
    sizes = [0]
    stack = list(args)
    while stack:
        node = stack.pop()
        if isinstance(node, Tuple):
            stack.extend(node.fields)
        elif isinstance(node, Constant):
            sizes.append(node.data.size)
    return max(sizes)


def _value_size(value: object) -> int:
    if isinstance(value, tuple):
        return sum(_value_size(v) for v in value)
    return int(np.asarray(value).size)


def _to_expr(value: object, span: object) -> Expr | None:
    """A constant (or tuple literal) holding an interpreter value; None for closures, ADTs, refs."""
    if isinstance(value, tuple):
        fields = [_to_expr(v, span) for v in value]
        return None if any(f is None for f in fields) else Tuple(fields, span)  # type: ignore[arg-type]
    if isinstance(value, np.ndarray):
        # Views (a reshape of another constant) get their own row-major copy; note that
        # np.ascontiguousarray would turn a 0-d scalar into shape (1,).
        data = value if value.flags.c_contiguous else value.copy(order="C")
        return Constant(data, span)  # type: ignore[arg-type]
    return None


class _Folder(LetSubstMutator):
    def __init__(self, max_elements: int, skip: set[int]) -> None:
        super().__init__()
        self.max_elements = max_elements
        self.skip = skip
        self.interp = Interpreter(IRModule())

    def eliminate(self, let: Let, new_value: Expr) -> bool:
        return is_constant(new_value)

    def rewrite_call(self, node: Call) -> Expr:
        call = super().rewrite_call(node)
        assert isinstance(call, Call)
        if id(node) in self.skip or not isinstance(call.op, Op) or not all(is_constant(a) for a in call.args):
            return call
        opdef = get_op(call.op.name)
        if opdef is None or opdef.compute is None or opdef.extra.get("non_computational"):
            return call
        try:
            value = self.interp.eval(call)
        except DiagnosticError:
            # The call fails on these inputs; leave the failure to run time, where it belongs.
            return call
        size = _value_size(value)
        if 0 <= self.max_elements < size and size > _largest_constant(call.args):
            return call
        return _to_expr(value, node.span) or call

    def rewrite_tuple_get_item(self, node: TupleGetItem) -> Expr:
        value = self.new(node.tuple_value)
        if isinstance(value, Tuple) and 0 <= node.index < len(value.fields):
            return value.fields[node.index]
        return super().rewrite_tuple_get_item(node)

    def rewrite_if(self, node: If) -> Expr:
        cond = self.new(node.cond)
        if isinstance(cond, Constant) and cond.data.size == 1:
            return self.new(node.true_branch if bool(cond.data.reshape(())) else node.false_branch)
        return super().rewrite_if(node)


def _inside_primitive(func: Function) -> set[int]:
    """Ids of the nodes inside primitive functions (fused kernels keep their shape)."""
    out: set[int] = set()
    for node in post_order(func):
        if isinstance(node, Function) and node.is_primitive:
            out.update(id(n) for n in post_order(node.body))
    return out


@dataclasses.dataclass
class FoldConstantPass(ModulePass):
    """Compile-time evaluation of everything that does not depend on inputs."""

    name = "fold-constant"
    description = "evaluate constant subexpressions with the interpreter (max-elements bounds growth)"

    max_elements: int = 4096

    def apply(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for name, func in mod.relay_functions():
            folded = _Folder(self.max_elements, _inside_primitive(func)).visit(func)
            assert isinstance(folded, Function)
            out.functions[name] = folded
        return out
