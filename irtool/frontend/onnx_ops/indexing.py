"""Gathers, scatters, one-hot, top-k, scans, ranges, triangles, einsum and the block moves.

ONNX lists an index tuple along the indices' last axis; TVM's `gather_nd` and `scatter_nd` (and
so irtool's) along the first, so those converters move that axis to the front.
"""

from __future__ import annotations

import math

import numpy as np

from irtool.frontend.onnx_ops.common import broadcast_to, converter, int_list, norm_axis, required, reshaped, scalar, transposed
from irtool.frontend.onnx_ops.einsum import einsum
from irtool.frontend.onnx_dtypes import dtype_of, onnx_type_name
from irtool.frontend.onnx_values import Builder, Node, Unsupported, Value


def tuples_first(b: Builder, indices: Value) -> Value:
    """ONNX's index tuples (last axis) as TVM's (first axis)."""
    return transposed(b, indices, [indices.ndim - 1] + list(range(indices.ndim - 1)))


@converter("GatherElements")
def _gather_elements(b: Builder, node: Node) -> list[Value | None]:
    x, indices = required(node, 0, "data"), required(node, 1, "indices")
    return [b.call("gather", [x, indices], axis=norm_axis(int(node.attr("axis", 0)), x.ndim))]  # type: ignore[call-overload]


@converter("GatherND")
def _gather_nd(b: Builder, node: Node) -> list[Value | None]:
    x, indices = required(node, 0, "data"), required(node, 1, "indices")
    return [b.call("gather_nd", [x, tuples_first(b, indices)], batch_dims=int(node.attr("batch_dims", 0)))]  # type: ignore[call-overload]


def _reduction(node: Node) -> str:
    reduction = str(node.attr("reduction", "none"))
    if reduction not in ("none", "add", "mul", "min", "max"):
        raise Unsupported(f"reduction {reduction!r}")
    return "update" if reduction == "none" else reduction


@converter("ScatterElements", "Scatter")
def _scatter_elements(b: Builder, node: Node) -> list[Value | None]:
    x, indices, updates = (required(node, i, what) for i, what in enumerate(("data", "indices", "updates")))
    return [b.call("scatter_elements", [x, indices, updates], axis=norm_axis(int(node.attr("axis", 0)), x.ndim),  # type: ignore[call-overload]
                   reduction=_reduction(node))]


