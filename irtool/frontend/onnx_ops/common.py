"""The converter table and the helpers every converter family shares.

A converter receives the `Builder` (opset, typed calls) and the `Node` (input `Value`s with
static types, attributes) and returns one `Value` per ONNX output (None for an output it does
not produce, which is an error only when something reads it). Anything it cannot express
raises `Unsupported` with the reason; the importer reports all of them together.
Shapes are static: converters compute padding, slicing bounds and reshape targets in Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from irtool.frontend.onnx_values import Builder, Converter, Node, Unsupported, Value, relay_dtype

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
    """x in `shape` (no call when it already has it; a 0 in `shape` is an empty axis)."""
    if tuple(shape) == x.shape:
        return x
    return b.call("reshape", [x], newshape=tuple(int(d) for d in shape), allowzero=0 in shape)


def scalar(b: Builder, value: float, dtype: str) -> Value:
    """A 0-d constant of the tensor's dtype (ONNX attributes are doubles; Relay wants the dtype)."""
    return b.const(np.asarray(value, dtype=np.dtype(dtype) if dtype != "bool" else np.bool_))


def transposed(b: Builder, x: Value, axes: Sequence[int]) -> Value:
    if list(axes) == list(range(x.ndim)):
        return x
    return b.call("transpose", [x], axes=tuple(axes))


def broadcast_to(b: Builder, x: Value, shape: Sequence[int]) -> Value:
    """x expanded to `shape` (numpy broadcasting) as `x + zeros(shape)`, which fuses into one
    elementwise kernel (`logical_or` for bool)."""
    if tuple(shape) == x.shape:
        return x
    zeros = b.call("full", [scalar(b, 0, x.dtype)], shape=tuple(shape), dtype=x.dtype)
    return b.call("add" if x.dtype != "bool" else "logical_or", [x, zeros])


def onnx_dtype(code: int, what: str) -> str:
    """The Relay dtype of an ONNX element type given as an attribute (`to`, `output_dtype`, ...)."""
    from onnx import helper
    try:
        return relay_dtype(np.dtype(helper.tensor_dtype_to_np_dtype(code)))
    except (KeyError, TypeError, ValueError):
        raise Unsupported(f"{what}: ONNX element type {code}") from None
