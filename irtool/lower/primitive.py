"""One `Primitive=1` Relay function → one PrimFunc (TVM's LowerTE of one fused group).

Parameters become input buffers (a tuple-typed parameter one buffer per field), then each
operator's compute rule (`irtool.lower.rules`) builds a tensor expression, and `te.Builder` turns the result into
loop nests writing the output buffers (destination-passing style: inputs, then outputs); values a
store uses more than once become `let`s where expanding them would blow up (`lower.share`), and
index arithmetic is 64-bit in a kernel whose indices may exceed int32 (`tir_transform.index_width`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from irtool.ir.expr import Attrs, Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from irtool.ir.tir import Buffer, PrimFunc
from irtool.ir.types import TensorType, TupleType, Type
from irtool.ir.visitor import post_order
from irtool.lower.errors import LoweringError
from irtool.lower.rules import compute_rule
from irtool.lower.share import bind_shared
from irtool.lower.te import Builder, Compute, Placeholder, Tensor, imm
from irtool.ops.registry import get_op
from irtool.tir_transform.index_width import widen_indices
from irtool.core.diagnostics import DiagnosticError

TEValue = Tensor | tuple


def flatten_type(t: Type, where: Expr) -> list[TensorType]:
    """The tensors of a (nested) tuple type, in order; every dimension must be static."""
    out: list[TensorType] = []
    stack: list[Type] = [t]
    while stack:
        cur = stack.pop()
        if isinstance(cur, TupleType):
            stack.extend(reversed(cur.fields))
        elif isinstance(cur, TensorType):
            if not all(isinstance(d, int) for d in cur.shape):
                raise DiagnosticError(f"lower: dynamic shapes cannot be lowered ({cur})", where.span)
            out.append(cur)
        else:
            raise DiagnosticError(f"lower: a value of type {cur} cannot be lowered to buffers", where.span)
    return out


def type_of(expr: Expr, who: str = "lower") -> Type:
    """The inferred type (a parameter's annotation will do); `who` names the caller in the error."""
    t = expr.checked_type
    if t is None and isinstance(expr, Var):
        t = expr.type_annotation
    if t is None:
        raise DiagnosticError(f"{who}: expression has no inferred type (run type inference first)", expr.span)
    return t


def _flatten_value(v: TEValue) -> list[Tensor]:
    out: list[Tensor] = []
    stack: list[TEValue] = [v]
    while stack:
        cur = stack.pop()
        if isinstance(cur, tuple):
            stack.extend(reversed(cur))
        else:
            out.append(cur)
    return out


def _rebuild(t: Type, leaves: list[Tensor], pos: int) -> tuple[TEValue, int]:
    """A TE value of (tuple) type `t` from consecutive leaves; recursion only follows the nesting
    of one parameter's type, which is as deep as its written annotation."""
    if isinstance(t, TupleType):
        fields = []
        for f in t.fields:
            value, pos = _rebuild(f, leaves, pos)
            fields.append(value)
        return tuple(fields), pos
    return leaves[pos], pos + 1


@dataclass
class LoweredPrimitive:
    """The PrimFunc, and the constants of the Relay function that became extra inputs."""

    func: PrimFunc
    constants: list[Constant]
    op_names: list[str]


def lower_primitive(fn: Function) -> LoweredPrimitive:
    """Lowers a primitive function whose types have been inferred."""
    values: dict[int, TEValue] = {}
    inputs: list[Buffer] = []
    for k, p in enumerate(fn.params):
        leaves = flatten_type(type_of(p), p)
        bufs = [Buffer(f"p{k}" if len(leaves) == 1 and not isinstance(type_of(p), TupleType) else f"p{k}_{j}",
                       t.shape, t.dtype) for j, t in enumerate(leaves)]  # type: ignore[arg-type]
        inputs.extend(bufs)
        values[id(p)] = _rebuild(type_of(p), [Placeholder(b) for b in bufs], 0)[0]
    constants: list[Constant] = []
    const_bufs: list[Buffer] = []
    op_names: list[str] = []
    for node in post_order(fn.body):
        if id(node) in values:
            continue
        if isinstance(node, Var):
            raise DiagnosticError(f"lower: %{node.name_hint} is not a parameter of the primitive function",
                                  node.span)
        if isinstance(node, Constant):
            values[id(node)] = _constant(node, constants, const_bufs)
        elif isinstance(node, Call) and isinstance(node.op, Op):
            values[id(node)] = _lower_call(node, [values[id(a)] for a in node.args])
            op_names.append(node.op.name)
        elif isinstance(node, Op):
            continue
        elif isinstance(node, Tuple):
            values[id(node)] = tuple(values[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            values[id(node)] = values[id(node.tuple_value)][node.index]  # type: ignore[index]
        else:
            raise DiagnosticError(f"lower: a {type(node).__name__} inside a primitive function cannot be "
                                  "lowered", node.span)
    result = values[id(fn.body)]
    out_types = flatten_type(type_of(fn.body), fn.body)
    outputs = [Buffer("out" if len(out_types) == 1 else f"out{j}", t.shape, t.dtype)  # type: ignore[arg-type]
               for j, t in enumerate(out_types)]
    builder = Builder()
    body = bind_shared(builder.function_body(list(zip(_flatten_value(result), outputs))))
    func = widen_indices(PrimFunc([*inputs, *const_bufs, *outputs], body, Attrs({"num_outputs": len(outputs)}),
                                  fn.span))
    return LoweredPrimitive(func, constants, op_names)


def _constant(node: Constant, constants: list[Constant], const_bufs: list[Buffer]) -> Tensor:
    """A single-element constant (a scalar, or a 1-element tensor as the legacy exporter writes
    one) becomes an immediate; any other tensor constant an extra input buffer."""
    data = np.asarray(node.data)
    dtype = str(data.dtype)
    if data.size == 1:
        value = imm(data.reshape(()).item(), dtype)
        return Compute(data.shape, dtype, lambda ctx, idx: value, "const")
    buf = Buffer(f"c{len(constants)}", data.shape, dtype)
    constants.append(node)
    const_bufs.append(buf)
    return Placeholder(buf)


def _lower_call(call: Call, args: list[TEValue]) -> TEValue:
    name = call.op.name  # type: ignore[union-attr]
    op = get_op(name)
    compute = compute_rule(name)
    if op is None or compute is None:
        raise DiagnosticError(f"lower: operator `{name}` has no TIR compute rule and cannot be part of a "
                              "primitive function", call.span)
    try:
        return compute(args, op.full_attrs(call.attrs), type_of(call))  # type: ignore[return-value]
    except LoweringError as e:
        raise DiagnosticError(f"lower: `{name}` {e}", call.span) from None