@converter("TensorScatter")
def _tensor_scatter(b: Builder, node: Node) -> list[Value | None]:
    """A key/value cache update (opset 24): row s of `update` goes to position
    write_indices[batch] + s along `axis` (modulo the cache length in `circular` mode), one
    `scatter_elements` whose indices are that sum broadcast over the update."""
    cache, update = required(node, 0, "past_cache"), required(node, 1, "update")
    axis = norm_axis(int(node.attr("axis", -2)), cache.ndim)  # type: ignore[call-overload]
    mode = str(node.attr("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise Unsupported(f"mode {mode}")
    if axis == 0:
        raise Unsupported("axis 0 (the batch axis)")
    shape, length = cache.shape, update.shape[axis]
    if update.ndim != cache.ndim or any(u != c for i, (u, c) in enumerate(zip(update.shape, shape)) if i != axis) \
            or length > shape[axis]:
        raise Unsupported(f"an update of shape {update.shape} for a cache of shape {shape} along axis {axis}")
    ones = [1] * cache.ndim
    rows = np.arange(length, dtype=np.int64).reshape(ones[:axis] + [length] + ones[axis + 1:])
    index = b.const(rows)
    starts = node.input(2)
    if starts is not None:
        wide = starts if starts.dtype == "int64" else b.call("cast", [starts], dtype="int64")
        index = b.call("add", [reshaped(b, wide, (shape[0],) + (1,) * (cache.ndim - 1)), index])
    if mode == "circular":
        index = b.call("floor_mod", [index, scalar(b, shape[axis], "int64")])
    return [b.call("scatter_elements", [cache, broadcast_to(b, index, update.shape), update], axis=axis)]


@converter("ScatterND")
def _scatter_nd(b: Builder, node: Node) -> list[Value | None]:
    x, indices, updates = (required(node, i, what) for i, what in enumerate(("data", "indices", "updates")))
    return [b.call("scatter_nd", [x, tuples_first(b, indices), updates], mode=_reduction(node))]


@converter("OneHot")
def _one_hot(b: Builder, node: Node) -> list[Value | None]:
    indices = required(node, 0, "indices")
    depth = int(np.asarray(b.static(node.input(1), "depth")).reshape(-1)[0])
    values = required(node, 2, "values")
    if depth < 1:
        raise Unsupported(f"depth {depth}")
    if not indices.dtype.startswith(("int", "uint")):  # float indices count as their integer part
        indices = b.call("cast", [indices], dtype="int64")
    if not indices.dtype.startswith("uint"):  # [-depth, -1] count from the end
        wrapped = b.call("add", [indices, scalar(b, depth, indices.dtype)])
        indices = b.call("where", [b.call("less", [indices, scalar(b, 0, indices.dtype)]), wrapped, indices])
    if values.const is not None:
        off, on = (b.const(np.asarray(v)) for v in values.const.reshape(-1)[:2])
    else:
        off, on = (b.call("take", [values, b.const(np.array(i, np.int64))], axis=0) for i in (0, 1))
    axis = int(node.attr("axis", -1))  # type: ignore[call-overload]
    return [b.call("one_hot", [indices, on, off], depth=depth, axis=axis, dtype=values.dtype)]


@converter("TopK")
def _topk(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "X")
    k = int(node.attr("k")) if b.opset < 10 else int(np.asarray(b.static(node.input(1), "K")).reshape(-1)[0])  # type: ignore[call-overload]
    axis = norm_axis(int(node.attr("axis", -1)), x.ndim)  # type: ignore[call-overload]
    if not 1 <= k <= x.shape[axis]:
        raise Unsupported(f"k = {k} for an axis of {x.shape[axis]}")
    both = b.call("topk", [x], k=k, axis=axis, is_ascend=not int(node.attr("largest", 1)), dtype="int64")  # type: ignore[call-overload]
    return [b.item(both, 0), b.item(both, 1)]


def reversed_along(b: Builder, x: Value, axis: int) -> Value:
    n = x.shape[axis]
    return b.call("strided_slice", [x], begin=(n - 1,), end=(-n - 1,), strides=(-1,), axes=(axis,))


@converter("CumSum", "CumProd")
def _scan(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "x")
    axis = norm_axis(int(np.asarray(b.static(node.input(1), "axis")).reshape(-1)[0]), x.ndim)
    reverse = bool(node.attr("reverse", 0))
    src = reversed_along(b, x, axis) if reverse else x
    out = b.call("cumsum" if node.op_type == "CumSum" else "cumprod", [src], axis=axis,
                 exclusive=bool(node.attr("exclusive", 0)))
    return [reversed_along(b, out, axis) if reverse else out]


@converter("Range")
def _range(b: Builder, node: Node) -> list[Value | None]:
    # The bounds fix the result's length, so they must be known at import (irtool's shapes are
    # static); graph inputs are bound from the values given, as shape inputs are.
    bounds = [np.asarray(b.static(node.input(i), what)).reshape(-1)[0]
              for i, what in enumerate(("start", "limit", "delta"))]
    dtype = required(node, 0, "start").dtype
    start, stop, step = (float(v) for v in bounds)
    if step == 0:
        raise Unsupported("delta 0")
    # float16/bfloat16 ranges are computed in float32 (stash_type 1) and converted back.
    wide = "float32" if dtype in ("float16", "bfloat16") and int(node.attr("stash_type", 1)) == 1 else dtype
    out = b.call("arange", [], start=start, stop=stop, step=step, dtype=wide)
    return [out if wide == dtype else b.call("cast", [out], dtype=dtype)]


@converter("Compress")
def _compress(b: Builder, node: Node) -> list[Value | None]:
    """The slices along `axis` (of the flattened input without one) whose condition is true: a
    `take` of the chosen slices when the condition is known at import time, else `compress`,
    whose extent is counted at run time."""
    x = required(node, 0, "input")
    axis_attr = node.attr("axis")
    axis = None if axis_attr is None else norm_axis(int(axis_attr), x.ndim)  # type: ignore[call-overload]
    given = required(node, 1, "condition")
    try:
        condition = np.asarray(b.static(given, "condition")).reshape(-1)
    except Unsupported:   # computed from graph inputs or weights
        return [b.call("compress", [x, given], axis=axis)]
    if axis is None:
        x, axis = reshaped(b, x, (math.prod(x.shape),)), 0
    if condition.size > x.shape[axis]:
        raise Unsupported(f"a condition of {condition.size} values for an axis of size {x.shape[axis]}")
    index = np.flatnonzero(condition).astype(np.int64)
    if not index.size:
        return [reshaped(b, x, x.shape[:axis] + (0,) + x.shape[axis + 1:])]
    return [b.call("take", [x, b.const(index)], axis=axis)]


@converter("NonZero")
def _nonzero(b: Builder, node: Node) -> list[Value | None]:
    """The coordinates of the non-zero elements, one row per axis: `nonzero` (TVM's `argwhere`
    transposed), its extent counted at run time."""
    return [b.call("nonzero", [required(node, 0, "X")])]


@converter("Unique")
def _unique(b: Builder, node: Node) -> list[Value | None]:
    """The distinct elements (or slices along `axis`), sorted or in order of first occurrence,
    with the first index of each, each input's position among them and their counts."""
    x = required(node, 0, "X")
    axis_attr = node.attr("axis")
    axis = None if axis_attr is None else norm_axis(int(axis_attr), x.ndim)  # type: ignore[call-overload]
    out = b.call("unique", [x], sorted=bool(node.attr("sorted", 1)), axis=axis)
    return [b.item(out, k) for k in range(4)][:max(node.num_outputs, 1)]


@converter("Trilu")
def _trilu(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input")
    k = node.input(1) or b.const(np.array(0, np.int64))
    if k.ndim:
        k = b.call("reshape", [k], newshape=())
    return [b.call("trilu", [x, k], upper=bool(node.attr("upper", 1)))]


@converter("Einsum")
def _einsum(b: Builder, node: Node) -> list[Value | None]:
    return [einsum(b, str(node.attr("equation")), [v for v in node.inputs if v is not None])]


@converter("EyeLike")
def _eye_like(b: Builder, node: Node) -> list[Value | None]:
    """Ones where column - row = k: a comparison of two small constant ranges, broadcast."""
    x = required(node, 0, "input")
    if x.ndim != 2:
        raise Unsupported(f"a rank-{x.ndim} input (EyeLike is 2-d)")
    to = node.attr("dtype")
    dtype = x.dtype if to is None else dtype_of(int(to))  # type: ignore[call-overload]
    if dtype is None:
        raise Unsupported(subject=f"EyeLike to {onnx_type_name(int(to))}")  # type: ignore[call-overload]
    rows, cols = x.shape
    k = int(node.attr("k", 0))  # type: ignore[call-overload]
    row = b.const((np.arange(rows, dtype=np.int64) + k).reshape(rows, 1))
    diagonal = b.call("equal", [row, b.const(np.arange(cols, dtype=np.int64))])
    return [diagonal if dtype == "bool" else b.call("cast", [diagonal], dtype=dtype)]


@converter("ReverseSequence")
def _reverse_sequence(b: Builder, node: Node) -> list[Value | None]:
    x, lengths = required(node, 0, "input"), required(node, 1, "sequence_lens")
    return [b.call("reverse_sequence", [x, lengths], seq_axis=int(node.attr("time_axis", 0)),  # type: ignore[call-overload]
                   batch_axis=int(node.attr("batch_axis", 1)))]  # type: ignore[call-overload]


@converter("CenterCropPad")
def _center_crop_pad(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input_data")
    shape = int_list(b.static(node.input(1), "shape"))
    axes = [norm_axis(a, x.ndim) for a in int_list(node.attr("axes"))] or list(range(x.ndim))
    if len(axes) != len(shape) or any(s < 0 for s in shape):
        raise Unsupported(f"shape {shape} for axes {axes}")
    begin, end = [0] * x.ndim, list(x.shape)
    pads = [(0, 0)] * x.ndim
    for axis, size in zip(axes, shape):
        n = x.shape[axis]
        if size < n:  # a centred window; an odd surplus leaves the extra element at the end
            begin[axis] = (n - size) // 2
            end[axis] = begin[axis] + size
        elif size > n:
            before = (size - n) // 2
            pads[axis] = (before, size - n - before)
    out = x
    if (begin, end) != ([0] * x.ndim, list(x.shape)):
        out = b.call("strided_slice", [out], begin=tuple(begin), end=tuple(end))
    if any(p != (0, 0) for p in pads):
        out = b.call("nn.pad", [out, scalar(b, 0, x.dtype)], pad_width=tuple(pads))
    return [out]


@converter("DepthToSpace", "SpaceToDepth")
def _subpixel(b: Builder, node: Node) -> list[Value | None]:
    x = required(node, 0, "input")
    if x.ndim != 4:
        raise Unsupported(f"a rank-{x.ndim} input (the block moves are NCHW)")
    op = "nn.depth_to_space" if node.op_type == "DepthToSpace" else "nn.space_to_depth"
    return [b.call(op, [x], block_size=int(node.attr("blocksize")), mode=str(node.attr("mode", "DCR")))]  # type: ignore[call-overload]
