"""Math operators that are not one Relay call each: Reciprocal, IsInf's sign choice, Mod's two
remainders, BitShift's direction, CastLike (through Cast's converter) and Hardmax.

(The math functions and bit operations that map one to one are rows of elementwise.py's tables.)
"""

from __future__ import annotations

import numpy as np

from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value
from irtool.frontend.onnx_ops.common import CONVERTERS, converter, over_axis, required, scalar


@converter("Reciprocal")
def _reciprocal(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    return [b.call("divide", [scalar(b, 1, x.dtype), x])]


@converter("IsInf")
def _isinf(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    negative, positive = int(node.attr("detect_negative", 1)), int(node.attr("detect_positive", 1))  # type: ignore[call-overload]
    if negative and positive:
        return [b.call("isinf", [x])]
    if negative or positive:
        return [b.call("equal", [x, scalar(b, -np.inf if negative else np.inf, x.dtype)])]
    return [b.call("full", [scalar(b, False, "bool")], shape=x.shape, dtype="bool")]


@converter("Mod")
def _mod(b: Builder, node: Node) -> list[Value | None]:
    # fmod=1: C's remainder (the dividend's sign); fmod=0: Python's (the divisor's sign).
    op = "mod" if int(node.attr("fmod", 0)) else "floor_mod"  # type: ignore[call-overload]
    return [b.call(op, [required(node, 0, "A"), required(node, 1, "B")])]


@converter("BitShift")
def _bit_shift(b: Builder, node: Node) -> list[Value | None]:
    direction = str(node.attr("direction", ""))
    if direction not in ("LEFT", "RIGHT"):
        raise Unsupported(f"direction '{direction}' (LEFT or RIGHT)")
    op = "left_shift" if direction == "LEFT" else "right_shift"
    return [b.call(op, [required(node, 0, "X"), required(node, 1, "Y")])]


@converter("CastLike")
def _cast_like(b: Builder, node: Node) -> list[Value | None]:
    """Cast to the second input's dtype, refused or converted exactly as Cast would be."""
    from onnx import helper
    target = required(node, 1, "target_type").dtype
    try:
        to = helper.np_dtype_to_tensor_dtype(np.dtype("bool" if target == "bool" else target))
    except (KeyError, TypeError, ValueError):
        raise Unsupported(f"cast to {target}") from None
    attrs = {"to": to, **{k: v for k, v in node.attrs.items() if k == "saturate"}}
    cast = Node("Cast", node.name, [required(node, 0, "input")], attrs, 1, node.used_outputs)
    return CONVERTERS["Cast"](b, cast)


def _hardmax_along(b: Builder, x: Value, axis: int) -> Value:
    """1 at the first maximum along `axis`, 0 elsewhere."""
    first = b.call("argmax", [x], axis=(axis,), keepdims=True)
    positions = np.arange(x.shape[axis], dtype=np.int32).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return b.call("cast", [b.call("equal", [first, b.const(positions)])], dtype=x.dtype)


@converter("Hardmax")
def _hardmax(b: Builder, node: Node) -> list[Value | None]:
    return [over_axis(b, node, required(node, 0, "input"), lambda v, axis: _hardmax_along(b, v, axis))]
