"""`simplify-inference`: rewrite training-style operators into their inference arithmetic.

`nn.batch_norm(x, gamma, beta, mean, var).0` becomes `x * scale + shift` with
`scale = gamma / sqrt(var + epsilon)` and `shift = beta - mean * scale` (each per channel,
expanded to broadcast along `axis`); `fold-constant` then folds scale and shift when the
parameters are constants. `nn.dropout(x).0` becomes `x`. Other projections of these calls keep
the original call. The rules are a table keyed by operator: this pass is about those operators.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from irtool.analysis.typecheck import infer_types
from irtool.ir.expr import Call, Constant, Expr, Function, Op, TupleGetItem
from irtool.ir.module import IRModule
from irtool.ir.types import TensorType
from irtool.ir.visitor import ExprMutator, post_order
from irtool.ops.apply import op_call
from irtool.ops.registry import get_op
from irtool.passes.base import ModulePass


def _batch_norm(call: Call, args: list[Expr]) -> Expr | None:
    data_t = call.args[0].checked_type
    if not isinstance(data_t, TensorType):
        return None
    opdef = get_op("nn.batch_norm")
    assert opdef is not None
    attrs = opdef.full_attrs(call.attrs)
    x, gamma, beta, mean, var = args
    span = call.span
    eps = Constant(np.array(attrs["epsilon"], dtype=data_t.dtype), span)
    one = Constant(np.array(1, dtype=data_t.dtype), span)
    scale: Expr = op_call("divide", [one, op_call("sqrt", [op_call("add", [var, eps], span)], span)], span)
    if attrs["scale"]:
        scale = op_call("multiply", [gamma, scale], span)
    shift: Expr = op_call("multiply", [op_call("negative", [mean], span), scale], span)
    if attrs["center"]:
        shift = op_call("add", [shift, beta], span)
    axis = int(attrs["axis"]) % data_t.ndim  # type: ignore[arg-type]
    trailing = data_t.ndim - axis - 1
    if trailing:
        scale = op_call("expand_dims", [scale], span, axis=1, num_newaxis=trailing)
        shift = op_call("expand_dims", [shift], span, axis=1, num_newaxis=trailing)
    return op_call("add", [op_call("multiply", [x, scale], span), shift], span)


def _dropout(call: Call, args: list[Expr]) -> Expr | None:
    return args[0]


# Operator → rewrite of `call.0` given the call's rewritten arguments (None: keep the call).
RULES: dict[str, Callable[[Call, list[Expr]], Expr | None]] = {
    "nn.batch_norm": _batch_norm,
    "nn.dropout": _dropout,
}


class _Simplifier(ExprMutator):
    def rewrite_tuple_get_item(self, node: TupleGetItem) -> Expr:
        call = node.tuple_value
        if node.index == 0 and isinstance(call, Call) and isinstance(call.op, Op) and call.op.name in RULES:
            out = RULES[call.op.name](call, [self.new(a) for a in call.args])
            if out is not None:
                return out
        return super().rewrite_tuple_get_item(node)


def _untyped_rule_input(func: Function) -> bool:
    return any(isinstance(n, Call) and isinstance(n.op, Op) and n.op.name in RULES and n.args
               and n.args[0].checked_type is None for n in post_order(func))


@dataclasses.dataclass
class SimplifyInferencePass(ModulePass):
    """Batch norm to multiply/add and dropout to identity, for inference."""

    name = "simplify-inference"
    description = "rewrite nn.batch_norm into multiply/add and nn.dropout into the identity"

    def apply(self, mod: IRModule) -> IRModule:
        # The batch-norm rule needs the data's rank and dtype; after verification they are known.
        if any(_untyped_rule_input(f) for _, f in mod.relay_functions()):
            infer_types(mod)
        out = mod.copy()
        for name, func in mod.relay_functions():
            out.functions[name] = _Simplifier().visit(func)  # type: ignore[assignment]
        return out
