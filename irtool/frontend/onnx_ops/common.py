"""The converter table and the helpers every converter family shares.

A converter receives the `Builder` (opset, typed calls) and the `Node` (input `Value`s with
static types, attributes) and returns one `Value` per ONNX output (None for an output it does
not produce, which is an error only when something reads it). Anything it cannot express
raises `Unsupported` with the reason; the importer reports all of them together.
Shapes are static: converters compute padding, slicing bounds and reshape targets in Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from irtool.frontend.onnx_values import Builder, Converter, DynamicShape, Node, Unsupported, Value, relay_dtype

CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of `op_types`."""
    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn
    return register


def int_list(value: object) -> list[int]:
    """An ONNX ints attribute or integer tensor as a Python list (None → [])."""
    return [int(v) for v in np.asarray(value).reshape(-1)] if value is not None else []


def norm_axis(axis: int, ndim: int) -> int:
    """A possibly negative ONNX axis as a non-negative one."""
    if not -ndim <= axis < max(ndim, 1):
        raise Unsupported(f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim if ndim else 0


def required(node: Node, i: int, what: str) -> Value:
    v = node.input(i)
    if v is None:
        raise Unsupported(f"input {i} ({what}) is missing")
    return v


def reshaped(b: Builder, x: Value, shape: Sequence[int]) -> Value:
    """x in `shape` (no call when it already has it). Relay's `newshape` reads 0 as "keep this
    size", so a shape with a zero size is the empty tensor of that shape instead."""
    if tuple(shape) == x.dims:
        return x
    if 0 in shape:
        return b.call("zeros", [], shape=tuple(int(d) for d in shape), dtype=x.dtype)
    return b.call("reshape", [x], newshape=tuple(int(d) for d in shape))


def regrouped(b: Builder, x: Value, lead: int, tail: Sequence[int]) -> Value:
    """x with its first `lead` axes kept as they are and the rest regrouped into the static
    `tail`: with static sizes a plain reshape; with symbolic (`?`) ones among the kept axes,
    Relay's `0` (copy this axis) keeps them without knowing them."""
    if x.tensor.is_static:
        return reshaped(b, x, x.shape[:lead] + tuple(tail))
    if tuple(x.dims[lead:]) == tuple(tail):
        return x
    if 0 in tail:   # Relay would read the 0 as "copy"
        raise DynamicShape(f"it regroups {x.tensor} into the empty axes {tuple(tail)}")
    return b.call("reshape", [x], newshape=(0,) * lead + tuple(int(d) for d in tail))


def scalar(b: Builder, value: float, dtype: str) -> Value:
    """A 0-d constant of the tensor's dtype (ONNX attributes are doubles; Relay wants the dtype)."""
    return b.const(np.asarray(value, dtype=np.dtype(dtype) if dtype != "bool" else np.bool_))


def transposed(b: Builder, x: Value, axes: Sequence[int]) -> Value:
    if list(axes) == list(range(x.ndim)):
        return x
    return b.call("transpose", [x], axes=tuple(axes))


def over_axis(b: Builder, node: Node, x: Value, apply: Callable[[Value, int], Value]) -> Value:
    """`apply(x, axis)` with the axis rule of Softmax, LogSoftmax and Hardmax: one axis (default
    -1) from opset 13; before it, the input coerced to 2-d at `axis` (default 1) and the rule
    applied along the second dimension."""
    if b.opset >= 13:
        return apply(x, norm_axis(int(node.attr("axis", -1)), x.ndim))  # type: ignore[call-overload]
    axis = norm_axis(int(node.attr("axis", 1)), x.ndim)  # type: ignore[call-overload]
    if axis == x.ndim - 1:
        return apply(x, axis)
    if not x.tensor.is_static:   # the leading axes kept as they are, the static tail merged
        tail = x.dims[axis:]
        symbolic = [axis + i for i, d in enumerate(tail) if not isinstance(d, int)]
        if symbolic:
            raise DynamicShape(f"it coerces {x.tensor} to 2-d at axis {axis}, merging the symbolic axis {symbolic[0]}")
        merged = regrouped(b, x, axis, (math.prod(tail),))  # type: ignore[arg-type]
        return regrouped(b, apply(merged, axis), axis, tail)  # type: ignore[arg-type]
    flat = reshaped(b, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
    return reshaped(b, apply(flat, 1), x.shape)


def extreme(dtype: str, lowest: bool) -> float | int | bool:
    """The smallest (or largest) value of `dtype`: ±inf for floats, False/True for bool."""
    if dtype == "bool":
        return not lowest
    if dtype.startswith(("float", "bfloat")):
        return -np.inf if lowest else np.inf
    info = np.iinfo(dtype)
    return int(info.min if lowest else info.max)


def empty_reduction(b: Builder, x: Value, axes: Sequence[int], keepdims: bool, value: float | int | bool) -> Value | None:
    """The result of a Reduce* over `axes` when one of them has no elements: `value` (what ONNX
    defines the reduction of nothing to be) everywhere. None when every reduced axis has elements."""
    if all(not isinstance(x.dims[a], int) or x.dims[a] for a in axes):
        return None   # (a `?` axis is taken to have elements)
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
    return b.call("full", [scalar(b, value, x.dtype)], shape=shape, dtype=x.dtype)


def broadcast_to(b: Builder, x: Value, shape: Sequence[int]) -> Value:
    """x expanded to `shape` (numpy broadcasting) as `x + zeros(shape)`, which fuses into one
    elementwise kernel (`logical_or` for bool)."""
    if tuple(shape) == x.shape:
        return x
    zeros = b.call("full", [scalar(b, 0, x.dtype)], shape=tuple(shape), dtype=x.dtype)
    return b.call("add" if x.dtype != "bool" else "logical_or", [x, zeros])


def onnx_dtype(code: int, what: str) -> str:
    """The Relay dtype of an ONNX element type given as an attribute (`to`, `output_dtype`, ...),
    through the importer's element-type gate (irtool/frontend/onnx_dtypes.py)."""
    from irtool.frontend.onnx_dtypes import dtype_of, onnx_type_name
    dtype = dtype_of(code)
    if dtype is None:
        raise Unsupported(f"{what}: {onnx_type_name(code)}")
    return dtype
