"""Shapes computed from symbolic sizes, as exporters write a reshape of a tensor with `?` axes:
`Shape` → `Gather` → (`Mul`) → `Unsqueeze` → `Concat` → `Reshape`.

The importer has no run-time shape operator: `Shape` of a tensor with `?` axes is a `Value`
whose `sizes` say each entry as a product of an integer and `?` extents (`Size`), and the nodes
below compute on those entries at import time. `Reshape` then turns them into Relay's
`newshape`: an entry that is the reshaped tensor's own `?` at the same position is `0` (keep
it), one entry left unknown is `-1` (inferred from the element count). Any other use of such a
shape (an arithmetic the table does not hold, a graph output) is a `DynamicShape` error naming
the node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from irtool.frontend.onnx_ops.common import int_list, norm_axis, required
from irtool.frontend.onnx_values import Builder, DynamicShape, Node, Size, Unsupported, Value
from irtool.ir.expr import Var
from irtool.ir.types import TensorType


def reads_sizes(op_type: str, inputs: list[Value | None]) -> bool:
    """Whether the node goes through `convert`: a Shape or Size of a tensor with `?` axes, or any node
    reading such a shape."""
    if op_type in ("Shape", "Size") and inputs and inputs[0] is not None and not inputs[0].tensor.is_static:
        return True
    return any(v is not None and v.sizes is not None for v in inputs)


def convert(b: Builder, node: Node) -> list[Value | None]:
    rule = _RULES.get(node.op_type)
    if rule is None:
        raise DynamicShape(f"it computes with a shape read from a tensor with symbolic axes ({node.op_type} "
                           "of such a shape is not followed at import time)")
    return [rule(b, node)]


def _sized(b: Builder, entries: list[Size], scalar: bool = False) -> Value:
    """The value of `entries` (a 0-d one when `scalar`): a constant when they are all known."""
    if all(not e.symbols for e in entries):
        data = np.array([e.factor for e in entries], dtype=np.int64)
        return b.const(data.reshape(()) if scalar else data)
    ty = TensorType(() if scalar else (len(entries),), "int64")
    return Value(Var("symbolic_shape", ty), ty, sizes=tuple(entries))


def _entries(v: Value | None, what: str) -> list[Size]:
    """The entries of a shape value: its `sizes`, or its contents when it is an integer constant."""
    if v is None:
        raise Unsupported(f"{what} is missing")
    if v.sizes is not None:
        return list(v.sizes)
    if v.const is None or v.const.dtype.kind not in "iu" or v.const.ndim > 1:
        raise DynamicShape(f"it combines a shape read from a tensor with symbolic axes with {what}, "
                           f"a {v.tensor} that is not an integer constant")
    return [Size(int(d)) for d in v.const.reshape(-1)]


def _is_scalar(v: Value | None) -> bool:
    return v is not None and v.ndim == 0


def _shape(b: Builder, node: Node) -> Value:
    x = required(node, 0, "data")
    start, end = int(node.attr("start", 0)), node.attr("end")  # type: ignore[call-overload]
    entries = [Size(d) if isinstance(d, int) else Size(1, (d,)) for d in x.dims]
    return _sized(b, entries[start:None if end is None else int(end)])  # type: ignore[call-overload]


def _size(b: Builder, node: Node) -> Value:
    product = Size(1)
    for e in _entries(_shape(b, node), "data"):
        product = product.times(e)
    return _sized(b, [product], scalar=True)


def _gather(b: Builder, node: Node) -> Value:
    data, indices = required(node, 0, "data"), required(node, 1, "indices")
    entries = _entries(data, "data")
    if data.ndim != 1 or norm_axis(int(node.attr("axis", 0)), 1) != 0 or indices.const is None:  # type: ignore[call-overload]
        raise DynamicShape("it gathers from a shape read from a tensor with symbolic axes with indices known "
                           "only at run time")
    picked = []
    for i in indices.const.reshape(-1):
        if not -len(entries) <= int(i) < len(entries):
            raise Unsupported(f"index {int(i)} out of range for a shape of {len(entries)} entries")
        picked.append(entries[int(i)])
    return _sized(b, picked, scalar=indices.ndim == 0)


def _unsqueeze(b: Builder, node: Node) -> Value:
    x = required(node, 0, "data")
    axes = int_list(node.attr("axes")) if b.opset < 13 else int_list(b.static(node.input(1), "axes"))
    if x.ndim != 0 or axes not in ([0], [-1]):
        raise DynamicShape(f"it unsqueezes axes {axes} of a rank-{x.ndim} shape read from a tensor with symbolic axes")
    return _sized(b, _entries(x, "data"))


def _squeeze(b: Builder, node: Node) -> Value:
    entries = _entries(required(node, 0, "data"), "data")
    if len(entries) != 1:
        raise DynamicShape(f"it squeezes a shape of {len(entries)} entries")
    return _sized(b, entries, scalar=True)


def _concat(b: Builder, node: Node) -> Value:
    parts = [v for v in node.inputs if v is not None]
    if any(v.ndim != 1 for v in parts):
        raise DynamicShape("it concatenates a shape read from a tensor with symbolic axes with a tensor that is not 1-d")
    return _sized(b, [e for k, v in enumerate(parts) for e in _entries(v, f"input {k}")])


def _mul(b: Builder, node: Node) -> Value:
    x, y = required(node, 0, "A"), required(node, 1, "B")
    left, right = _entries(x, "A"), _entries(y, "B")
    if len(left) == 1 and len(right) != 1:
        left = left * len(right)
    elif len(right) == 1:
        right = right * len(left)
    if len(left) != len(right):
        raise Unsupported(f"Mul of shapes of {len(left)} and {len(right)} entries")
    return _sized(b, [p.times(q) for p, q in zip(left, right)], scalar=_is_scalar(x) and _is_scalar(y))


def _div(b: Builder, node: Node) -> Value:
    """A division by a constant that divides the integer factor (the element count over a
    row's size, as `-1` would infer it)."""
    x, y = required(node, 0, "A"), required(node, 1, "B")
    divisors = [e.factor for e in _entries(y, "B") if not e.symbols]
    entries = _entries(x, "A")
    if y.sizes is not None or len(divisors) != 1 or not divisors[0] or any(e.factor % divisors[0] for e in entries):
        raise DynamicShape("it divides a shape read from a tensor with symbolic axes by something other than "
                           "a constant that divides it")
    return _sized(b, [Size(e.factor // divisors[0], e.symbols) for e in entries], scalar=_is_scalar(x))


def _identity(b: Builder, node: Node) -> Value:
    x = required(node, 0, "input")
    if node.op_type == "Cast" and int(node.attr("to")) not in (6, 7):  # type: ignore[call-overload]
        raise DynamicShape("it casts a shape read from a tensor with symbolic axes to a type other than int32 or int64")
    return _sized(b, _entries(x, "input"), scalar=_is_scalar(x))


def _slice(b: Builder, node: Node) -> Value:
    entries = _entries(required(node, 0, "data"), "data")
    if b.opset < 10:
        starts, ends, steps = int_list(node.attr("starts")), int_list(node.attr("ends")), [1]
    else:
        starts, ends = int_list(b.static(node.input(1), "starts")), int_list(b.static(node.input(2), "ends"))
        steps = int_list(b.static(node.input(4), "steps")) if node.input(4) is not None else [1]
    if len(starts) != 1 or len(ends) != 1 or len(steps) != 1 or steps[0] == 0:
        raise Unsupported(f"a slice {starts}:{ends}:{steps} of a 1-d shape")
    return _sized(b, entries[slice(starts[0], ends[0], steps[0])])


def _reshape(b: Builder, node: Node) -> Value:
    """Entries that are the data's own `?` at their position become 0, one other unknown -1."""
    data = required(node, 0, "data")
    if data.sizes is not None:
        raise DynamicShape("it reshapes a shape read from a tensor with symbolic axes")
    if node.attr("allowzero", 0):
        raise DynamicShape("allowzero=1 with a shape read from a tensor with symbolic axes")
    newshape: list[int] = []
    unknown: list[int] = []
    for i, e in enumerate(_entries(node.input(1), "shape")):
        if not e.symbols:
            newshape.append(e.factor)
        elif e.factor == 1 and len(e.symbols) == 1 and i < data.ndim and data.dims[i] is e.symbols[0]:
            newshape.append(0)
        else:
            unknown.append(i)
            newshape.append(-1)
    if len(unknown) > 1 or (unknown and newshape.count(-1) > 1):
        raise DynamicShape(f"it reshapes {data.tensor} to a shape whose entries {unknown} are products of symbolic "
                           "sizes it cannot place (only one may be inferred)")
    return b.call("reshape", [data], newshape=tuple(newshape))


_RULES: dict[str, Callable[[Builder, Node], Value]] = {
    "Shape": _shape, "Size": _size, "Gather": _gather, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Concat": _concat,
    "Mul": _mul, "Div": _div, "Cast": _identity, "Identity": _identity, "Slice": _slice, "Reshape": _reshape}
