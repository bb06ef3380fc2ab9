"""Operators whose output extent depends on the data: `argwhere` (TVM), `nonzero` (ONNX's
layout of it), `unique` and `compress`. Each result has a `?` for the counted extent.

`argwhere` is TVM's. `unique` keeps TVM's name and `sorted` attribute, but where TVM pads its
results to the input's length and adds a `num_unique` count, these have the counted extent, and
always come as ONNX orders them: (values, indices, inverse_indices, counts), with ONNX's `axis`.

They are flagged `data_dependent` (`is_data_dependent`): fusion leaves them alone, lowering keeps
them as Relay calls, and native code runs each as a routine that counts, allocates the result
and fills it (irtool/codegen/data_dependent.py; docs/native-relay.md, "Data-dependent extents").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from irtool.ir.expr import AttrValue
from irtool.ir.types import Any, TensorType, TupleType, Type
from irtool.ops.definitions._common import check_domain, is_known, norm_axis, prod, tensor_arg
from irtool.ops.registry import AttrField, OpDef, OpPattern, TypeRelError, Value, get_op, register

Attrs = Mapping[str, AttrValue]
FLAG = "data_dependent"
INDEX_DTYPE = "int64"


def is_data_dependent(name: str) -> bool:
    """Whether the operator `name` has a result extent only its data decides."""
    op = get_op(name)
    return op is not None and bool(op.extra.get(FLAG))


# ---------------------------------------------------------------------------- argwhere, nonzero

def _argwhere_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("argwhere", types, 0, "condition")
    return TensorType((Any(), x.ndim), "int32")


def _argwhere(args: list[Value], attrs: Attrs) -> Value:
    return np.argwhere(args[0]).astype(np.int32)


register(OpDef("argwhere", 1, (), OpPattern.OPAQUE, _argwhere_rel, _argwhere,
               description="the coordinates of the non-zero elements, one row each, in row-major order",
               extra={FLAG: True}))


def _nonzero_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("nonzero", types, 0, "condition")
    return TensorType((x.ndim, Any()), INDEX_DTYPE)


def _nonzero(args: list[Value], attrs: Attrs) -> Value:
    return np.argwhere(args[0]).T.astype(np.int64)


register(OpDef("nonzero", 1, (), OpPattern.OPAQUE, _nonzero_rel, _nonzero,
               description="ONNX's NonZero: `transpose(cast(argwhere(x), int64))`, one row per axis",
               extra={FLAG: True}))


# -------------------------------------------------------------------------------------- unique

def slices_view(shape: Sequence[int], axis: int | None) -> tuple[int, int, int]:
    """A tensor as (outer, n, inner) around `axis` (or flattened: (1, size, 1)): the slices that
    `unique` and `compress` select are its `n` middle rows."""
    if axis is None:
        return 1, int(np.prod(shape, dtype=np.int64)), 1
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


def _axis(op: str, x: TensorType, attrs: Attrs) -> int | None:
    axis = attrs["axis"]
    return None if axis is None else norm_axis(op, int(axis), x.ndim)  # type: ignore[call-overload]


def _unique_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("unique", types, 0, "data")
    axis = _axis("unique", x, attrs)
    if axis is None:
        values = TensorType((Any(),), x.dtype)
        inverse = TensorType((prod(x.shape),), INDEX_DTYPE)
    else:
        values = TensorType(x.shape[:axis] + (Any(),) + x.shape[axis + 1:], x.dtype)
        inverse = TensorType((x.shape[axis],), INDEX_DTYPE)
    found = TensorType((Any(),), INDEX_DTYPE)
    return TupleType((values, found, inverse, found))


def _unique(args: list[Value], attrs: Attrs) -> Value:
    """numpy's `unique` (sorted), or in the order of first occurrence when `sorted` is false."""
    x = args[0]
    axis = None if attrs["axis"] is None else int(attrs["axis"]) % x.ndim  # type: ignore[call-overload]
    outer, n, inner = slices_view(x.shape, axis)
    rows = np.moveaxis(x.reshape(outer, n, inner), 1, 0).reshape(n, outer * inner)
    # Rows as tuples: equal rows are equal tuples, ordered lexicographically (numpy's row order),
    # NaN after every number and equal to NaN.
    keys = [tuple((v != v, 0 if v != v else v) for v in r) for r in rows.tolist()]
    first: dict[tuple, int] = {}
    for k, key in enumerate(keys):
        first.setdefault(key, k)
    order = sorted(first, key=lambda key: key) if attrs["sorted"] else list(first)
    indices = np.array([first[key] for key in order], np.int64)
    position = {key: i for i, key in enumerate(order)}
    inverse = np.array([position[key] for key in keys], np.int64)
    counts = np.bincount(inverse, minlength=len(order)).astype(np.int64)
    values = np.take(x.reshape(outer, n, inner), indices, axis=1)
    shape = (len(order),) if axis is None else x.shape[:axis] + (len(order),) + x.shape[axis + 1:]
    return values.reshape(shape), indices, inverse, counts


register(OpDef("unique", 1,
               (AttrField("sorted", "bool", True, doc="ascending (rows lexicographically); else first occurrence"),
                AttrField("axis", "int", None, optional=True, doc="None: the elements of the flattened data")),
               OpPattern.OPAQUE, _unique_rel, _unique,
               description="the distinct elements (or slices along an axis), the index of each one's first "
                           "occurrence, each input's position among them, and their counts",
               extra={FLAG: True}))


# ------------------------------------------------------------------------------------ compress

def _compress_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = tensor_arg("compress", types, 0, "data")
    cond = check_domain("compress", tensor_arg("compress", types, 1, "condition"), "any", "condition")
    if cond.ndim != 1:
        raise TypeRelError(f"compress: the condition must be 1-d, got {cond}")
    axis = _axis("compress", x, attrs)
    extent = prod(x.shape) if axis is None else x.shape[axis]
    if is_known(cond.shape[0]) and is_known(extent) and cond.shape[0] > extent:  # type: ignore[operator]
        raise TypeRelError(f"compress: a condition of {cond.shape[0]} values for {extent} slices of {x}")
    if axis is None:
        return TensorType((Any(),), x.dtype)
    return TensorType(x.shape[:axis] + (Any(),) + x.shape[axis + 1:], x.dtype)


def _compress(args: list[Value], attrs: Attrs) -> Value:
    x, cond = args
    axis = None if attrs["axis"] is None else int(attrs["axis"]) % x.ndim  # type: ignore[call-overload]
    extent = x.size if axis is None else x.shape[axis]
    if cond.shape[0] > extent:
        raise ValueError(f"compress: a condition of {cond.shape[0]} values for {extent} slices")
    return np.compress(cond.astype(bool), x, axis=axis)


register(OpDef("compress", 2,
               (AttrField("axis", "int", None, optional=True, doc="None: the elements of the flattened data"),),
               OpPattern.OPAQUE, _compress_rel, _compress,
               description="the slices along an axis whose condition is non-zero (slices past the "
                           "condition's end are dropped)",
               extra={FLAG: True}))
